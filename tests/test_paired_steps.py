"""Per-step errors kept row by row, and the paired step table: both predictors on one population
of requests at every listed step, with a bootstrap interval over prompts."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers.leaderboard import GOLDEN, board_text, heading_block, synthetic_result

from lenbench.leaderboard import build_leaderboard
from lenbench.results import result_path, write_result
from lenbench.scoring.comparisons import paired_steps, step_population
from lenbench.scoring.metrics import request_errors
from lenbench.scoring.step_errors import step_error_record, step_errors


def test_step_errors_by_hand() -> None:
    """|(L - t) - r_t| at each listed t; a censored row's shortfall only; NaN where the row has
    no step at t (ended, or skipped)."""
    # row 0: L = 10, steps 0 and 8; row 1: L = 20 censored, steps 0 and 8; row 2: L = 5, step 0
    step_row = np.array([0, 0, 1, 1, 2])
    step_t = np.array([0, 8, 0, 8, 0])
    rem = np.array([7.0, 5.0, 25.0, 2.0, 5.0])
    err = step_errors(step_row, step_t, np.array([10, 20, 5]), rem, [0, 8, 16],
                      censored=np.array([False, True, False]))
    np.testing.assert_array_equal(err[:, :2], [[3.0, 3.0], [0.0, 10.0], [0.0, np.nan]])
    assert np.isnan(err[:, 2]).all()  # nobody decodes at t = 16 here
    record = step_error_record(err, [0, 8, 16])
    assert record["t"] == [0, 8, 16] and record["error"][2] == [0.0, None, None]
    # the same scoring as the per-request dynamic errors
    per_request = request_errors(step_row, step_t, np.array([10, 20, 5]), rem,
                                 np.array([False, True, False]))
    np.testing.assert_allclose(np.nanmean(err, axis=1), per_request)


@dataclass
class Rows:
    """A run's scored rows as the pairing reads them."""

    true: list[Any]
    pred: list[Any]
    prompt_id: list[Any] | None
    censored: list[Any] | None
    dynamic_error: list[Any] | None
    dynamic_steps: dict[str, Any] | None


def _run(true: np.ndarray, errors: np.ndarray, ts: list[int]) -> Rows:
    ids = [f"p{i // 2}" for i in range(true.size)]
    return Rows(true.tolist(), true.tolist(), ids, [False] * true.size, None,
                step_error_record(errors, ts))


def test_paired_steps_use_one_population_for_every_step_and_both_predictors() -> None:
    """The reference has no step at t = 8 for one long row (strided features, say). Every column
    of the pair is then read on the same rows: those longer than T = 8 with an error at every
    t <= T in both runs. Per-t populations would put that row in the t = 0 column and the short
    rows in both, and give other differences."""
    ts = [0, 8, 16]
    true = np.array([4, 6, 30, 40, 50, 60, 70, 80])  # rows 2.. outlive t = 8 (6 of 8)
    rng = np.random.default_rng(0)
    a = rng.uniform(0, 50, (true.size, len(ts)))
    b = rng.uniform(0, 50, (true.size, len(ts)))
    for err in (a, b):
        err[true[:, None] <= np.array(ts)[None, :]] = np.nan  # nobody decodes past its length
    b[5, 1] = np.nan  # the reference skipped row 5 at t = 8
    found = paired_steps([_run(true, a, ts)], [_run(true, b, ts)], n_boot=200)
    assert found is not None and found["t_max"] == 16 and found["t"] == ts
    members = np.array([False, False, True, True, True, False, True, True])
    np.testing.assert_array_equal(found["rows"], members)
    assert found["n_requests"] == 5
    for j, cell in enumerate(found["cells"]):
        assert cell["n"] == 5  # the same rows in every column
        assert cell["mean"] == pytest.approx((a[members, j] - b[members, j]).mean())
        assert found["reference_mae"][j] == pytest.approx(b[members, j].mean())
    per_t = ~np.isnan(a[:, 0]) & ~np.isnan(b[:, 0])  # what t = 0 alone would cover
    assert (a[per_t, 0] - b[per_t, 0]).mean() != pytest.approx(found["cells"][0]["mean"])
    # T is the longest listed t that at least half of the rows outlive: 16 here (6 of 8),
    # 8 once only 3 of 8 outlive 16
    assert step_population(true, ts, a, b)[0] == 16
    assert step_population(np.array([4, 6, 12, 14, 14, 30, 40, 50]), ts, a, b)[0] == 8


def test_paired_steps_refuse_other_rows() -> None:
    ts = [0, 8]
    true = np.array([10, 20, 30, 40])
    err = np.ones((4, 2))
    other = _run(true, err, ts)
    other.prompt_id = ["x"] * 4
    assert paired_steps([_run(true, err, ts)], [other]) is None
    missing = _run(true, err, ts)
    missing.dynamic_steps = None  # a result written before step errors were kept
    assert paired_steps([missing], [_run(true, err, ts)]) is None


def test_leaderboard_shows_the_paired_step_table(tmp_path: Path) -> None:
    """Two dynamic predictors with stored step errors give a table of paired differences on one
    population, whose caption says which requests and how the dynamic MAE weighs them."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    synthetic_result(results, "plp", 0, dynamic={"observed_steps": [0, 8, 16]})
    ts = [0, 8, 16]
    rng = np.random.default_rng(1)
    true = rng.integers(4, 60, 40)
    censored = true >= 55
    ids = [f"p{i // 2}" for i in range(true.size)]
    for path in sorted(results.rglob("*.json")):
        r = json.loads(path.read_text(encoding="utf-8"))
        if r.get("predictor", {}).get("name") not in ("mlp_probe", "plp"):
            continue
        err = rng.uniform(0, 20, (true.size, len(ts))) + (5 if r["predictor"]["name"] == "plp"
                                                          else 0)
        err[true[:, None] <= np.array(ts)[None, :]] = np.nan
        r["metrics"]["dynamic"].update(observed_steps=ts, mae_by_observed_steps=[1.0, 1.0, 1.0],
                                       n_by_observed_steps=[40, 30, 20])
        r["predictions"] = {"true": true.tolist(), "pred": true.tolist(), "prompt_id": ids,
                            "censored": censored.tolist(), "dynamic_steps":
                            step_error_record(err, ts)}
        write_result(result_path(results, "toyworld", "toy", r["predictor"]["name"],
                                 r["config_hash"]), r)
    md = board_text(build_leaderboard(results, tmp_path / "board"))
    block = heading_block(md, "Dynamic MAE by observed steps")
    assert "| Predictor | Δ t = 0 | Δ t = 8 | Δ t = 16 |" in block
    line = next(ln for ln in block.splitlines() if ln.startswith("| plp |"))
    assert line.count("[") == 3  # a paired interval at every step
    n = int(((true > 16)).sum())
    for phrase in (f"the {n} requests longer than 16 tokens", "paired bootstrap over prompts",
                   "then the plain mean over requests", "every request counts once"):
        assert phrase in block, phrase
    assert "*mlp_probe* (reference): its MAE" in block
