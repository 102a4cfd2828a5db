"""evaluate_predictor on a small in-process world with a distributional predictor: the result
carries the distribution metrics and per-row quantiles they recompute from, censored rows are
scored with the rest (as the point metrics score them), and the noise floor carries the sibling
reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.worlds import CAP, CFG, STRIDE, WIDTH, TrainQuantiles, make_world

from lenbench import QUANTILE_LEVELS, LengthDistribution, Predictor
from lenbench.evaluate import evaluate_predictor, noise_floor_result, save
from lenbench.results import validate_result


def _uniform_crps(r: np.ndarray, top: np.ndarray) -> np.ndarray:
    """∫_1^top (F(x) - 1{x >= r})² dx for F uniform on [0, WIDTH], r in [1, top]."""
    w2 = 3 * WIDTH ** 2
    return (r ** 3 - 1) / w2 + ((top - WIDTH) ** 3 - (r - WIDTH) ** 3) / w2


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
    assert np.allclose(q, train_q)  # every row, censored ones included (all inside [1, cap])
    # every row is scored, the censored ones (cut at the cap) included: the point metrics' rows
    assert static["n"] == true.size == result["metrics"]["static"]["n"]
    assert static["n_censored"] == cens.sum() == result["metrics"]["static"]["n_censored"] > 0
    assert static["threshold"] == CAP and (true[cens] == CAP).all()
    assert all(c is not None for c in preds["crps"]) and all(v is not None for v in preds["pit"])
    # a censored row is covered when the interval reaches the cap, as the 80% one does here
    # (a fifth of the train rows sit at the cap): it then holds 90% of the predicted mass
    assert train_q[4] == CAP
    covered = (q[:, 0] <= true) & (true <= q[:, 4])
    assert covered[cens].all()
    assert static["coverage_80"] == static["coverage_80_high"] == pytest.approx(covered.mean())
    assert static["coverage_80_nominal"] == pytest.approx(0.9)
    assert static["coverage_50_nominal"] == pytest.approx(0.5)
    assert static["width_50"] == pytest.approx(train_q[3] - train_q[1])
    # pinball: exact on uncensored rows, the lower bound q (c - Q)+ on censored ones (here the
    # same expression, as every quantile lies below the cap)
    levels = np.asarray(QUANTILE_LEVELS)
    d = true[:, None] - q
    assert static["pinball_mean"] == pytest.approx(np.maximum(levels * d, (levels - 1) * d).mean())
    # CRPS as the integral over [1, cap) of (F(x) - 1{x >= L})², F read off the quantile
    # function: the censored rows' integrand is F² alone
    xs = np.linspace(1.0, CAP, 30001)
    grid_f = np.interp(xs, train_q, levels, left=0.0, right=1.0)
    grid_f[xs >= train_q[-1]] = 1.0
    by_x = [np.trapezoid((grid_f - (xs >= y)) ** 2, xs) for y in true]
    assert static["crps"] == pytest.approx(np.mean(by_x), rel=2e-3)
    assert static["crps"] == pytest.approx(np.mean(preds["crps"]))
    # a censored row's PIT is a draw over [F(c - 1), 1]; F(c - 1) on the 0.75 -> 0.9 segment
    below = 0.75 + 0.15 * (CAP - 1 - train_q[3]) / (train_q[4] - train_q[3])
    drawn = np.asarray(preds["pit"])[cens]
    assert (drawn >= below - 1e-12).all() and (drawn <= 1).all() and np.ptp(drawn) > 0
    # dynamic: uniform on [0, WIDTH] against L - t, clipped to [1, cap - t] and weighted over
    # [1, cap - t); averaged per request first, censored requests included
    dyn = result["metrics"]["distribution"]["dynamic"]
    per_request = []
    for L in true.astype(int):
        t = np.arange(0, L, STRIDE)
        per_request.append(_uniform_crps(L - t, CAP - t).mean())
    assert dyn["crps"] == pytest.approx(np.mean(per_request))
    assert dyn["n_requests"] == true.size and dyn["n_censored"] == cens.sum()
    assert dyn["n_censored_steps"] == sum(len(range(0, int(L), STRIDE)) for L in true[cens])
    # the histogram reaches past the cap at every step: clipped and counted
    assert dyn["n_clipped_high"] == dyn["n_steps"] and dyn["n_clipped_low"] == dyn["n_steps"]
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
