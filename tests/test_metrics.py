"""Metrics against hand-computed values and against scipy."""

from __future__ import annotations

import doctest

import numpy as np
import pytest
from scipy import stats

from lenbench.scoring import metrics
from lenbench.scoring.metrics import dynamic_metrics, static_metrics
from lenbench.scoring.noise_floor import noise_floor_bounds, noise_floor_predictions

# A tiny dynamic example. Rows 0 and 1 are two samples of prompt "p", row 2 is prompt "q" and is
# scored only at every second step (strided features), which the protocol must allow.
#   row 0: L=4, t=0..3, remaining 4 3 2 1, predicted 5 3 1 1 -> errors 1 0 1 0 -> mean 2/4 = 0.5
#   row 1: L=2, t=0..1, remaining 2 1,     predicted 4 1     -> errors 2 0     -> mean 2/2 = 1.0
#   row 2: L=5, t=0,2,4, remaining 5 3 1,  predicted 2 3 2   -> errors 3 0 1   -> mean 4/3
# OUTLETS MAE = (0.5 + 1.0 + 4/3) / 3 = 17/18. (Pooling all 9 steps would give 8/9: wrong.)
LENGTHS = np.array([4, 2, 5])
GROUPS = np.array(["p", "p", "q"])
STEP_ROW = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
STEP_T = np.array([0, 1, 2, 3, 0, 1, 0, 2, 4])
PRED_REM = np.array([5, 3, 1, 1, 4, 1, 2, 3, 2], dtype=float)


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(metrics).failed == 0


def test_dynamic_mae_hand_computed() -> None:
    d = dynamic_metrics(STEP_ROW, STEP_T, LENGTHS, PRED_REM, GROUPS, n_boot=200)
    assert d["mae"] == pytest.approx(17 / 18)
    assert d["n_steps"] == 9
    assert d["n_requests"] == 3
    assert d["n_prompts"] == 2
    # remaining lengths pooled over steps: 4+3+2+1 + 2+1 + 5+3+1 = 22, over 9 steps
    assert d["mean_remaining"] == pytest.approx(22 / 9)
    low, high = d["mae_ci"]
    assert low <= d["mae"] <= high


def test_dynamic_mae_by_progress_two_bins() -> None:
    # bin = floor(2 t / L):
    #   row 0 (L=4): t=0,1 -> bin 0 (errors 1, 0: mean 0.5); t=2,3 -> bin 1 (errors 1, 0: mean 0.5)
    #   row 1 (L=2): t=0 -> bin 0 (error 2);                 t=1 -> bin 1 (error 0)
    #   row 2 (L=5): t=0,2 -> bin 0 (errors 3, 0: mean 1.5); t=4 -> bin 1 (error 1)
    # bin 0 = (0.5 + 2 + 1.5) / 3 = 4/3, bin 1 = (0.5 + 0 + 1) / 3 = 0.5
    d = dynamic_metrics(STEP_ROW, STEP_T, LENGTHS, PRED_REM, GROUPS, n_boot=0, n_bins=2)
    assert d["mae_by_progress"] == pytest.approx([4 / 3, 0.5])
    assert d["mae_ci"] is None


def test_dynamic_mae_by_decile_marks_empty_bins() -> None:
    # bin = floor(10 t / L): row 0 -> 0, 2, 5, 7; row 1 -> 0, 5; row 2 -> 0, 4, 8.
    # bin 0: errors 1 (row 0), 2 (row 1), 3 (row 2) -> 2.0;  bin 5: 1 (row 0), 0 (row 1) -> 0.5
    d = dynamic_metrics(STEP_ROW, STEP_T, LENGTHS, PRED_REM, GROUPS, n_boot=0)
    by = d["mae_by_progress"]
    assert len(by) == 10
    assert by[0] == pytest.approx(2.0)
    assert by[5] == pytest.approx(0.5)
    assert by[1] is None and by[3] is None and by[9] is None


def test_dynamic_mae_by_observed_steps() -> None:
    # t = 0: rows 0, 1, 2 errors 1, 2, 3 -> 2.0 over 3 requests; t = 2: row 0 (error 1) and row 2
    # (error 0) -> 0.5; t = 1: rows 0 and 1 (errors 0, 0); t = 3: row 0 only (error 0); t = 8: none
    d = dynamic_metrics(STEP_ROW, STEP_T, LENGTHS, PRED_REM, GROUPS, n_boot=0,
                        observed_steps=(0, 1, 2, 3, 8))
    assert d["observed_steps"] == [0, 1, 2, 3, 8]
    assert d["mae_by_observed_steps"] == pytest.approx([2.0, 0.0, 0.5, 0.0, None])
    assert d["n_by_observed_steps"] == [3, 2, 2, 1, 0]
    # the default grid stops at the largest scored t (4 here): only t = 0
    d = dynamic_metrics(STEP_ROW, STEP_T, LENGTHS, PRED_REM, GROUPS, n_boot=0)
    assert d["observed_steps"] == [0] and d["mae_by_observed_steps"] == pytest.approx([2.0])


def test_observed_step_grid_doubles_from_eight() -> None:
    assert metrics.observed_step_grid(0) == [0]
    assert metrics.observed_step_grid(7) == [0]
    assert metrics.observed_step_grid(8) == [0, 8]
    assert metrics.observed_step_grid(200) == [0, 8, 16, 32, 64, 128]


def test_dynamic_rejects_steps_outside_the_response() -> None:
    with pytest.raises(ValueError, match="outside"):
        dynamic_metrics(np.array([0]), np.array([4]), np.array([4]), np.array([1.0]),
                        np.array([0]), n_boot=0)


def test_static_hand_computed() -> None:
    true = np.array([10, 20, 40, 100])
    pred = np.array([12, 20, 30, 150])
    # errors 2, 0, -10, 50 -> MAE 62/4 = 15.5, RMSE sqrt((4 + 0 + 100 + 2500)/4) = sqrt(651)
    # within 25%: |2|<=2.5 yes, |0|<=5 yes, |10|<=10 yes, |50|<=25 no -> 0.75
    m = static_metrics(true, pred, groups=np.array([0, 0, 1, 2]), n_boot=100)
    assert m["mae"] == pytest.approx(15.5)
    assert m["rmse"] == pytest.approx(np.sqrt(651))
    assert m["within_25"] == pytest.approx(0.75)
    assert m["mean_signed_error"] == pytest.approx(42 / 4)
    assert m["mean_true"] == pytest.approx(42.5) and m["mean_pred"] == pytest.approx(53.0)
    assert m["n"] == 4 and m["n_prompts"] == 3 and m["n_excluded"] == 0


def test_kendall_tau_b_with_ties_matches_scipy() -> None:
    true = np.array([1, 2, 2, 3, 3, 3, 7, 7])
    pred = np.array([1, 1, 2, 2, 3, 3, 3, 9])
    m = static_metrics(true, pred, groups=np.arange(8), n_boot=0)
    assert m["kendall_tau"] == pytest.approx(stats.kendalltau(true, pred, variant="b")[0])
    assert m["spearman"] == pytest.approx(stats.spearmanr(true, pred)[0])
    # ties must matter: tau-b differs from tau-a here
    assert m["kendall_tau"] != pytest.approx(stats.kendalltau(true, pred, variant="c")[0])


def test_constant_prediction_has_no_rank_correlation() -> None:
    m = static_metrics(np.array([5, 9, 20]), np.full(3, 10.0), groups=np.arange(3), n_boot=0)
    assert m["kendall_tau"] is None and m["spearman"] is None
    assert m["mae"] == pytest.approx((5 + 1 + 10) / 3)


def test_non_finite_predictions_are_excluded_and_counted() -> None:
    m = static_metrics(np.array([10, 20, 30]), np.array([11, np.nan, 33]), np.arange(3), n_boot=0)
    assert m["n"] == 2 and m["n_excluded"] == 1
    assert m["mae"] == pytest.approx(2.0)


def _noisy(n: int, seed: int, per_prompt: int = 4) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n // per_prompt), per_prompt)
    true = rng.integers(10, 1000, size=groups.size).astype(float)
    # the error is shared by the samples of a prompt, so rows of a prompt are correlated
    pred = true + rng.normal(0, 50, size=groups.max() + 1)[groups]
    return true, pred, groups


def test_bootstrap_ci_contains_estimate_and_shrinks_with_n() -> None:
    widths = []
    for n in (200, 5000):
        true, pred, groups = _noisy(n, seed=1)
        m = static_metrics(true, pred, groups, n_boot=1000, seed=0)
        low, high = m["mae_ci"]
        assert low < m["mae"] < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 3  # ~ 1/sqrt(25) = 1/5 in theory


def test_bootstrap_is_over_prompts_and_seeded() -> None:
    true, pred, groups = _noisy(2000, seed=2, per_prompt=10)
    by_prompt = static_metrics(true, pred, groups, seed=0)["mae_ci"]
    by_row = static_metrics(true, pred, np.arange(true.size), seed=0)["mae_ci"]
    # correlated rows: treating them as independent would understate the uncertainty
    assert by_prompt[1] - by_prompt[0] > 1.5 * (by_row[1] - by_row[0])
    assert static_metrics(true, pred, groups, seed=0)["mae_ci"] == by_prompt


def test_noise_floor_leave_one_out_median() -> None:
    # prompt a: 10, 20, 30 -> 10 gets median(20, 30) = 25, 20 gets median(10, 30) = 20,
    #                         30 gets median(10, 20) = 15
    # prompt b: 5, 7       -> 5 gets 7, 7 gets 5;   prompt c: a single sample -> NaN
    lengths = np.array([10, 5, 100, 20, 7, 30])
    groups = np.array(["a", "b", "c", "a", "b", "a"])
    out = noise_floor_predictions(lengths, groups)
    np.testing.assert_allclose(out, [25, 7, np.nan, 20, 5, 15])
    # and it scores through static_metrics with the singleton counted as excluded
    m = static_metrics(lengths, out, groups, n_boot=0)
    assert m["n_excluded"] == 1
    assert m["mae"] == pytest.approx((15 + 2 + 0 + 2 + 15) / 5)


def test_censored_rows_score_only_a_shortfall() -> None:
    """Rows 1 and 2 are cut at 10: predicting 12 there is no error, predicting 7 is 3 short."""
    true = np.array([10, 10, 10, 30])
    pred = np.array([14, 12, 7, 30])
    cens = np.array([False, True, True, False])
    m = static_metrics(true, pred, groups=np.arange(4), n_boot=0, censored=cens)
    assert m["mae"] == pytest.approx((4 + 0 + 3 + 0) / 4)
    assert m["mean_signed_error"] == pytest.approx((4 + 0 - 3 + 0) / 4)
    assert m["rmse"] == pytest.approx(np.sqrt((16 + 9) / 4))
    assert m["n_censored"] == 2
    plain = static_metrics(true, pred, groups=np.arange(4), n_boot=0)
    assert plain["mae"] == pytest.approx((4 + 2 + 3 + 0) / 4) and plain["n_censored"] == 0


def test_censored_rows_lower_bound_dynamic_targets() -> None:
    """Row 1 (L=3, censored): at t=0 the target 3 is a lower bound, so predicting 5 costs 0 and
    predicting 1 at t=1 costs 1; the uncensored row 0 is scored as usual."""
    d = dynamic_metrics(step_row=np.array([0, 0, 1, 1]), step_t=np.array([0, 1, 0, 1]),
                        lengths=np.array([2, 3]), pred_remaining=np.array([3, 1, 5, 1]),
                        groups=np.array([0, 1]), n_boot=0, censored=np.array([False, True]))
    # request 0: (|2-3| + |1-1|) / 2 = 0.5; request 1: (0 + |2-1|) / 2 = 0.5
    assert d["mae"] == pytest.approx(0.5)


def _discrete_world(n_prompts: int, k: int, seed: int):
    """Prompts with known length distributions (lognormal-shaped on a grid): samples, and the
    true floor, the mean over prompts of E|L - median(L)| computed exactly."""
    rng = np.random.default_rng(seed)
    grid = np.arange(1, 600)
    lengths, groups, floors = [], [], []
    for g in range(n_prompts):
        mu, sigma = rng.uniform(2.5, 5.0), rng.uniform(0.2, 0.9)
        p = np.exp(-((np.log(grid) - mu) ** 2) / (2 * sigma**2)) / grid
        p /= p.sum()
        median = grid[np.searchsorted(np.cumsum(p), 0.5)]
        floors.append(float(np.sum(p * np.abs(grid - median))))
        lengths.append(rng.choice(grid, size=k, p=p))
        groups.append(np.full(k, g))
    return np.concatenate(lengths), np.concatenate(groups), float(np.mean(floors))


@pytest.mark.parametrize("k", [2, 4, 8])
def test_the_noise_floor_interval_contains_the_true_floor(k: int) -> None:
    lengths, groups, floor = _discrete_world(400, k, seed=k)
    b = noise_floor_bounds(lengths, groups, n_boot=500, seed=0)
    assert b["in_sample"] < floor < b["leave_one_out"], (b, floor)
    assert b["interval"][0] < floor < b["interval"][1]
    assert b["n"] == 400 * k and b["n_prompts"] == 400


def test_noise_floor_bounds_by_hand() -> None:
    """Prompt a: 10, 20 -> in-sample median 15 (errors 5, 5), others 20, 10 (errors 10, 10);
    prompt b: 4, 4, 10 -> median 4 (0, 0, 6); others' medians 7, 7, 4 (3, 3, 6); c has one
    sample and is left out."""
    b = noise_floor_bounds(np.array([10, 20, 4, 4, 10, 99]),
                                   np.array(["a", "a", "b", "b", "b", "c"]), n_boot=0)
    assert b["in_sample"] == pytest.approx(16 / 5)
    assert b["leave_one_out"] == pytest.approx(32 / 5)
    assert b["n"] == 5 and b["interval"] is None
    assert noise_floor_bounds(np.array([1, 2]), np.array([0, 1])) is None


def test_noise_floor_bounds_with_censored_samples_by_hand() -> None:
    """Prompt a: 10 and 50 cut at the cap of 50 -> any prediction in [10, 50] errs 40 in all
    (10 short of nothing above 50 is known): in-sample 20 per row; each row predicted by the
    other errs 40. Prompt b: 10, 20, 50 (cut) -> best p = 20 (10 + 0 + 30); the others' medians
    35, 30, 15 err 25, 10, 35 (the cut row only by its shortfall)."""
    lengths = np.array([10, 50, 10, 20, 50])
    groups = np.array(["a", "a", "b", "b", "b"])
    cens = np.array([False, True, False, False, True])
    b = noise_floor_bounds(lengths, groups, cens, n_boot=0)
    assert b["in_sample"] == pytest.approx((40 + 40) / 5)
    assert b["leave_one_out"] == pytest.approx((40 + 40 + 25 + 10 + 35) / 5)
    assert (b["n"], b["n_censored"], b["n_prompts_median_censored"]) == (5, 2, 1)


def _capped_world(n_prompts: int, k: int, seed: int):
    """_discrete_world's prompts with every sample above the cap recorded at the cap and
    flagged, the cap set so that 40% of samples are cut. The true floor under the point
    metrics' censored score: per prompt, E|min(L, cap) - min(median, cap)| (a prediction at or
    above a cut length errs 0, a shorter one its shortfall), from the known distributions."""
    rng = np.random.default_rng(seed)
    grid = np.arange(1, 600)
    dists, samples = [], []
    for _ in range(n_prompts):
        mu, sigma = rng.uniform(2.5, 5.0), rng.uniform(0.2, 0.9)
        p = np.exp(-((np.log(grid) - mu) ** 2) / (2 * sigma**2)) / grid
        p /= p.sum()
        dists.append(p)
        samples.append(rng.choice(grid, size=k, p=p))
    lengths = np.concatenate(samples)
    cap = float(np.quantile(lengths, 0.6))
    floors = []
    for p in dists:
        median = grid[np.searchsorted(np.cumsum(p), 0.5)]
        floors.append(float(np.sum(p * np.abs(np.minimum(grid, cap) - min(median, cap)))))
    groups = np.repeat(np.arange(n_prompts), k)
    return np.minimum(lengths, cap), groups, lengths >= cap, float(np.mean(floors))


@pytest.mark.parametrize("k", [2, 4])
def test_the_noise_floor_holds_with_censored_samples(k: int) -> None:
    lengths, groups, cens, floor = _capped_world(400, k, seed=k)
    assert 0.35 < cens.mean() < 0.45
    b = noise_floor_bounds(lengths, groups, cens, n_boot=500, seed=0)
    assert b["in_sample"] < floor < b["leave_one_out"], (b, floor)
    assert b["interval"][0] < floor < b["interval"][1]
    assert b["n"] == 400 * k and b["n_censored"] == cens.sum()


def test_paired_difference_is_narrower_than_unpaired() -> None:
    """Two predictors with a shared per-prompt difficulty: b is better by 1 token per row."""
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(200), 2)
    difficulty = rng.exponential(30, 200)[groups]
    err_b = difficulty + rng.normal(0, 0.5, 400).clip(-5, 5)
    err_a = err_b + 1.0
    d = metrics.paired_difference(err_a, err_b, groups, n_boot=500)
    assert d["mean"] == pytest.approx(1.0) and d["excludes_zero"]
    assert d["ci"][1] - d["ci"][0] < 1e-6  # the difference is exactly 1 on every row
    same = metrics.paired_difference(err_b, err_b + rng.normal(0, 1, 400), groups, n_boot=500)
    assert not same["excludes_zero"]


def test_observed_steps_over_one_fixed_population() -> None:
    """L = 2, 20, 30, 40: three of four outlive t = 16, one outlives 32, so T = 16 and the
    population is the three longer requests at every t <= 16 (the 2-token one never counts)."""
    lengths = np.array([2, 20, 30, 40])
    rows = np.concatenate([np.full(L, i) for i, L in enumerate(lengths)])
    ts = np.concatenate([np.arange(L) for L in lengths])
    pred = np.where(rows == 0, 100.0, (lengths[rows] - ts) + rows)  # request i is off by i
    d = dynamic_metrics(rows, ts, lengths, pred, groups=np.arange(4), n_boot=0,
                        observed_steps=(0, 8, 16, 32))
    fixed = d["fixed_population"]
    assert fixed["t_max"] == 16 and fixed["n_requests"] == 3
    assert fixed["observed_steps"] == [0, 8, 16]
    assert fixed["mae"] == pytest.approx([2.0, 2.0, 2.0])  # (1 + 2 + 3) / 3 at every t
    assert d["mae_by_observed_steps"][0] == pytest.approx((98 + 1 + 2 + 3) / 4)
