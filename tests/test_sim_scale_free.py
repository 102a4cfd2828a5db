"""The scheduling score depends on a predictor's ranking, not its units: rank-quantile keys (by
hand), scaled copies of a predictor and of its predicted distribution score the same, inflated
true lengths cannot beat the oracle, and no score is given (with the reason) when the oracle does
not clearly gain."""

from __future__ import annotations

import numpy as np
import pytest

from lenbench.configs import load_preset
from lenbench.sim import SimConfig, lognormal_lengths, noisy_oracle, simulate_predictions
from lenbench.sim.comparison import compare_policies
from lenbench.sim.keys import rank_keys, tokens_per_quantile
from lenbench.sim.score import oracle_gain_problem, score_interval

METRIC = "e2e_mean_short"


def toy_rows(n: int = 500, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Short answers like the embedded toy world's (mean ~45 tokens)."""
    rng = np.random.default_rng(seed)
    return lognormal_lengths(n, rng, mean=45, sigma=0.9, cap=400), rng.integers(5, 30, n)


def toy_cfg(**kw: object) -> SimConfig:
    """The toy preset with the aging guard on (α = 1), on fewer requests and seeds."""
    cfg = SimConfig.from_dict(load_preset("sim", "default"))
    return cfg.replace(**{"n_requests": 600, "seeds": (0, 1, 2), "starvation": "aging",
                          "aging_alpha": 1.0, **kw})


def test_rank_keys_by_hand() -> None:
    """key(x) = (#below + #equal / 2) / n: ties stay tied, a constant is 1/2 everywhere, and any
    strictly increasing map of the values leaves the keys unchanged."""
    np.testing.assert_allclose(rank_keys([3.0, 1.0, 3.0, 10.0]), [0.5, 0.125, 0.5, 0.875])
    np.testing.assert_array_equal(rank_keys(np.full(5, 7.0)), np.full(5, 0.5))
    x = np.random.default_rng(0).lognormal(3.0, 1.0, 200).round()
    for same_ranking in (3 * x, 0.5 * x, np.sqrt(x), x + 1000):
        np.testing.assert_array_equal(rank_keys(same_ranking), rank_keys(x))
    with pytest.raises(ValueError, match="finite"):
        rank_keys([1.0, np.nan])
    # tokens per quantile: the inverse mean density between q10 and q90 (here 1..101 uniform)
    assert tokens_per_quantile(np.arange(1, 102)) == pytest.approx((91.0 - 11.0) / 0.8)


def test_scaled_copies_score_the_same() -> None:
    """A predictor, its x3 and x0.5 copies and a monotone transform of it have one ranking, so
    they serve the same schedule under SJF with aging: same figures, same score."""
    true, prompt = toy_rows()
    pred = noisy_oracle(true, 0.6, seed=4)
    res = simulate_predictions(true, pred, prompt, toy_cfg(n_requests=1000), name="p",
                               quantile_points=0,
                               extra_predictors={"x3": 3 * pred, "x0.5": 0.5 * pred,
                                                 "sqrt": np.sqrt(pred)})
    rows = res["rows"]
    base = rows["p"]["score"][METRIC]["value"]
    assert base is not None and 0.2 < base < 0.98  # a real, imperfect predictor
    for copy in ("x3", "x0.5", "sqrt"):
        assert rows[copy]["score"][METRIC]["value"] == pytest.approx(base, abs=0.05)
        assert rows[copy]["figures"] == rows["p"]["figures"], copy
    # the quality column still reads the predictions in tokens
    assert rows["x3"]["quality"]["mae"] != rows["p"]["quality"]["mae"]


def test_inflated_true_lengths_cannot_beat_the_oracle() -> None:
    """3x the true lengths (or any other order-preserving inflation) is the oracle's ranking:
    it reproduces the oracle's run and scores exactly 1 on every metric."""
    true, prompt = toy_rows(seed=1)
    res = simulate_predictions(true, 3.0 * true, prompt, toy_cfg(n_requests=1500),
                               name="x3_true",
                               extra_predictors={"plus": true + 500.0}, quantile_points=0)
    rows = res["rows"]
    for row in ("x3_true", "plus"):
        assert rows[row]["figures"] == rows["oracle"]["figures"]
        for score in rows[row]["score"].values():
            assert score["value"] in (1.0, None)
    assert rows["x3_true"]["score"][METRIC]["value"] == 1.0


def test_distributional_key_is_rank_keyed() -> None:
    """An inflated predicted distribution (every quantile x1.92, as an upper quantile is larger
    than a point prediction) orders the same and scores the same as the original."""
    true, prompt = toy_rows(n=300, seed=2)
    pred = noisy_oracle(true, 0.4, seed=5)
    q = np.sort(pred[:, None] * np.array([0.6, 0.8, 1.0, 1.3, 1.8]), axis=1)
    cfg = toy_cfg(n_requests=400, seeds=(0, 1), compare=True, order_by="quantile",
                  order_quantile=0.9, max_preemptions=0)
    ref = simulate_predictions(true, pred, prompt, cfg, name="p", quantile_points=0)
    out = [compare_policies(true, pred, prompt, cfg, name="p", reference=ref, quantiles=qs)
           for qs in (q, 1.92 * q)]
    a, b = (o["rows"]["distributional"] for o in out)
    assert a["per_seed"] == b["per_seed"]
    assert a["score"][METRIC]["value"] == b["score"][METRIC]["value"]
    assert "rank quantiles" in out[0]["definition"] and "tokens/s" in out[0]["definition"]


def test_no_score_without_a_clear_oracle_gain() -> None:
    """A loss of the oracle gives no score (not a sign-flipped one), nor does a gain within two
    standard errors of 0 over the simulator seeds; each says why. A clear gain is scored, however
    small a share of the baseline's figure it is."""
    base = np.array([10.0, 10.0, 10.0])
    worse = score_interval(base - np.array([12.0, 12.0, 12.0]), np.array([-0.5, -0.4, -0.6]),
                           base)  # the oracle is 5% slower; the row is 20% slower
    assert worse["value"] is None and worse["ci95_low"] is None
    assert worse["reason"] == "no oracle gain: -5.0% of baseline"
    noisy = score_interval(np.array([0.1, 0.1, 0.1]), np.array([0.3, -0.05, 0.05]), base)
    assert noisy["value"] is None and noisy["reason"] == (
        "oracle gain +1.0% of baseline, within 2 standard errors of 0 over 3 simulator seeds")
    clear = score_interval(np.array([1.0, 1.2, 0.8]), np.array([2.0, 2.1, 1.9]), base)
    assert clear["value"] == pytest.approx(0.5) and clear["reason"] is None
    small = score_interval(np.array([0.05, 0.05, 0.05]), np.array([0.1, 0.11, 0.09]), base)
    assert small["value"] == pytest.approx(0.5)  # a clear gain of 1% of the baseline
    assert oracle_gain_problem([np.nan], [1.0]) == "no simulator seed with finite figures"


def test_no_score_when_queues_never_form() -> None:
    """At a tenth of the saturation rate no queue forms, the oracle gains nothing, and every
    row's score is None with the reason in its score and in the headline."""
    true, prompt = toy_rows(n=300, seed=3)
    res = simulate_predictions(true, noisy_oracle(true, 0.3, seed=1), prompt,
                               toy_cfg(load_factor=0.1, arrival_cv=1.0, n_requests=200),
                               name="p", quantile_points=0)
    score = res["rows"]["p"]["score"][METRIC]
    assert score["value"] is None and score["reason"].startswith(("no oracle gain",
                                                                  "oracle gain"))
    head = {h["row"]: h for h in res["headline"]}
    assert head["p"]["score"] is None and head["p"]["score_reason"] == score["reason"]


def test_headline_score_refuses_srpt() -> None:
    true, prompt = toy_rows(n=50)
    with pytest.raises(ValueError, match="sim.queue"):
        simulate_predictions(true, true, prompt, toy_cfg(queue="srpt"))
