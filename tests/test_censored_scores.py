"""The distribution scores on simulated worlds whose true lengths are known past the cap: a row
censored at the cap is scored from its cut-off alone, and each score matches (or bounds) what
the uncensored truth gives."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.scoring.distribution_metrics import (
    distribution_metrics,
    dynamic_distribution_metrics,
    pit_histogram,
)
from lenbench.scoring.distribution_scores import clip_counts, crps, pinball, pit, row_scores

EDGES = np.arange(0.0, 1201.0)  # one-token bins: integer lengths 1 .. 1200


def world(n: int = 3000, censored_share: float = 0.4, seed: int = 0):
    """Rows with known length distributions, L = ceil(X) with X lognormal around each row's own
    median; the predictor that returns them is calibrated. Returns (distributions, true lengths,
    cap): the cap cuts off about `censored_share` of the rows."""
    rng = np.random.default_rng(seed)
    mu = rng.uniform(3.5, 5.0, n)
    sigma = 0.5
    cdf = stats.norm.cdf((np.log(np.maximum(EDGES, 1e-9))[None, :] - mu[:, None]) / sigma)
    cdf[:, 0] = 0.0
    probs = np.diff(cdf, axis=1)
    dist = LengthDistribution.from_histogram(EDGES, probs)
    true = np.ceil(np.exp(mu + sigma * rng.standard_normal(n))).clip(1, EDGES[-1])
    cap = float(np.quantile(true, 1.0 - censored_share))
    return dist, true, cap


def observed(true: np.ndarray, cap: float) -> tuple[np.ndarray, np.ndarray]:
    """What a run records: the length cut at the cap, and whether it was cut."""
    return np.minimum(true, cap), true >= cap


def test_weighted_crps_of_a_censored_row_is_its_true_score() -> None:
    dist, true, cap = world()
    seen, cens = observed(true, cap)
    assert 0.35 < cens.mean() < 0.45
    scored = row_scores(dist, seen, cens, cap, cap)["crps"]
    # the same integral over [1, cap) against the length past the cap, row by row
    assert scored == pytest.approx(crps(dist, true, 1.0, cap), abs=1e-9)
    # and against a brute-force integral of (F(x) - 1{x >= L})² on a fine grid
    xs = np.linspace(1.0, cap, 40001)
    for i in np.flatnonzero(cens)[:3].tolist() + np.flatnonzero(~cens)[:3].tolist():
        f = np.interp(xs, EDGES, np.concatenate([[0.0], np.cumsum(dist.probs[i])]))
        assert scored[i] == pytest.approx(np.trapezoid((f - (xs >= true[i])) ** 2, xs), rel=1e-3)


def test_weighted_crps_in_quantile_form_matches_the_histogram() -> None:
    dist, true, cap = world(n=200)
    levels = np.arange(1, 400) / 400
    quantiles = LengthDistribution.from_quantiles(levels, dist.quantile(levels))
    seen, cens = observed(true, cap)
    exact = row_scores(dist, seen, cens, cap, cap)["crps"]
    # the quantile form puts 1/400 of mass at each outer quantile: a small difference
    assert row_scores(quantiles, seen, cens, cap, cap)["crps"] == pytest.approx(exact, abs=0.3)


def test_weighted_crps_ranks_the_true_distribution_first() -> None:
    """A proper score: the calibrated predictor beats one shifted up or down (over every row:
    on the censored rows alone, a distribution shifted up scores better, as it should)."""
    dist, true, cap = world()
    seen, cens = observed(true, cap)
    best = row_scores(dist, seen, cens, cap, cap)["crps"]
    for shift in (-15.0, 15.0):
        moved = LengthDistribution.from_histogram(EDGES + shift, dist.probs)
        worse = row_scores(moved, seen, cens, cap, cap)["crps"]
        assert worse.mean() > best.mean()


def test_pit_of_a_calibrated_predictor_is_flat_with_censored_rows_drawn() -> None:
    dist, true, cap = world(n=6000)
    seen, cens = observed(true, cap)
    values = pit(dist, seen, cens, cap, seed=3)
    hist = pit_histogram(values)
    assert max(abs(h - 0.1) for h in hist) < 0.02, hist
    # dropping the censored rows instead empties the top bins
    assert pit_histogram(values[~cens])[-1] < 0.02
    # against the true lengths (no censoring) the histogram is flat as well
    assert max(abs(h - 0.1) for h in pit_histogram(pit(dist, true))) < 0.02
    # each censored row's draw lies in [F(c - 1), 1]; the draws are reproducible by seed
    assert np.all(values[cens] >= dist.cdf(seen - 1)[cens] - 1e-12)
    again = pit(dist, seen, cens, cap, seed=3)
    other = pit(dist, seen, cens, cap, seed=4)
    assert np.array_equal(values, again)
    assert np.array_equal(values[~cens], other[~cens]) and not np.allclose(values, other)


def _open_top_coverage(q: np.ndarray, true: np.ndarray, cap: float) -> np.ndarray:
    """Coverage of the true length by [lo, hi] clipped to the cap, read as open above when it
    reaches the cap ("the cap or beyond")."""
    lo, hi = np.clip(q[:, 0], 1, cap), np.clip(q[:, 1], 1, cap)
    return (lo <= true) & ((true <= hi) | (hi >= cap))


def test_coverage_at_the_cap_is_exact_for_the_true_lengths() -> None:
    dist, true, cap = world()
    seen, cens = observed(true, cap)
    s = row_scores(dist, seen, cens, cap, cap)
    for name, levels in (("50", [0.25, 0.75]), ("80", [0.1, 0.9])):
        truth = _open_top_coverage(dist.quantile(levels), true, cap)
        # every censored row is decided, and as the true length decides it
        assert np.array_equal(s[f"coverage_{name}"], truth)
        assert np.array_equal(s[f"coverage_{name}_high"], truth)
    # a calibrated predictor covers the nominal share of its clipped intervals: more than 80%
    # here, as an interval that reaches the cap also holds the mass beyond it
    for name, nominal in (("50", 0.5), ("80", 0.8)):
        assert s[f"coverage_{name}"].mean() > nominal + 0.05
        assert s[f"coverage_{name}"].mean() == pytest.approx(
            s[f"coverage_{name}_nominal"].mean(), abs=0.03)  # binomial noise, integer ends
    # the nominal share: q_hi - q_lo, 1 - q_lo where the interval reaches the cap
    q = dist.quantile([0.1, 0.9])
    assert s["coverage_80_nominal"] == pytest.approx(np.where(q[:, 1] >= cap, 0.9, 0.8))


def test_coverage_bounds_hold_when_rows_are_cut_below_the_cap() -> None:
    """Imported traces can cut answers at their own limits: a row cut below the cap may be
    undecidable, and the bounds then contain the true coverage."""
    dist, true, cap = world()
    rng = np.random.default_rng(1)
    cut = rng.uniform(40, cap, true.size).round()
    seen, cens = np.minimum(true, cut), true >= cut
    s = row_scores(dist, seen, cens, cap, None)
    truth = _open_top_coverage(dist.quantile([0.1, 0.9]), true, cap)
    assert s["coverage_80"].mean() <= truth.mean() <= s["coverage_80_high"].mean()
    assert np.all(s["coverage_80"] <= truth) and np.all(truth <= s["coverage_80_high"])
    assert s["coverage_80_high"].mean() - s["coverage_80"].mean() > 0.05  # some undecidable


def test_pinball_of_a_censored_row_is_a_lower_bound() -> None:
    dist, true, cap = world()
    seen, cens = observed(true, cap)
    bound = pinball(dist, seen, censored=cens, cap=cap)
    exact = pinball(dist, true, cap=cap)  # the same clipped quantiles against the truth
    assert np.allclose(bound[~cens], exact[~cens])
    assert np.all(bound[cens] <= exact[cens] + 1e-9)
    assert bound[cens].mean() < exact[cens].mean()
    # cut below the cap, a quantile above the cut-off gets no loss (the length may be there)
    d = LengthDistribution.from_quantiles(QUANTILE_LEVELS, [[10, 20, 30, 40, 50]])
    loss = pinball(d, [25], censored=[True], cap=100)[0]
    assert loss.tolist() == pytest.approx([0.1 * 15, 0.25 * 5, 0, 0, 0])


def test_distributions_are_clipped_to_one_and_the_cap_and_counted() -> None:
    # quantiles at 0.1 and 0.9: row 0 reaches below 1, row 1 above the cap of 100, row 2 stays
    # inside; clipping moves that mass to 1 and to the cap
    d = LengthDistribution.from_quantiles([0.1, 0.9], [[-10.0, 90.0], [40.0, 140.0],
                                                       [20.0, 60.0]])
    counts = clip_counts(d, 100)
    assert counts["low"].tolist() == [True, False, False]
    assert counts["high"].tolist() == [False, True, False]
    s = row_scores(d, [5.0, 100.0, 30.0], [False, True, False], 100, 100)
    assert s["width_80"].tolist() == pytest.approx([89.0, 60.0, 40.0])
    # row 1's interval reaches the cap: it covers its censored length
    assert s["coverage_80"].tolist() == [1.0, 1.0, 1.0]
    m = distribution_metrics(d, [5.0, 100.0, 30.0], ["a", "b", "c"], [False, True, False], 100)
    assert (m["n_clipped_low"], m["n_clipped_high"]) == (1, 1)
    assert m["clipped_mass"] == pytest.approx((counts["mass"]).mean())


def test_dynamic_scores_cover_every_step_of_censored_requests() -> None:
    """Remaining lengths: at step t the cap is cap - t and a censored row's L - t a lower bound;
    its steps are scored, as the true remaining lengths would score them."""
    dist, true, cap = world(n=300)
    seen, cens = observed(true, cap)
    rows = np.concatenate([np.full(int(L), i) for i, L in enumerate(seen)])[::5]
    t = np.concatenate([np.arange(int(L)) for L in seen])[::5].astype(float)
    # each row's own distribution moved back by t (quantiles on a fine grid of levels)
    levels = np.arange(1, 1000) / 1000
    remaining = LengthDistribution.from_quantiles(levels, dist.quantile(levels)[rows] - t[:, None])
    groups = np.arange(seen.size)
    m = dynamic_distribution_metrics(rows, t, seen, remaining, groups, cens, cap)
    assert (m["n_steps"], m["n_requests"], m["n_censored"]) == (rows.size, seen.size,
                                                                 cens.sum())
    assert m["n_censored_steps"] == cens[rows].sum() > 0
    truth = dynamic_distribution_metrics(rows, t, true, remaining, groups, None, None, cap)
    assert m["crps"] == pytest.approx(truth["crps"])
    assert m["crps_ci"] == pytest.approx(truth["crps_ci"])
