"""The split-conformal wrapper: its intervals reach nominal coverage on a simulated world, its
point prediction is the wrapped predictor's, and it refuses to fit without a validation split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from baselines.conformal import ConformalPredictor, conformal_offsets
from baselines.prompt_length import PromptLengthPredictor
from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.contract.views import SplitView


def simulated_splits(n_train: int, n_val: int, n_test: int, seed: int = 0):
    """One sample per prompt (rows independent): L = round(exp(3 + 0.02 n + N(0, 0.5))) for a
    prompt of n tokens, so the log-space error of a prompt-length fit is roughly normal."""
    rng = np.random.default_rng(seed)
    splits = ["train"] * n_train + ["val"] * n_val + ["test"] * n_test
    rows = []
    for i, split in enumerate(splits):
        n = int(rng.integers(5, 120))
        length = max(1, round(float(np.exp(3.0 + 0.02 * n + rng.normal(0.0, 0.5)))))
        rows.append({"prompt_id": f"p{i}", "sample_idx": 0, "split": split, "family": "",
                     "text": "", "prompt_token_ids": list(range(n)), "output_token_ids": [],
                     "L": length, "finish_reason": "stop", "censored": False})
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)

    def view(s):
        return SplitView(s, labels, np.flatnonzero(labels["split"] == s))

    return view("train"), view("val"), view("test")


def test_intervals_reach_nominal_coverage() -> None:
    train, val, test = simulated_splits(2000, 4000, 20000)
    model = ConformalPredictor(PromptLengthPredictor())
    model.fit(train, val)
    static = test.static_view(model.needs)
    dist = model.predict_distribution(static)
    true = test.lengths
    for lo, hi, nominal in ((0.1, 0.9, 0.8), (0.25, 0.75, 0.5)):
        q = dist.quantile([lo, hi])
        coverage = np.mean((q[:, 0] <= true) & (true <= q[:, 1]))
        # 99% band of the coverage: binomial over the test rows plus the calibration draw
        band = 2.576 * np.sqrt(nominal * (1 - nominal) * (1 / len(test) + 1 / len(val)))
        assert abs(coverage - nominal) < band, (nominal, coverage, band)
    # the wrapped predictor was fitted on train alone, and its point prediction is kept
    alone = PromptLengthPredictor()
    alone.fit(train)
    assert np.allclose(model.predict(static), alone.predict(static))
    assert np.allclose(model.base.coef, alone.coef)


def test_an_overconfident_base_gets_wider_intervals() -> None:
    """Without calibration the constant's quantiles would be one point; conformal widens them to
    the spread of the validation lengths around it."""
    from baselines.constant import ConstantPredictor

    train, val, test = simulated_splits(500, 1000, 10)
    model = ConformalPredictor({"_target_": "baselines.constant.ConstantPredictor",
                                "name": "constant"})
    assert isinstance(model.base, ConstantPredictor)
    model.fit(train, val)
    q = model.predict_distribution(test.static_view(model.needs)).quantile([0.1, 0.9])
    lengths = np.sort(val.lengths)
    # k = floor(1001 * 0.1) = 100 and ceil(1001 * 0.9) = 901: the 100th and 901st smallest
    assert q[0].tolist() == pytest.approx([lengths[99], lengths[900]])


def test_refuses_to_fit_without_a_validation_split() -> None:
    train, val, _ = simulated_splits(50, 0, 10)
    model = ConformalPredictor(PromptLengthPredictor())
    for missing in (None, val):
        with pytest.raises(ValueError, match="validation split.*dataset.split.val"):
            model.fit(train, missing)


def test_rejects_a_base_that_is_not_a_predictor_config() -> None:
    with pytest.raises(TypeError, match="_target_"):
        ConformalPredictor("mlp_probe")


def test_conformal_offsets_ranks_and_weights() -> None:
    scores = np.arange(1.0, 10.0)  # n = 9: ranks floor(10 q) below 0.5, ceil(10 q) from 0.5
    assert conformal_offsets(scores, [0.1, 0.25, 0.5, 0.75, 0.9]).tolist() == \
        [1.0, 2.0, 5.0, 8.0, 9.0]
    # one unit with three scores weighs as much as a unit with one: units {1}, {2}, {3, 3, 30}
    # -> weights 1/3, 1/3, 1/9 x 3; n = 3 units, level 0.5 -> rank ceil(2) / 3 = 2/3
    weights = np.array([1 / 3, 1 / 3, 1 / 9, 1 / 9, 1 / 9])
    out = conformal_offsets(np.array([1.0, 2.0, 3.0, 3.0, 30.0]), [0.5], weights, n_units=3)
    assert out.tolist() == [2.0]


def test_kaplan_meier_offsets_move_censored_weight_up() -> None:
    """Scores 1..9, where 3 is only a lower bound: its 1/9 of weight goes to the six scores
    above it (1/54 each), so 4 holds 7/54 and the CDF reaches 1/9 + 1/9 + 7/54 = 19/54 there."""
    scores = np.arange(1.0, 10.0)
    censored = scores == 3.0
    out = conformal_offsets(scores, [0.25, 0.5], censored=censored)
    # level 0.25: floor(2.5) / 9 = 2/9 -> 2; level 0.5: ceil(5) / 9 = 5/9 = 30/54, and the CDF
    # is 19/54, 26/54, 33/54 at 4, 5, 6 -> 6 (5 without the censoring)
    assert out.tolist() == [2.0, 6.0]
    # censored at the top: the weight above the last exact score is unknown, the level is not
    # reached, and the offset is unbounded
    top = conformal_offsets(scores, [0.5, 0.9], censored=scores >= 8.0)
    assert top[0] == 5.0 and np.isinf(top[1])
    # no censoring: the plain conformal quantiles
    assert conformal_offsets(scores, [0.5], censored=np.zeros(9, bool)).tolist() == [5.0]


def censored_splits(share: float = 0.4, seed: int = 0):
    """simulated_splits with the validation and test answers above a cap cut off, as a run
    records them (L at the cap, flagged censored), the cap set so that `share` of them are cut;
    also returns the test rows' true lengths. The train split is left whole, so that the wrapped
    predictor's errors do not depend on the cap and only the calibration meets censoring."""
    train, val, test = simulated_splits(2000, 4000, 20000, seed)
    true = test.lengths.astype(float)
    labels = pd.concat([v._table for v in (train, val, test)], ignore_index=True)
    scored = labels["split"] != "train"
    cap = float(np.quantile(labels.loc[scored, "L"], 1 - share))
    labels["censored"] = scored & (labels["L"] >= cap)
    labels["L"] = np.where(labels["censored"], int(cap), labels["L"])

    def view(s):
        return SplitView(s, labels, np.flatnonzero(labels["split"] == s))

    return view("train"), view("val"), view("test"), true, cap


def test_intervals_cover_the_true_lengths_when_the_cap_cuts_validation_rows() -> None:
    train, val, test, true, cap = censored_splits(0.4)
    assert 0.35 < val.censored.mean() < 0.45
    model = ConformalPredictor(PromptLengthPredictor())
    model.fit(train, val)
    dist = model.predict_distribution(test.static_view(model.needs))
    naive = ConformalPredictor(PromptLengthPredictor())  # censored scores taken at face value
    naive.fit(train, val)
    naive.offsets = conformal_offsets(np.log(val.lengths) - np.log(naive._point(
        naive.base.predict(val.static_view(naive.needs)))), naive.levels)
    naive_dist = naive.predict_distribution(test.static_view(naive.needs))
    for lo, hi, nominal in ((0.1, 0.9, 0.8), (0.25, 0.75, 0.5)):
        band = 2.576 * np.sqrt(nominal * (1 - nominal) * (1 / len(test) + 1 / len(val)))
        q = dist.quantile([lo, hi])
        coverage = np.mean((q[:, 0] <= true) & (true <= q[:, 1]))  # of the lengths past the cap
        assert abs(coverage - nominal) < band, (nominal, coverage, band)
        q = naive_dist.quantile([lo, hi])
        assert np.mean((q[:, 0] <= true) & (true <= q[:, 1])) < nominal - 2 * band
    assert model.report()["conformal"]["n_calibration_censored"] == val.censored.sum()


def test_an_unbounded_level_is_put_at_the_cap() -> None:
    """A level the censored scores leave unreached has no finite offset: its quantile goes to
    the largest validation length (the cap), or higher when a lower level already is."""
    train, val, test, _, cap = censored_splits(0.4)
    model = ConformalPredictor(PromptLengthPredictor())
    model.fit(train, val)
    assert model.top == cap
    model.offsets = np.array([-0.5, -0.1, 0.2, 3.0, np.inf])
    static = test.static_view(model.needs)
    q = model.predict_distribution(static).quantile([0.75, 0.9])
    point = model._point(model.predict(static))
    assert np.allclose(q[:, 1], np.maximum(cap, point * np.exp(3.0)))
