"""Prediction hygiene: non-finite predictions fail the run by name; values below 1 or above the
length cap are clipped and counted; the noise floor is written once per world."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenbench import Needs, Predictor
from lenbench.configs import RunConfig
from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.evaluate import evaluate_predictor, noise_floor_result
from lenbench.pipeline import World
from lenbench.scoring.hygiene import NonFinitePredictions, clean_predictions


def test_clean_predictions_clips_and_counts() -> None:
    out, counts = clean_predictions(np.array([-40.0, 0.5, 3.0, 300.0]), "p", "predict", 256)
    assert out.tolist() == [1.0, 1.0, 3.0, 256.0]
    assert counts == {"n_clipped_low": 2, "n_clipped_high": 1}
    rem, counts = clean_predictions(np.array([10.0, 10.0]), "p", "predict_remaining",
                                    np.array([20, 4]))  # cap - t per step
    assert rem.tolist() == [10.0, 4.0] and counts["n_clipped_high"] == 1
    with pytest.raises(NonFinitePredictions, match=r"p\.predict returned 2 non-finite values"):
        clean_predictions(np.array([1.0, np.nan, np.inf]), "p", "predict", None)


class Fixed(Predictor):
    """Predicts `values` for every test row, whatever the input."""

    needs = Needs()

    def __init__(self, value: float):
        self.value = value

    def fit(self, train, val=None) -> None:
        pass

    def predict(self, split) -> np.ndarray:
        return np.full(len(split), self.value)


def small_world(cap: int = 100) -> World:
    rows = []
    for p in range(60):
        for s in range(2):
            rows.append({"prompt_id": f"p{p}", "sample_idx": s,
                         "split": ("train", "val", "test")[p % 3], "family": "", "text": f"x {p}",
                         "prompt_token_ids": [1, 2], "output_token_ids": [],
                         "L": 10 + (p * 7 + s * 13) % (cap - 10), "finish_reason": "stop",
                         "censored": False})
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    test = labels[labels["split"] == "test"]
    return World(labels=labels, features=None, generation_card={}, target_path="",
                 dataset={"name": "w", "key": "k", "n_train": 40, "n_val": 40, "n_test": 40,
                          "n_test_prompts": int(test["prompt_id"].nunique()), "mean_L": 50.0},
                 model={"name": "m", "key": "m", "path": ""},
                 fingerprints={"labels": "abc", "features": None})


CFG = RunConfig.from_composed({"dataset": {"name": "w"}, "eval": {"n_boot": 20},
                               "sim": {"enabled": False}, "generation": {"max_new_tokens": 100}})


@pytest.mark.parametrize(("value", "low", "high", "scored_as"), [
    (-40.0, 40, 0, 1.0), (500.0, 0, 40, 100.0), (50.0, 0, 0, 50.0)])
def test_out_of_range_predictions_are_clipped_and_counted(value, low, high, scored_as) -> None:
    world = small_world()
    result = evaluate_predictor(Fixed(value), "fixed", {"name": "fixed"}, world, CFG, seed=0)
    static = result["metrics"]["static"]
    assert (static["n_clipped_low"], static["n_clipped_high"]) == (low, high)
    assert set(result["predictions"]["pred"]) == {scored_as}
    true = np.asarray(result["predictions"]["true"])
    assert static["mae"] == pytest.approx(np.abs(true - scored_as).mean())
    assert result["fingerprints"] == {"labels": "abc", "features": None}


def test_non_finite_predictions_fail_the_run_by_name() -> None:
    class HalfNaN(Fixed):
        def predict(self, split):
            out = np.full(len(split), 30.0)
            out[::2] = np.nan
            return out

    with pytest.raises(NonFinitePredictions, match=r"halfnan\.predict returned 20 non-finite"):
        evaluate_predictor(HalfNaN(0), "halfnan", {"name": "halfnan"}, small_world(), CFG, 0)


def test_the_noise_floor_does_not_depend_on_the_predictor_seed() -> None:
    world = small_world()
    a, b = noise_floor_result(world, CFG, seed=0), noise_floor_result(world, CFG, seed=3)
    assert a["config_hash"] == b["config_hash"] and a["seed"] == b["seed"] == 0
    bounds = a["metrics"]["noise_floor"]
    assert bounds["in_sample"] * 2 == pytest.approx(bounds["leave_one_out"])  # two samples
    assert bounds["interval"][0] <= bounds["in_sample"] <= bounds["leave_one_out"] \
        <= bounds["interval"][1]
