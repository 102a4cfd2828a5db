"""PLP: trained on (entropy pool at step t -> L - t); beats the constant on static and dynamic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers.leaderboard import board_text
from helpers.worlds import synthetic_world, views

from baselines.plp import PLP


def test_plp_beats_constant_static_and_dynamic(tmp_path: Path) -> None:
    v = views(*synthetic_world(tmp_path))
    model = PLP(max_length=200, epochs=30, steps_per_request=16, progress=False)
    assert model.dynamic and model.needs.steps and model.needs.step_pooling == ("entropy",)
    model.fit(v["train"], v["val"])
    test, hidden = v["test"], v["test"].hide_labels()
    train_median = np.median(v["train"].lengths)

    pred = model.predict(hidden)
    static_mae = np.abs(pred - test.lengths).mean()
    assert static_mae < 0.6 * np.abs(train_median - test.lengths).mean()

    steps = test.steps
    rem = model.predict_remaining(hidden)
    assert rem.shape == (len(steps),) and rem.min() >= 1.0
    # the dynamic protocol: per request the mean over t, then the mean over requests
    err = np.abs(rem - steps.remaining)
    dyn = np.mean([err[steps.row == r].mean() for r in np.unique(steps.row)])
    const = np.abs(np.maximum(train_median - steps.t, 1) - steps.remaining)
    dyn_const = np.mean([const[steps.row == r].mean() for r in np.unique(steps.row)])
    assert dyn < 0.6 * dyn_const, (dyn, dyn_const)

    # MAE by observed steps, logged on val during fit
    assert set(model.observed_steps_mae) >= {0, 8, 16, 32}
    by_t = model.mae_by_observed_steps(test)
    assert by_t[0] == np.abs(rem[steps.t == 0] - steps.remaining[steps.t == 0]).mean()
    report = model.report()
    assert report["val_mae_by_observed_steps"]["t=0"] == model.observed_steps_mae[0]
    assert report["n_train_steps"] > 0 and report["max_length"] == 200


def test_step_subsample_keeps_t0_and_caps_each_request(tmp_path: Path) -> None:
    v = views(*synthetic_world(tmp_path, n=60))
    steps = v["train"].steps
    model = PLP(steps_per_request=5)
    pick = model._pick(steps, seed=0)
    rows, counts = np.unique(steps.row[pick], return_counts=True)
    assert len(rows) == len(np.unique(steps.row))
    assert counts.max() <= 5
    assert (steps.t[pick] == 0).sum() == len(rows)


def test_runs_through_the_harness(e2e, tmp_path: Path) -> None:
    from helpers.worlds import run_predictor

    result = run_predictor(e2e, tmp_path, "plp")
    assert result["predictor"]["dynamic"] is True
    assert np.isfinite(result["metrics"]["dynamic"]["mae"])
    assert result["timings"]["predict_ms_per_step"] > 0
    # MAE by observed steps on the test split, scored by the harness
    dyn = result["metrics"]["dynamic"]
    assert dyn["observed_steps"][:3] == [0, 8, 16]
    assert dyn["mae_by_observed_steps"][0] is not None
    assert dyn["n_by_observed_steps"][0] == result["dataset"]["n_test"]
    assert "t=0" in "".join(result["report"]["val_mae_by_observed_steps"])
    board = board_text(tmp_path / "leaderboard" / "README.md")
    assert "#### Dynamic MAE by observed steps" in board and "| t = 0 | t = 8 |" in board
