"""The audit's power against sparse leaks and its cost cap (lenbench/scoring/audit_plan.py).

A predictor that reads the true length (static methods, through the feature store it kept from
`fit`) or the true remaining length (dynamic, through its view) on 3-4% of the rows is flagged
by at least 95% of audits over 40 audit seeds, for point, distribution and remaining-length
predictions; an honest predictor is flagged by none. The draw takes the rows the power formula
asks for, and no more than a quarter of the rows and steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.audit import Honest, SparseLeak, audit_world, audits, fitted, leaking

from lenbench.contract.views import SplitView
from lenbench.scoring.audit_plan import (
    audit_rng,
    draw_rows,
    new_audit_seed,
    power_against,
    rows_for_power,
)

SEEDS = range(40)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, SplitView]:
    return audit_world(tmp_path_factory.mktemp("world"))


def test_the_sample_size_follows_the_power_formula() -> None:
    # (1 - 0.03)^k <= 0.05 first holds at k = 99
    assert rows_for_power() == 99
    assert power_against(99) >= 0.95 > power_against(98)
    assert rows_for_power(0.05, 0.90) == 45 and power_against(45, 0.05) >= 0.90
    assert power_against(0) == 0.0


def test_the_draw_stops_at_the_power_target_or_the_cost_cap() -> None:
    rng = np.random.default_rng(0)
    big = draw_rows(np.full(1000, 50), rng, dynamic=True)
    assert len(big.rows) == 100 and big.limited_by == "power target"  # even: traded in pairs
    assert np.array_equal(big.rows, np.unique(big.rows)) and big.steps_share == 0.1
    small = draw_rows(np.full(200, 50), rng, dynamic=False)
    assert len(small.rows) == 50 and small.limited_by == "cost cap"
    # steps cost per step: long rows fill the step budget before the row budget
    skewed = np.where(np.arange(300) < 30, 1000, 10)
    for seed in range(20):
        draw = draw_rows(skewed, np.random.default_rng(seed), dynamic=True)
        assert draw.steps_share <= 0.25 and len(draw.rows) <= 75
    without_steps = np.where(np.arange(600) % 2 == 0, 0, 40)
    assert (without_steps[draw_rows(without_steps, rng, dynamic=True).rows] > 0).all()
    assert len(draw_rows(np.full(5, 9), rng, dynamic=True).rows) == 2  # one pair at least
    assert len(draw_rows(np.full(40, 9), rng, dynamic=True, n_rows=40).rows) == 40


def test_the_audit_draws_from_its_own_fresh_stream() -> None:
    assert new_audit_seed() != new_audit_seed()
    seed = 12345
    ours = audit_rng(seed).random(4)
    assert np.array_equal(ours, audit_rng(seed).random(4))  # the recorded seed repeats it
    assert not np.array_equal(ours, np.random.default_rng(seed).random(4))


def _flag_rate(results: list[dict]) -> float:
    return float(np.mean([not r["passed"] for r in results]))


@pytest.mark.parametrize("method", ["predict", "predict_distribution", "predict_remaining"])
def test_a_leak_on_3_to_4_percent_of_rows_is_flagged_by_95_percent_of_audits(world, method
                                                                             ) -> None:
    test = world["test"]
    share = leaking(test.group_ids).mean()
    assert 0.03 <= share <= 0.04, share
    cheat = fitted(type("Leak", (SparseLeak,), {"leaks": (method,)})(), world)
    honest = fitted(Honest(), world)
    # the leak is real and sparse: exact on the rows it touches, honest on the others
    if method == "predict_remaining":
        steps, hidden = test.steps, test.hide_labels()
        moved = cheat.predict_remaining(hidden) != honest.predict_remaining(hidden)
        assert np.array_equal(np.unique(steps.row[moved]), np.flatnonzero(leaking(
            test.group_ids)[np.unique(steps.row)]))
    results = audits(cheat, test, SEEDS)
    assert _flag_rate(results) >= 0.95, [r["failed"] for r in results]
    assert all(method in r["failed"] for r in results if not r["passed"])
    assert all(r["power"] >= 0.95 and r["share"] <= 0.25 for r in results)


def test_an_honest_predictor_is_flagged_by_no_audit(world) -> None:
    results = audits(fitted(Honest(), world), world["test"], SEEDS)
    assert _flag_rate(results) == 0.0, [r["failed"] for r in results if not r["passed"]]
    assert len({tuple(r["cut_steps"]) for r in results}) == len(SEEDS)  # other rows each time
    assert all(r["max_abs_change"] == 0.0 for r in results)


def test_a_split_too_small_for_the_power_target_records_the_power_it_reached(world) -> None:
    small = world["test"]._copy(np.arange(120), labels_visible=True)
    [result] = audits(fitted(Honest(), world), small, [0])
    assert result["limited_by"] == "cost cap" and result["checked_rows"] <= 30
    assert result["steps_share"] <= 0.25
    assert result["power"] == pytest.approx(power_against(result["rows_with_new_length"]))
    assert result["power"] < result["power_target"] == 0.95
