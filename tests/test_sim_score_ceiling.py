"""The oracle is the scheduling score's ceiling, and the long class is the tail of the known
lengths, not the length cap.

A world like the SmolLM2 one: lengths cut at a 384-token cap, about 40% of them at it. Two keys
that use the true lengths coarsely (SJF below the median and one value above it; a one-bit median
classifier) can match or beat SJF on the true lengths on some draws; no score may exceed the
oracle's, at any aging weight. Requests cut at the cap are the capped class, and the long class's
threshold is read from the other lengths, so that it stays below the cap.
"""

from __future__ import annotations

import numpy as np
import pytest

from lenbench.configs import load_preset
from lenbench.sim import SimConfig, run_figures, simulate, simulate_predictions
from lenbench.sim.metrics import class_masks
from lenbench.sim.predictors import one_bit
from lenbench.sim.record import scheduling_record
from lenbench.sim.score import paired_score_difference, score_interval
from lenbench.sim.workload import draw_workload

CAP = 384


def capped_world(seed: int = 1, n: int = 600, mu: float = 5.75, sigma: float = 0.8
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(true lengths cut at CAP, censored flags, prompt lengths): ~40% of the rows at the cap
    by default."""
    rng = np.random.default_rng(seed)
    raw = np.rint(rng.lognormal(mu, sigma, n)).astype(np.int64) + 1
    return np.minimum(raw, CAP), raw >= CAP, rng.integers(30, 120, n)


def two_class(true: np.ndarray) -> np.ndarray:
    """SJF order below the median, one value for everything above it (FCFS among those)."""
    return np.where(true < np.median(true), true, 10_000.0).astype(np.float64)


def toy_cfg(**kw: object) -> SimConfig:
    """The toy preset's cluster at its protocol-4 setting (load 0.85, the aging guard, no load
    sweep): the cap is what these tests are about, not the load."""
    cfg = SimConfig.from_dict(load_preset("sim", "default"))
    return cfg.replace(**{"n_requests": 1200, "seeds": (0, 1, 2, 3), "starvation": "aging",
                          "aging_alpha": 1.0, "sweep_loads": (), "headline_min_gain": None,
                          **kw})


def test_the_cap_bounds_a_score_by_hand() -> None:
    """A row whose mean gain exceeds the oracle's scores exactly 1 (its plain ratio is kept as
    "uncapped"); its interval ends at 1 at most; below the oracle the cap changes nothing; in a
    paired difference the capped row counts as the oracle."""
    base = np.array([10.0, 10.0, 10.0, 10.0])
    oracle_gain = np.array([1.0, 1.2, 0.8, 1.0])
    above = score_interval(np.array([1.3, 1.1, 1.0, 1.2]), oracle_gain, base, capped=True)
    assert above["value"] == 1.0 and above["capped"] is True
    assert above["uncapped"] == pytest.approx(4.6 / 4.0)
    assert above["ci95_high"] == 1.0 and above["ci95_low"] <= 1.0
    plain = score_interval(np.array([1.3, 1.1, 1.0, 1.2]), oracle_gain, base)
    assert plain["value"] == pytest.approx(1.15)  # what an uncapped score would show
    below = score_interval(np.array([0.5, 0.7, 0.3, 0.5]), oracle_gain, base, capped=True)
    assert below["value"] == pytest.approx(0.5) and below["capped"] is False
    same = paired_score_difference(np.array([1.3, 1.1, 1.0, 1.2]), oracle_gain, oracle_gain,
                                   base)
    assert same["value"] == 0.0  # capped: the oracle's own score, 1 - 1
    half = paired_score_difference(oracle_gain, np.array([0.5, 0.7, 0.3, 0.5]), oracle_gain,
                                   base)
    assert half["value"] == pytest.approx(0.5)


@pytest.mark.parametrize("metric", ["e2e_mean_all", "e2e_mean_short"])
def test_coarse_true_length_keys_do_not_exceed_the_oracle(metric: str) -> None:
    """The reviewers' keys on a capped world: the two-class key and the one-bit median classifier
    score at most 100%, interval included, at the headline weight and at each swept weight.
    On the short-request figure the two-class key's plain ratio goes past 1 here (it delays
    the long half, which that figure does not count), so the cap is what holds it."""
    true, cut, prompt = capped_world()
    cfg = toy_cfg(score_metric=metric, aging_alpha=0.5, score_alphas=(0, 0.5, 4))
    scores = []
    for name, key in (("two_class", two_class(true)),
                      ("one_bit", one_bit(true, float(np.median(true))))):
        rec = scheduling_record(true, key, prompt, name, cfg, censored=cut)
        scores.append(rec["rows"][name]["score"][metric])
        scores += [e["rows"][name]["score"] for e in rec["by_alpha"]["entries"]]
        assert rec["rows"]["oracle"]["score"][metric]["value"] == 1.0
    assert scores[0]["value"] is not None and scores[4]["value"] is not None  # not vacuous
    for s in scores:  # a weight at which the oracle's gain is unclear gives no score at all
        assert s["value"] is None or (s["value"] <= 1.0 and s["ci95_high"] <= 1.0)
    if metric == "e2e_mean_short":
        assert any(s["capped"] and s["uncapped"] > 1.0 for s in scores)


def test_one_bit_classifier_trails_the_oracle_on_all_requests() -> None:
    """On the mean latency of all requests under plain SJF (no guard), where SJF is the
    mean-optimal order, one bit of advice keeps clearly less than the oracle's gain: its plain
    ratio, interval included, is below 1 without the cap's help (on a world with fewer rows at
    the cap, ~27%: with many more, most of SJF's order above the median is a tie anyway)."""
    true, cut, prompt = capped_world(seed=0, n=800, mu=5.4, sigma=0.9)
    cfg = toy_cfg(starvation="none", aging_alpha=0.0, n_requests=1500)
    res = simulate_predictions(true, one_bit(true, float(np.median(true))), prompt, cfg,
                               name="one_bit", censored=cut, quantile_points=0)
    score = res["rows"]["one_bit"]["score"]["e2e_mean_all"]
    assert score["uncapped"] < 1.0 and score["ci95_high"] < 1.0 and not score["capped"]
    assert score["value"] > 0.5  # it does help: one bit is worth something


def test_long_class_is_below_the_cap() -> None:
    """With ~40% of the rows at the cap, the 90th percentile of all lengths is the cap itself:
    a long class read from it would be the capped share. Read from the uncensored lengths (both
    thresholds, so that short and long stay apart), the long threshold is below the cap, the
    class excludes the capped rows, and its share is below the capped share; the capped rows are
    their own class."""
    true, cut, prompt = capped_world()
    assert np.percentile(true, 90) == CAP  # the trap
    cfg = toy_cfg()
    short_thr, long_thr = cfg.thresholds(true, cut)
    assert long_thr < CAP and long_thr == pytest.approx(np.percentile(true[~cut], 90))
    assert short_thr == pytest.approx(np.percentile(true[~cut], 50))  # the same lengths
    masks = class_masks(true, short_thr, long_thr, cut)
    assert not (masks["long"] & cut).any() and (masks["capped"] == cut).all()
    assert not (masks["short"] & masks["long"]).any()
    assert 0 < masks["long"].mean() < cut.mean()
    res = simulate_predictions(true, true * 1.0, prompt, cfg.replace(seeds=(0,)), censored=cut,
                               quantile_points=0)
    assert res["long_threshold"] < CAP
    shares = res["class_shares"]
    assert shares["long"] < shares["capped"] == pytest.approx(cut.mean())
    # a run's figures count the classes the same way, from the workload's censored flags
    wl = draw_workload(true, true, prompt, 500, 5.0, seed=0, censored=cut)
    figs = run_figures(simulate(wl, cfg, queue="fcfs"), short_thr, long_thr)
    assert figs["n_long"] == ((wl.true_len >= long_thr) & ~wl.censored).sum()
    assert figs["n_capped"] == wl.censored.sum() > figs["n_long"]


def test_short_and_long_classes_stay_apart_with_many_rows_at_the_cap() -> None:
    """At 45% of the rows at the cap (SmolLM2's share), the median of all lengths lies above the
    90th percentile of the uncensored ones: read from different lengths, the short and long
    classes would overlap. Both thresholds come from the uncensored lengths."""
    true, cut, _ = capped_world(mu=5.9)
    assert np.percentile(true, 50) > np.percentile(true[~cut], 90)  # the trap
    short_thr, long_thr = toy_cfg().thresholds(true, cut)
    masks = class_masks(true, short_thr, long_thr, cut)
    assert short_thr <= long_thr < CAP
    assert masks["short"].any() and masks["long"].any()
    assert not (masks["short"] & masks["long"]).any()
