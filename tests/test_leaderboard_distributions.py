"""The leaderboard's "Distributions" section, on results written by evaluate_predictor for a
small in-process world: rows pooled over seeds, the paired CRPS difference to the sibling
reference, the PIT plot, and no section when no predictor is distributional."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.leaderboard import board_text
from helpers.worlds import CFG, TrainQuantiles, make_world

from lenbench import Predictor
from lenbench.evaluate import evaluate_predictor, noise_floor_result, save
from lenbench.leaderboard import build_leaderboard
from lenbench.leaderboard.distributions import distribution_rows
from lenbench.leaderboard.rows import build_rows
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
    rows, _ = build_rows(load_results(res)[0])
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
    board = board_text(build_leaderboard(res, tmp_path))
    assert "### Distributions" in board
    plots = sorted(p.name for p in tmp_path.glob("*-pit.png"))
    assert len(plots) == 1 and f"]({plots[0]})" in board


def test_no_section_without_distributional_results(tmp_path) -> None:
    res = tmp_path / "results"
    save(evaluate_predictor(Median(), "median", {"name": "median"}, make_world(2), CFG, 0), res)
    rows, _ = build_rows(load_results(res)[0])
    assert distribution_rows(rows) == []
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    assert "### Distributions" not in board and not list((tmp_path / "board").glob("*-pit.png"))


def test_censored_rows_are_counted_scored_and_said(tmp_path) -> None:
    """A world whose every fifth row is cut at the cap: predictors and siblings score those rows
    (the Rows column and the lines under the table say how many, and how), the pinball loss is
    marked a lower bound, and the 80% interval, which reaches the cap, shows its nominal share."""
    res = tmp_path / "results"
    world = make_world(2, censor_every=5)
    mine = evaluate_predictor(TrainQuantiles(), "tq", {"name": "tq"}, world, CFG, 0)
    floor = noise_floor_result(world, CFG)
    save(mine, res)
    save(floor, res)
    static = mine["metrics"]["distribution"]["static"]
    n, cens = static["n"], static["n_censored"]
    assert cens > 0 and n == mine["metrics"]["static"]["n"]
    sib = floor["metrics"]["distribution"]["static"]
    assert sib["n_censored"] > 0  # two samples per prompt: the siblings score every row too
    rows, _ = build_rows(load_results(res)[0])
    tq, ref = distribution_rows(rows)
    assert tq.delta_crps["n"] == sib["n"]  # paired on every row both score, censored included
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    section = board.split("### Distributions")[1]
    cells = next(line for line in section.splitlines() if line.startswith("| tq |")).split(" | ")
    dyn = mine["metrics"]["distribution"]["dynamic"]
    assert cells[1] == f"{n} ({cens}); dyn. {dyn['n_requests']} ({dyn['n_censored']})"
    assert cells[2].startswith("≥ ")
    assert f"(nominal {100 * static['coverage_80_nominal']:.1f}%)" in cells[7]
    assert static["coverage_80_nominal"] > 0.8
    assert (f"tq: {n} rows (every test row), {cens} of them censored and scored from their "
            "cut-off (the CRPS weighted to [1, 300)") in board
    assert (f"*siblings* (ref): {sib['n']} rows (the rows of prompts with at least two "
            f"samples), {sib['n_censored']} of them censored") in board
    assert "for a row censored at c, a seeded uniform draw over [F(c-1), 1]" in board
    assert "or exceed it where lengths tie" in board


def test_undecided_coverage_shows_as_a_range() -> None:
    from lenbench.leaderboard.distributions import coverage_cell

    m = {"coverage_80": 0.61, "coverage_80_high": 0.74, "coverage_80_ci": [0.55, 0.67],
         "coverage_80_high_ci": [0.69, 0.79], "coverage_80_nominal": 0.8}
    assert coverage_cell(m, "80") == "61.0–74.0% [55.0, 79.0]"
    m.update(coverage_80_high=0.61, coverage_80_nominal=0.853)
    assert coverage_cell(m, "80") == "61.0% [55.0, 67.0] (nominal 85.3%)"


def test_upper_ends_at_the_cap_are_flagged() -> None:
    """An interval whose upper end sits at the cap on nearly every row covers the censored rows
    by construction (▲); one that never reaches it misses them all (▽); between, no mark."""
    from lenbench.leaderboard.distributions import DistRow, _cap_lines, coverage_cell

    m = {"coverage_80": 0.9, "coverage_80_ci": [0.88, 0.92], "n_censored": 40,
         "q90_at_cap": 0.97, "q75_at_cap": 0.5}
    assert coverage_cell(m, "80") == "90.0% [88.0, 92.0] ▲"
    assert coverage_cell(m, "50") == "—"  # no 50% figures: no cell, no mark
    assert coverage_cell({**m, "q90_at_cap": 0.0}, "80").endswith("] ▽")
    assert coverage_cell({**m, "q90_at_cap": 0.4}, "80") == "90.0% [88.0, 92.0]"
    # without censored rows, never reaching the cap misses nothing
    assert coverage_cell({**m, "q90_at_cap": 0.0, "n_censored": 0}, "80") == "90.0% [88.0, 92.0]"
    lines = _cap_lines([DistRow("conformal", False, 1, m), DistRow("bins", False, 1,
                                                                   {**m, "q90_at_cap": 0.0})])
    assert lines[0].startswith("Upper quantiles at the cap on nearly every row (▲): conformal "
                               "(Q(0.9) on 97% of rows, Q(0.75) on 50%)")
    assert lines[1] == ("No Q(0.9) at the cap on any row (▽): bins. Every censored row counts "
                        "as missed.")
