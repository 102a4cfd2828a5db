"""The leaderboard's "Distributions" section, on results written by evaluate_predictor for a
small in-process world: rows pooled over seeds, the paired CRPS difference to the sibling
reference, the PIT plot, and no section when no predictor is distributional."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.worlds import CFG, TrainQuantiles, make_world

from lenbench import Predictor
from lenbench.evaluate import evaluate_predictor, noise_floor_result, save
from lenbench.leaderboard import build_leaderboard
from lenbench.leaderboard.distributions import distribution_rows
from lenbench.leaderboard.rows import _build_rows
from lenbench.results import load_results


class Median(TrainQuantiles):
    """The same point prediction, no distribution."""

    predict_distribution = Predictor.predict_distribution
    predict_remaining_distribution = Predictor.predict_remaining_distribution


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory):
    res = tmp_path_factory.mktemp("dist_results")
    world = make_world(2)
    written = {}
    for seed in (0, 1):  # the same predictions; the bootstrap seed moves the intervals
        written[seed] = evaluate_predictor(TrainQuantiles(), "tq", {"name": "tq"}, world, CFG,
                                           seed)
        save(written[seed], res)
    save(evaluate_predictor(Median(), "median", {"name": "median"}, world, CFG, 0), res)
    written["floor"] = noise_floor_result(world, CFG)
    save(written["floor"], res)
    return res, written


def test_rows_pool_seeds_and_pair_with_the_siblings(folder) -> None:
    res, written = folder
    rows, _ = _build_rows(load_results(res)[0])
    data = distribution_rows(rows)
    assert [(d.label, d.reference) for d in data] == [("tq", False), ("siblings", True)]
    tq, sib = data
    s0, s1 = (written[s]["metrics"]["distribution"]["static"] for s in (0, 1))
    assert tq.seeds == 2
    assert tq.static["crps"] == pytest.approx((s0["crps"] + s1["crps"]) / 2)
    assert tq.static["coverage_80_ci"] == pytest.approx(
        [(s0["coverage_80_ci"][0] + s1["coverage_80_ci"][0]) / 2,
         (s0["coverage_80_ci"][1] + s1["coverage_80_ci"][1]) / 2])
    assert tq.dynamic["crps"] == pytest.approx(
        written[0]["metrics"]["distribution"]["dynamic"]["crps"])
    # paired: every test row is in the reference (two uncensored samples per prompt)
    mine = np.asarray(written[0]["predictions"]["crps"])
    ref = np.asarray(written["floor"]["predictions"]["crps"])
    assert tq.delta_crps["mean"] == pytest.approx(mine.mean() - ref.mean())
    low, high = tq.delta_crps["ci"]
    assert low <= tq.delta_crps["mean"] <= high
    assert sib.static["crps"] == written["floor"]["metrics"]["distribution"]["static"]["crps"]
    assert sib.delta_crps is None and sib.dynamic == {}
    assert sum(tq.pit) == pytest.approx(1.0) and len(tq.pit) == 10


def test_section_and_plot_in_the_document(folder, tmp_path) -> None:
    res, _ = folder
    board = build_leaderboard(res, tmp_path).read_text(encoding="utf-8")
    assert "### Distributions" in board
    plots = sorted(p.name for p in tmp_path.glob("*-pit.png"))
    assert len(plots) == 1 and f"]({plots[0]})" in board


def test_no_section_without_distributional_results(tmp_path) -> None:
    res = tmp_path / "results"
    save(evaluate_predictor(Median(), "median", {"name": "median"}, make_world(2), CFG, 0), res)
    rows, _ = _build_rows(load_results(res)[0])
    assert distribution_rows(rows) == []
    board = build_leaderboard(res, tmp_path / "board").read_text(encoding="utf-8")
    assert "### Distributions" not in board and not list((tmp_path / "board").glob("*-pit.png"))
