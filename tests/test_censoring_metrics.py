"""Point metrics that censoring does not mislead: Harrell's C, within ±25% on decided rows, the
MAE on uncensored rows, the runaway AUCs, and histograms whose mass beyond the bins sits at the
cap."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from scipy import stats

from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.scoring import censored_rows, concordance
from lenbench.scoring.censored_rows import confirmed_within, reached_cap
from lenbench.scoring.concordance import concordance_index, concordance_summary
from lenbench.scoring.distribution_metrics import distribution_metrics, runaway_scores
from lenbench.scoring.distribution_scores import mass_at_cap, row_scores
from lenbench.scoring.metrics import static_metrics


def brute_force_c(true, pred, censored) -> float | None:
    """Harrell's C by its definition, pair by pair."""
    num = den = 0.0
    for i in range(len(true)):
        for j in range(len(true)):
            if not censored[i] and true[i] < true[j]:
                den += 1
                num += 1.0 if pred[j] > pred[i] else 0.5 if pred[j] == pred[i] else 0.0
    return num / den if den else None


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(concordance).failed == 0
    assert doctest.testmod(censored_rows).failed == 0


def test_harrells_c_by_hand() -> None:
    true = np.array([10, 20, 30, 50, 50])
    cens = np.array([False, False, True, False, True])
    pred = np.array([15, 40, 30, 45, 45])
    # comparable pairs (shorter row exact and strictly shorter than the other's recorded length):
    #   row 0 (10) with rows 1, 2, 3, 4: preds 40, 30, 45, 45 all above 15 -> 4 concordant
    #   row 1 (20) with rows 2, 3, 4: 30 < 40 discordant; 45, 45 above 40 -> 2 concordant
    #   row 2 is censored: never the shorter one; row 3 (50, exact) with row 4 (censored at 50):
    #   not strictly shorter, not comparable; rows 3 and 4 with nothing longer.
    # C = (4 + 2) / 7
    assert concordance_index(true, pred, cens) == pytest.approx(6 / 7)
    # a tie in prediction counts one half: row 1 predicted 30, tied with row 2
    pred_tie = np.array([15, 30, 30, 45, 45])
    assert concordance_index(true, pred_tie, cens) == pytest.approx((4 + 0.5 + 2) / 7)
    # without censoring, rows 2 (30) and 4 (50) are exact too: 3 more comparable pairs (2-3,
    # 2-4 concordant; 3-4 tied in length, not comparable, so 9 pairs: 8 concordant + 1 discordant)
    assert concordance_index(true, pred, None) == pytest.approx(8 / 9)


def test_harrells_c_matches_its_definition_and_somers_d() -> None:
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(2, 40))
        true = rng.integers(1, 15, n).astype(float)
        pred = rng.integers(0, 6, n).astype(float)
        cens = rng.random(n) < 0.3
        expected = brute_force_c(true, pred, cens)
        got = concordance_index(true, pred, cens)
        assert got is None if expected is None else got == pytest.approx(expected, abs=1e-12)
    # without censoring C is (1 + Somers' D of pred given true) / 2
    true, pred = rng.integers(1, 50, 300), rng.integers(1, 20, 300)
    d = stats.somersd(true, pred).statistic
    assert concordance_index(true, pred) == pytest.approx((1 + d) / 2, abs=1e-12)


def test_c_interval_resamples_prompts() -> None:
    rng = np.random.default_rng(0)
    true = rng.integers(1, 300, 400).astype(float)
    cens = true > 250
    true[cens] = 256
    pred = true + rng.normal(0, 60, 400)
    groups = np.arange(400) // 4
    s = concordance_summary(true, pred, groups, cens, n_boot=300, seed=1)
    assert s["value"] == pytest.approx(concordance_index(true, pred, cens))
    assert s["ci"][0] < s["value"] < s["ci"][1] and s["ci"][1] - s["ci"][0] < 0.1
    assert concordance_summary(true, pred, groups, cens, n_boot=0)["ci"] is None
    # a constant has no ranking: every comparable pair is a tie
    assert concordance_index(true, np.full(400, 7.0), cens) == 0.5


def test_within_gives_no_credit_to_a_high_prediction_on_a_censored_row() -> None:
    true = np.array([100.0, 100.0, 100.0, 40.0])
    cens = np.array([True, True, True, False])
    pred = np.array([100.0, 500.0, 60.0, 45.0])
    within, decided = confirmed_within(pred, true, cens)
    # rows 0, 1: any true length >= 100 is possible, within for some and not others: undecided;
    # row 2: within needs L <= 60 / 0.75 = 80 < 100: a certain miss; row 3 exact, |5| <= 10
    assert decided.tolist() == [False, False, True, True]
    assert within.tolist() == [False, False, False, True]
    m = static_metrics(true, pred, np.arange(4), n_boot=0, censored=cens)
    assert m["within_25"] == 0.5 and m["within_25_n"] == 2
    # a constant at the cap: the censored rows drop out; only its uncensored hits count
    const = static_metrics(true, np.full(4, 100.0), np.arange(4), n_boot=0, censored=cens)
    assert const["within_25"] == 0.0 and const["within_25_n"] == 1


def test_mae_on_uncensored_rows_and_the_runaway_auc() -> None:
    cap = 100
    true = np.array([10.0, 30.0, 60.0, 100.0, 100.0, 100.0])
    cens = np.array([False, False, False, False, True, True])  # row 3 ended exactly at the cap
    assert reached_cap(true, cens, cap).tolist() == [False, False, False, True, True, True]
    groups = np.arange(6)
    perfect = static_metrics(true, np.array([20.0, 20, 20, 90, 90, 90]), groups, n_boot=200,
                             censored=cens, cap=cap)
    # |20-10| + |20-30| + |20-60| over the three uncensored rows below the cap, and row 3's 10
    assert perfect["mae_uncensored"] == pytest.approx((10 + 10 + 40 + 10) / 4)
    assert perfect["runaway_auc"] == 1.0 and perfect["n_runaway"] == 3
    assert perfect["runaway_auc_ci"] == [1.0, 1.0]
    const = static_metrics(true, np.full(6, 50.0), groups, n_boot=0, censored=cens, cap=cap)
    assert const["runaway_auc"] == 0.5
    backwards = static_metrics(true, 200.0 - true, groups, n_boot=0, censored=cens, cap=cap)
    assert backwards["runaway_auc"] == 0.0
    # without a row at the cap there is nothing to tell apart
    assert static_metrics(true[:3], true[:3], groups[:3], n_boot=0, cap=cap)["runaway_auc"] \
        is None


def test_histogram_mass_beyond_its_bins_lands_at_the_cap_and_covers_a_censored_row() -> None:
    cap = 100.0
    probs = np.array([[0.5, 0.3], [0.9, 0.1]])
    # bins [0, 50), [50, 100) and 0.2 / 0.0 at or beyond 100: a one-token bin at 100
    dist = LengthDistribution.from_histogram([0.0, 50.0, 100.0], probs, tail=[0.2, 0.0])
    np.testing.assert_allclose(dist.edges, [0, 50, 100, 101])
    np.testing.assert_allclose(dist.probs.sum(1), 1.0)
    np.testing.assert_allclose(mass_at_cap(dist, cap), [0.2, 0.0], atol=1e-9)
    q90 = np.clip(dist.quantile([0.9])[:, 0], 1.0, cap)
    assert q90[0] == cap and q90[1] < cap
    true, cens = np.array([cap, cap]), np.array([True, True])
    scores = row_scores(dist, true, cens, cap)
    assert scores["coverage_80"].tolist() == [1.0, 0.0]
    # the same bins without the tail cannot reach the cap: the censored row is missed
    flat = LengthDistribution.from_histogram([0.0, 50.0, 100.0], [[0.5, 0.5]])
    assert row_scores(flat, [cap], [True], cap)["coverage_80"].tolist() == [0.0]
    with pytest.raises(ValueError, match="tail"):
        LengthDistribution.from_histogram([0.0, 50.0, 100.0], probs, tail=[0.2])


def test_distribution_runaway_auc_and_upper_quantiles_at_the_cap() -> None:
    cap = 100.0
    true = np.array([20.0, 40.0, 100.0, 100.0])
    cens = np.array([False, False, True, True])
    # conformal-like: Q(0.9) at the cap on every row, Q(0.75) on the last two
    values = np.array([[5, 10, 20, 40, 100], [10, 20, 30, 60, 100], [20, 40, 60, 100, 100],
                       [30, 50, 80, 100, 120]], dtype=float)
    dist = LengthDistribution.from_quantiles(QUANTILE_LEVELS, values)
    p_cap = mass_at_cap(dist, cap)
    # P(L >= cap) read just below the cap: 1 - 0.9 where only Q(0.9) reaches it, 1 - 0.75 where
    # Q(0.75) does too
    np.testing.assert_allclose(p_cap, [0.1, 0.1, 0.25, 0.25], atol=1e-6)
    quantiles = np.clip(values, 1.0, cap)
    out = runaway_scores(p_cap, quantiles, true, np.arange(4), cens, cap, n_boot=0)
    assert out["q90_at_cap"] == 1.0 and out["q75_at_cap"] == 0.5
    assert out["runaway_auc"] == 1.0
    full = distribution_metrics(dist, true, np.arange(4), cens, cap, n_boot=0)
    assert full["runaway_auc"] == 1.0 and full["q90_at_cap"] == 1.0
    assert runaway_scores(p_cap, quantiles, true, np.arange(4), cens, None)["runaway_auc"] \
        is None
