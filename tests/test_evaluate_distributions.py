"""evaluate_predictor on a small in-process world with a distributional predictor: the result
carries the distribution metrics and per-row quantiles they recompute from, censored rows are
left out and counted, and the noise floor carries the sibling reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.worlds import CFG, STRIDE, WIDTH, TrainQuantiles, make_world

from lenbench import QUANTILE_LEVELS, LengthDistribution, Predictor
from lenbench.evaluate import evaluate_predictor, noise_floor_result, save
from lenbench.results import validate_result


def _uniform_crps(y: np.ndarray) -> np.ndarray:
    """CRPS of U(0, WIDTH) at y in [0, WIDTH]: (y³ + (WIDTH - y)³) / (3 WIDTH²)."""
    return (y ** 3 + (WIDTH - y) ** 3) / (3 * WIDTH ** 2)


def test_distribution_fields_recompute_from_the_result(tmp_path) -> None:
    world = make_world(3, censor_every=5)
    result = evaluate_predictor(TrainQuantiles(), "tq", {"name": "tq"}, world, CFG, seed=0)
    static = result["metrics"]["distribution"]["static"]
    preds = result["predictions"]
    true = np.asarray(preds["true"], float)
    cens = np.asarray(preds["censored"], bool)
    q = np.asarray(preds["quantiles"])
    train_q = np.quantile(world.labels.loc[world.rows("train"), "L"], QUANTILE_LEVELS)
    assert preds["quantile_levels"] == list(QUANTILE_LEVELS)
    assert np.allclose(q, train_q)  # every row, censored ones included
    # censored rows are excluded from the scores, and counted
    assert static["n_censored_excluded"] == cens.sum() > 0
    assert static["n"] == (~cens).sum()
    assert [preds["crps"][i] is None for i in range(true.size)] == cens.tolist()
    t, qq = true[~cens], q[~cens]
    assert static["coverage_80"] == pytest.approx(np.mean((qq[:, 0] <= t) & (t <= qq[:, 4])))
    assert static["width_50"] == pytest.approx(train_q[3] - train_q[1])
    levels = np.asarray(QUANTILE_LEVELS)
    d = t[:, None] - qq
    assert static["pinball_mean"] == pytest.approx(np.maximum(levels * d, (levels - 1) * d).mean())
    # CRPS as the integral over x of (F(x) - 1{x >= L})², F read off the quantile function
    xs = np.linspace(0.0, 300.0, 30001)
    grid_f = np.interp(xs, train_q, levels, left=0.0, right=1.0)
    grid_f[xs >= train_q[-1]] = 1.0
    by_x = [np.trapezoid((grid_f - (xs >= y)) ** 2, xs) for y in t]
    assert static["crps"] == pytest.approx(np.mean(by_x), rel=2e-3)
    assert static["crps"] == pytest.approx(np.mean([c for c in preds["crps"] if c is not None]))
    # dynamic: uniform on [0, WIDTH] against L - t, averaged per request first
    dyn = result["metrics"]["distribution"]["dynamic"]
    per_request = [_uniform_crps(L - np.arange(0, L, STRIDE)).mean() for L in t.astype(int)]
    assert dyn["crps"] == pytest.approx(np.mean(per_request))
    assert dyn["n_requests"] == (~cens).sum()
    assert dyn["n_censored_excluded"] == sum(len(range(0, int(L), STRIDE)) for L in true[cens])
    path = save(result, tmp_path)
    validate_result(json.loads(path.read_text()), str(path))


def test_point_predictors_have_no_distribution_fields() -> None:
    class Median(TrainQuantiles):
        predict_distribution = Predictor.predict_distribution
        predict_remaining_distribution = Predictor.predict_remaining_distribution

    result = evaluate_predictor(Median(), "median", {"name": "median"}, make_world(2), CFG, 0)
    assert "distribution" not in result["metrics"] and "quantiles" not in result["predictions"]


def test_wrong_row_count_names_the_predictor() -> None:
    class Short(TrainQuantiles):
        def predict_distribution(self, split) -> LengthDistribution:
            return super().predict_distribution(split).take(np.arange(3))

    with pytest.raises(ValueError, match=r"short\.predict_distribution returned 3 "
                                         r"distributions for \d+ test rows"):
        evaluate_predictor(Short(), "short", {"name": "short"}, make_world(2), CFG, 0)


def test_a_malformed_quantile_list_fails_validation() -> None:
    result = json.loads(json.dumps(evaluate_predictor(TrainQuantiles(), "tq", {"name": "tq"},
                                                      make_world(2), CFG, 0), default=str))
    result["predictions"]["quantiles"][0] = [1.0, 2.0]
    with pytest.raises(ValueError, match="predictions.quantiles"):
        validate_result(result, "bad.json")


def test_the_noise_floor_carries_the_sibling_reference() -> None:
    """Two samples per prompt: each row's siblings are one sample, a point mass, so its CRPS is
    the absolute difference of the pair: exactly the leave-one-out noise floor's MAE."""
    floor = noise_floor_result(make_world(2), CFG)
    sib = floor["metrics"]["distribution"]["static"]
    assert sib["n"] == floor["metrics"]["static"]["n"]
    assert sib["crps"] == pytest.approx(floor["metrics"]["static"]["mae"])
    assert sib["width_80"] == 0.0
    true = np.asarray(floor["predictions"]["true"])
    pred = np.asarray(floor["predictions"]["pred"])  # the other sample of the pair
    assert sib["coverage_80"] == pytest.approx(np.mean(true == pred))
