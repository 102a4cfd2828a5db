"""Metric specs drive the main table: a spec for a metric the results hold adds a column to the
markdown and to the site, with its cells, its header's note and its caption sentence
(lenbench/leaderboard/metric_specs.py, CONTRIBUTING.md "Adding a metric to the leaderboard")."""

from __future__ import annotations

import html
import statistics
from pathlib import Path

import pytest
from helpers.leaderboard import board_text

from lenbench.leaderboard import build_leaderboard, metric_specs
from lenbench.leaderboard.metric_specs import MetricSpec, main_spec, mean_std_of
from lenbench.leaderboard.rows import build_rows, main_header, main_legend
from lenbench.results import load_results

GOLDEN = Path(__file__).parent / "data" / "golden_results"

RMSE = MetricSpec("static.rmse", "RMSE", mean_std_of(1),
                  note="root mean squared error of the total length, tokens",
                  caption="RMSE: root mean squared error of the total length in tokens, mean ± "
                          "sample std over seeds.")


def _main_table(md: str) -> list[list[str]]:
    """The cells of the first table under the world's heading, header row first."""
    lines = md.split("| Predictor |", 1)[1].split("\n\n", 1)[0].splitlines()
    rows = ["| Predictor |" + lines[0], *lines[2:]]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in rows]


def test_the_built_in_specs_give_the_main_table_its_columns() -> None:
    assert main_header() == ["Predictor", "Static MAE", "95% CI", "Uncens. MAE", "C-index",
                             "Runaway AUC", "Within ±25%", "Dynamic MAE", "Fit (s)",
                             "ms/request", "Params", "Audit", "Seeds"]
    assert [s.delta for s in metric_specs.MAIN_METRICS if s.delta] == ["static", "dynamic"]
    assert main_legend().startswith(main_spec("static.mae").caption + " 95% CI: ")
    with pytest.raises(KeyError, match="add a MetricSpec"):
        main_spec("static.rmse")


def test_a_registered_spec_is_a_column_in_the_markdown_and_on_the_site(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _main_table(board_text(build_leaderboard(GOLDEN, tmp_path / "before", site=False)))
    assert "RMSE" not in before[0]
    specs = metric_specs.MAIN_METRICS
    monkeypatch.setattr(metric_specs, "MAIN_METRICS", (*specs[:6], RMSE, *specs[6:]))
    out = tmp_path / "board"
    md = board_text(build_leaderboard(GOLDEN, out))

    table = _main_table(md)
    at = table[0].index("RMSE")
    assert table[0][at - 1] == "Within ±25%"
    assert [row[:at] + row[at + 1:] for row in table] == before  # every other cell as it was
    rows, _ = build_rows([r for r in load_results(GOLDEN)[0] if r.ok])
    probe = next(row for row in rows if row.label == "mlp_probe")
    rmse = [r.metrics.static["rmse"] for r in probe.results]
    shown = f"{statistics.fmean(rmse):.1f} ± {statistics.stdev(rmse):.1f}"
    assert next(row for row in table if row[0] == "mlp_probe")[at] == shown
    assert RMSE.caption in md.split("| Predictor |", 1)[1]  # the caption under the table

    page = (out / "world-toyworld__toy.html").read_text(encoding="utf-8")
    assert f'title="{html.escape(RMSE.note)}">RMSE</button>' in page  # header and its note
    assert f">{shown}</td>" in page
    assert html.escape(RMSE.caption) in page  # in the page's glossary
    index = (out / "index.html").read_text(encoding="utf-8")
    assert html.escape(RMSE.caption) in index  # the overview's glossary holds the main caption


def test_better_sets_which_values_rank_first() -> None:
    class Seeds:
        def values(self, key: str) -> list[float]:
            return [0.25, 0.75]

    higher = MetricSpec("static.x", "X", mean_std_of(2), better="higher")
    lower = MetricSpec("static.x", "X", mean_std_of(2))
    assert higher.rank_value(Seeds()) == -0.5 and lower.rank_value(Seeds()) == 0.5
    assert higher.cell(Seeds()) == "0.50 ± 0.35"
