"""The tidy results table: every figure of a results folder, traceable to its JSON."""

from __future__ import annotations

import json
import math

import pandas as pd
from helpers.cli import REPO
from helpers.leaderboard import GOLDEN, board_text, synthetic_result

from lenbench.leaderboard.document import main
from lenbench.leaderboard.table import COLUMNS, load_table, result_rows, results_table
from lenbench.results import load_results


def _value(table: pd.DataFrame, **where) -> float:
    rows = table
    for column, wanted in where.items():
        rows = rows[rows[column] == wanted]
    assert len(rows) == 1, (where, rows)
    return float(rows["value"].iloc[0])


def test_every_number_in_a_result_is_a_row_with_its_value():
    results, problems = load_results(GOLDEN)
    assert results and all("broken" in p for p in problems)  # the folder's deliberately bad file
    table = results_table(results)
    assert list(table.columns) == COLUMNS
    for r in results:
        if r.status != "ok":
            assert result_rows(r) == []  # a failed run has no figures
            continue
        who = {"predictor": r.predictor.name, "seed": r.seed, "variant": ""}
        static = r.metrics.static
        assert _value(table, metric="static.mae", **who) == static["mae"]
        low, high = static["mae_ci"]
        assert _value(table, metric="static.mae_ci_low", **who) == low
        assert _value(table, metric="static.mae_ci_high", **who) == high
        for key, value in r.timings.items():
            if isinstance(value, int | float) and math.isfinite(value):
                assert _value(table, metric=f"timings.{key}", **who) == value
        for variant, block in r.metrics.variants.items():
            assert _value(table, metric="static.mae", predictor=who["predictor"],
                          seed=r.seed, variant=variant) == block["mae"]
        dynamic = r.metrics.dynamic
        if dynamic:
            assert _value(table, metric="dynamic.mae", **who) == dynamic["mae"]


def test_seeds_and_predictors_stay_apart_and_failed_runs_add_no_figures(tmp_path):
    res = tmp_path / "results"
    synthetic_result(res, "alpha", 0, fit_s=1.5)
    synthetic_result(res, "alpha", 1, fit_s=2.5)
    synthetic_result(res, "beta", 0, fit_s=9.0)
    first = json.loads(next(res.rglob("*.json")).read_text())
    (res / "not_json.json").write_text("{")
    table, problems = load_table(res)
    assert len(problems) == 1 and "not_json.json" in problems[0]
    fit = table[table["metric"] == "timings.fit_s"].set_index(["predictor", "seed"])["value"]
    assert fit.to_dict() == {("alpha", 0): 1.5, ("alpha", 1): 2.5, ("beta", 0): 9.0}
    assert set(table["dataset"]) == {first["dataset"]["name"]}
    assert not table.duplicated(COLUMNS[:-1]).any()


def test_the_console_script_writes_the_table_as_csv(tmp_path):
    res = tmp_path / "results"
    synthetic_result(res, "alpha", 0)
    out = tmp_path / "tables" / "figures.csv"
    assert main(["--results", str(res), "--out", str(tmp_path / "board"),
                 "--table", str(out)]) == 0
    written = pd.read_csv(out, keep_default_na=False)
    expected, _ = load_table(res)
    assert list(written.columns) == COLUMNS and len(written) == len(expected)
    mae = written[(written["metric"] == "static.mae") & (written["variant"] == "")]
    assert mae["value"].tolist() == expected[(expected["metric"] == "static.mae")
                                             & (expected["variant"] == "")]["value"].tolist()


def _relabelled(res, name: str, seed: int, labels: str | None = None,
                causality: dict | None = None) -> None:
    """A synthetic result whose labels fingerprint and audit are set here."""
    synthetic_result(res, name, seed)
    path = next(p for p in res.rglob("*.json")
                if json.loads(p.read_text())["predictor"]["name"] == name
                and json.loads(p.read_text())["seed"] == seed)
    r = json.loads(path.read_text())
    if labels is not None:
        r["fingerprints"] = {"labels": labels, "features": None}
        path.unlink()
        path = path.with_name(f"{r['config_hash']}-{labels[:8]}.json")
    if causality is not None:
        r["causality"] = causality
    path.write_text(json.dumps(r))


def test_two_label_sets_of_one_world_are_told_apart_by_their_fingerprint(tmp_path):
    """The same predictor and seed scored on two builds of a world: the rows name the labels
    they were scored on and the file they come from, and no key repeats."""
    res = tmp_path / "results"
    _relabelled(res, "alpha", 0, labels="aaaaaaaa11111111")
    _relabelled(res, "alpha", 1, labels="aaaaaaaa11111111")
    _relabelled(res, "alphb", 0, labels="bbbbbbbb22222222")
    for path in res.rglob("*.json"):  # one predictor name, two label sets
        r = json.loads(path.read_text())
        r["predictor"]["name"] = "alpha"
        path.write_text(json.dumps(r))
    table, problems = load_table(res)
    assert not problems
    mae = table[(table["metric"] == "static.mae") & (table["variant"] == "")]
    assert sorted(zip(mae["labels"], mae["seed"])) == [
        ("aaaaaaaa11111111", 0), ("aaaaaaaa11111111", 1), ("bbbbbbbb22222222", 0)]
    assert not table.duplicated(COLUMNS[:-1]).any()
    without_file = [c for c in COLUMNS[:-1] if c != "result"]
    assert not table.duplicated(without_file).any()
    # each row names the file its value is in
    for _, row in mae.iterrows():
        stored = json.loads((res / row["result"]).read_text())
        assert stored["fingerprints"]["labels"] == row["labels"]
        assert stored["metrics"]["static"]["mae"] == row["value"]


def test_the_published_results_have_a_unique_key():
    """The committed leaderboard holds two builds of the toy world: its figures keep apart."""
    table, problems = load_table(REPO / "leaderboard" / "results")
    assert not problems
    assert table["labels"].str.len().gt(0).all()
    assert len(set(table[table["dataset"] == "toyworld"]["labels"])) >= 2
    key = [c for c in COLUMNS[:-1] if c != "result"]
    assert not table.duplicated(key).any(), table[table.duplicated(key, keep=False)].head()


def test_the_audit_is_a_figure_and_a_column(tmp_path):
    from lenbench.leaderboard.document import build_leaderboard

    res = tmp_path / "results"
    _relabelled(res, "alpha", 0, causality={"passed": True})
    _relabelled(res, "alpha", 1, causality={"passed": True})
    _relabelled(res, "beta", 0, causality={"passed": True})
    _relabelled(res, "beta", 1, causality={"passed": False, "failed": ["predict"]})
    _relabelled(res, "gamma", 0)  # written before the audit existed
    table, _ = load_table(res)
    audit = table[(table["metric"] == "causality.passed") & (table["variant"] == "")]
    assert sorted(zip(audit["predictor"], audit["seed"], audit["value"])) == [
        ("alpha", 0, 1.0), ("alpha", 1, 1.0), ("beta", 0, 1.0), ("beta", 1, 0.0)]
    md = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    lines = md.split("| Predictor |", 1)[1].split("\n\n", 1)[0].splitlines()
    header = ["Predictor", *[c.strip() for c in lines[0].strip().strip("|").split(" | ")]]
    at = header.index("Audit")
    cells = {}
    for line in lines[2:]:
        row = [c.strip() for c in line.strip().strip("|").split(" | ")]
        cells[row[0].split(" ")[0]] = row[at]
    assert cells == {"alpha": "passed", "beta": "non-causal", "gamma": "n/a"}
