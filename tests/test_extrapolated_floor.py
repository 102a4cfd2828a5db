"""One estimate of the noise floor from prompts with many samples, and each row's share of the
gap between the constant and it (lenbench/scoring/noise_floor.py, leaderboard/document.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lenbench.leaderboard.document import gap_share_cell
from lenbench.results.add_floor import with_extrapolated_floor
from lenbench.scoring.noise_floor import extrapolated_floor, noise_floor_bounds


def _prompts(n_prompts: int, k: int, sigma: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    centre = rng.uniform(200, 400, n_prompts)
    lengths = (centre[:, None] + rng.normal(0, sigma, (n_prompts, k))).reshape(-1)
    groups = np.repeat([f"p{i}" for i in range(n_prompts)], k)
    return lengths, groups


def test_the_estimate_finds_the_error_of_the_true_median_that_the_bounds_only_bracket():
    sigma = 50.0
    truth = sigma * math.sqrt(2 / math.pi)  # E|X - median| for a normal spread
    lengths, groups = _prompts(400, 8, sigma)
    est = extrapolated_floor(lengths, groups, n_boot=300)
    bounds = noise_floor_bounds(lengths, groups, n_boot=0)
    assert bounds["in_sample"] < truth < bounds["leave_one_out"]
    assert abs(est["estimate"] - truth) < 0.25 * (bounds["leave_one_out"] - bounds["in_sample"])
    assert est["ci"][0] < truth < est["ci"][1]
    assert est["n_prompts"] == 400 and est["fit_sizes"] == [3, 4, 5, 6, 7]
    assert est["curve"][0] > est["curve"][-1] > est["estimate"]  # more samples, less error
    # more prompts, a narrower interval
    wide = extrapolated_floor(*_prompts(100, 8, sigma, seed=1), n_boot=300)
    assert wide["ci"][1] - wide["ci"][0] > est["ci"][1] - est["ci"][0]


def test_only_prompts_with_enough_samples_count():
    lengths, groups = _prompts(50, 3, 40.0)
    assert extrapolated_floor(lengths, groups, n_boot=0) is None
    dense, dense_groups = _prompts(30, 8, 40.0)
    mixed = extrapolated_floor(np.concatenate([lengths, dense]),
                               np.concatenate([groups, np.char.add("d", dense_groups)]), n_boot=0)
    assert mixed["n_prompts"] == 30 and mixed["n"] == 240
    with pytest.raises(ValueError, match="min_samples"):
        extrapolated_floor(dense, dense_groups, min_samples=4)


def test_a_stored_floor_result_gets_the_estimate_a_run_would_compute():
    lengths, groups = _prompts(40, 8, 30.0)
    cens = lengths > 390
    result = {"kind": "reference", "seed": 0, "config": {"eval": {"n_boot": 200, "ci": 0.9}},
              "metrics": {"noise_floor": noise_floor_bounds(lengths, groups, cens, n_boot=0)},
              "predictions": {"true": lengths.tolist(), "prompt_id": groups.tolist(),
                              "censored": cens.tolist()}}
    new = with_extrapolated_floor(result)
    assert new["metrics"]["noise_floor"]["extrapolated"] == extrapolated_floor(
        lengths, groups, cens, n_boot=200, seed=0, ci=0.9)
    assert with_extrapolated_floor(new) is None  # nothing twice
    assert "extrapolated" not in result["metrics"]["noise_floor"]  # the input is not changed


class _Row:
    def __init__(self, kind: str, mae: list[float]):
        self.kind, self._mae = kind, mae

    def values(self, key: str) -> list[float]:
        return self._mae if key == "static.mae" else []

    def scored_rows(self):
        return [None]  # no stored rows: the share without an interval


def test_the_share_of_the_gap_is_the_gain_over_the_constant_out_of_the_reachable_one():
    const = _Row("predictor", [220.0])
    floor = {"estimate": 180.0, "ci": [170.0, 190.0]}
    assert gap_share_cell(const, const, floor) == "0%"
    assert gap_share_cell(_Row("predictor", [200.0]), const, floor) == "50%"
    assert gap_share_cell(_Row("predictor", [230.0]), const, floor) == "-25%"
    assert gap_share_cell(_Row("reference", [180.0]), const, floor) == "—"
    assert gap_share_cell(_Row("predictor", [200.0]), const, {"estimate": 230.0}) == "—"
