"""Static and dynamic metrics for length predictors, bootstrap intervals and paired differences.

Every interval is a bootstrap over *prompts*, not rows: samples of one prompt share the prompt and
are correlated, so resampling rows would make the intervals too narrow when there are several
samples per prompt (docs/protocol.md).

Hand-checkable example (two prompts; prompt ``a`` has two samples)::

    >>> import numpy as np
    >>> m = static_metrics(np.array([10, 20, 40]), np.array([12, 20, 30]),
    ...                    groups=np.array(["a", "a", "b"]), n_boot=200)
    >>> m["mae"]                 # (|12-10| + |20-20| + |30-40|) / 3 = 12 / 3
    4.0
    >>> m["mean_signed_error"]   # (2 + 0 - 10) / 3
    -2.6666666666666665
    >>> m["within_25"]           # |2| <= 2.5 yes, |0| <= 5 yes, |-10| <= 10 yes
    1.0
    >>> m["c_index"]             # pairs (10, 20), (10, 40), (20, 40): 12 < 20 < 30, concordant
    1.0
    >>> d = dynamic_metrics(step_row=np.array([0, 0, 1]), step_t=np.array([0, 1, 0]),
    ...                     lengths=np.array([2, 4]), pred_remaining=np.array([1, 1, 4]),
    ...                     groups=np.array([0, 1]), n_boot=0)
    >>> d["mae"]                 # request 0: (|2-1| + |1-1|) / 2 = 0.5; request 1: |4-4| = 0
    0.25
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from lenbench.scoring.censored_rows import confirmed_within, reached_cap
from lenbench.scoring.concordance import concordance_summary

__all__ = [
    "bootstrap_ratio_ci",
    "censored_error",
    "dynamic_metrics",
    "observed_step_grid",
    "paired_difference",
    "seeded_bootstrap_ci",
    "request_errors",
    "static_metrics",
]

# Bootstrap replicates are computed in blocks so that memory stays bounded (block x n_groups ints).
_BOOT_BLOCK = 256


def _group_ids(groups: np.ndarray, n: int, what: str) -> np.ndarray:
    """Map arbitrary group labels (prompt ids) to 0..G-1 so that bincount can aggregate them."""
    groups = np.asarray(groups)
    if groups.shape != (n,):
        raise ValueError(f"{what}: groups has shape {groups.shape}, expected ({n},): pass one "
                         "prompt id per row")
    return np.unique(groups, return_inverse=True)[1].reshape(-1)


def bootstrap_ratio_ci(
    num: np.ndarray, den: np.ndarray, n_boot: int = 1000, seed: int = 0, ci: float = 0.95
) -> list[float] | None:
    """Percentile interval of sum(num)/sum(den) when whole clusters are resampled with replacement.

    ``num[g]`` and ``den[g]`` are per-cluster totals (e.g. summed absolute error and row count of a
    prompt). Working on cluster totals makes each replicate a weighted sum, so 1000 replicates over
    thousands of prompts take milliseconds. Returns None when no interval can be formed.
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    n_groups = num.shape[0]
    if n_boot <= 0 or n_groups == 0:
        return None
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, _BOOT_BLOCK):
        stop = min(start + _BOOT_BLOCK, n_boot)
        idx = rng.integers(0, n_groups, size=(stop - start, n_groups))
        reps[start:stop] = num[idx].sum(axis=1) / den[idx].sum(axis=1)
    alpha = (1.0 - ci) / 2.0
    low, high = np.quantile(reps, [alpha, 1.0 - alpha])
    return [float(low), float(high)]


def _rank_corr(fn: Any, x: np.ndarray, y: np.ndarray) -> float | None:
    """A rank correlation, or None where it is undefined (constant input, fewer than two rows).

    None (not 0.0) because a constant predictor has no ranking at all; 0.0 would claim a measured
    absence of correlation. The leaderboard shows None as "—".
    """
    if x.size < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        value = float(fn(x, y)[0])
    return None if np.isnan(value) else value


def static_metrics(
    true: np.ndarray,
    pred: np.ndarray,
    groups: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    censored: np.ndarray | None = None,
    cap: float | None = None,
) -> dict[str, Any]:
    """Pointwise and rank metrics of total-length predictions, with a prompt-level bootstrap CI.

    Rows whose prediction is not finite (e.g. the noise floor for a prompt with a single sample)
    are excluded and counted in ``n_excluded`` rather than silently dropped.

    ``censored`` marks rows whose true length is only known to be at least ``true`` (the cap cut
    them off): their error is the shortfall ``true - pred`` when the prediction falls short, and
    0 when it reaches the censoring point (``censored_error``); ``n_censored`` counts them.
    ``mae_uncensored`` is the MAE over the other rows. ``c_index`` is Harrell's C over every row
    (``lenbench.scoring.concordance``), the rank score the tables show; ``kendall_tau`` (tau-b)
    and ``spearman`` use the uncensored rows only and are None when undefined. ``within_25``
    counts only rows the data decide (``confirmed_within``): ``within_25_n`` of them.
    ``runaway_auc`` is the AUC of the prediction for "reached the cap" (censored, or as long as
    `cap`), ``n_runaway`` such rows; None when every row or none reached it.
    """
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    pred = np.asarray(pred, dtype=np.float64).reshape(-1)
    if true.shape != pred.shape:
        raise ValueError(f"static_metrics: true has {true.size} rows but pred has {pred.size}; "
                         "predict() must return one value per row")
    gid = _group_ids(groups, true.size, "static_metrics")
    if not np.all(np.isfinite(true)):
        raise ValueError("static_metrics: true lengths contain NaN/inf; check the labels")
    cens = np.zeros(true.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    if cens.shape != true.shape:
        raise ValueError(f"static_metrics: censored has {cens.size} flags for {true.size} rows")
    keep = np.isfinite(pred)
    n_excluded = int((~keep).sum())
    true, pred, gid, cens = true[keep], pred[keep], gid[keep], cens[keep]
    if true.size == 0:
        raise ValueError("static_metrics: no rows with a finite prediction to score")

    err = censored_error(pred, true, cens)
    abs_err = np.abs(err)
    gid = np.unique(gid, return_inverse=True)[1].reshape(-1)  # present prompts only

    def share(num: np.ndarray, rows: np.ndarray) -> tuple[float | None, list[float] | None]:
        """The mean of `num` over `rows`, with its interval over the prompts that have some."""
        if not rows.any():
            return None, None
        g_num = np.bincount(gid[rows], weights=num[rows], minlength=gid.max() + 1)
        g_cnt = np.bincount(gid[rows], minlength=gid.max() + 1).astype(np.float64)
        has = g_cnt > 0
        return float(num[rows].mean()), bootstrap_ratio_ci(g_num[has], g_cnt[has], n_boot,
                                                           seed, ci)

    everyone = np.ones(true.size, bool)
    mae, mae_ci = share(abs_err, everyone)
    mae_unc, mae_unc_ci = share(abs_err, ~cens)
    hits, decided = confirmed_within(pred, true, cens)
    within, within_ci = share(hits.astype(np.float64), decided)
    rank = concordance_summary(true, pred, gid, cens, n_boot, seed, ci)
    runaway = reached_cap(true, cens, cap)
    auc = concordance_summary(runaway.astype(np.float64), pred, gid, None, n_boot, seed, ci) \
        if 0 < runaway.sum() < runaway.size else {"value": None, "ci": None}
    return {
        "n": int(true.size),
        "n_excluded": n_excluded,
        "n_prompts": int(gid.max() + 1),
        "mae": mae,
        "mae_ci": mae_ci,
        "mae_uncensored": mae_unc,
        "mae_uncensored_ci": mae_unc_ci,
        "rmse": float(np.sqrt(np.mean(err**2))),
        "n_censored": int(cens.sum()),
        "c_index": rank["value"],
        "c_index_ci": rank["ci"],
        "n_comparable_pairs": rank["n_pairs"],
        "kendall_tau": _rank_corr(stats.kendalltau, true[~cens], pred[~cens]),
        "spearman": _rank_corr(stats.spearmanr, true[~cens], pred[~cens]),
        "within_25": within,
        "within_25_ci": within_ci,
        "within_25_n": int(decided.sum()),
        "runaway_auc": auc["value"],
        "runaway_auc_ci": auc["ci"],
        "n_runaway": int(runaway.sum()),
        "mean_signed_error": float(err.mean()),
        "mean_true": float(true.mean()),
        "mean_pred": float(pred.mean()),
    }


def censored_error(pred: np.ndarray, true: np.ndarray, censored: np.ndarray) -> np.ndarray:
    """Signed error ``pred - true``, except where ``true`` is a right-censored lower bound and the
    prediction reaches it: then no error can be claimed, so 0.

    >>> censored_error(np.array([5., 12., 8.]), np.array([10., 10., 10.]),
    ...                np.array([False, True, True])).tolist()
    [-5.0, 0.0, -2.0]
    """
    err = pred - true
    return np.where(censored & (err > 0), 0.0, err)


def dynamic_metrics(
    step_row: np.ndarray,
    step_t: np.ndarray,
    lengths: np.ndarray,
    pred_remaining: np.ndarray,
    groups: np.ndarray,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
    n_bins: int = 10,
    observed_steps: tuple[int, ...] | None = None,
    censored: np.ndarray | None = None,
) -> dict[str, Any]:
    """Remaining-length MAE by the OUTLETS protocol, its prompt-level CI, and MAE by progress bin
    and by observed steps.

    Per request, the mean over its scored steps of |(L - t) - r_t|; then the plain mean over
    requests, so long responses (many steps) do not dominate (docs/protocol.md). Steps may be
    strided: only the steps given are averaged. ``mae_by_progress[b]`` uses steps with
    floor(n_bins * t / L) == b, also averaged per request first; it is None for a bin that no step
    falls in.

    ``mae_by_observed_steps[i]`` is the ForeLen/PLP warm-up reading (ForeLen, arXiv 2602.11812):
    the MAE of L - t at exactly t = ``observed_steps[i]`` over the requests still decoding at t
    (one step per request, so a plain mean), with ``n_by_observed_steps[i]`` such requests. The
    default steps are 0, 8, 16, 32, ... up to the largest scored t. A t that strided features
    skip has no steps: its MAE is None and its count 0. For a ``censored`` row (per row, like
    ``lengths``) L - t is a lower bound and is scored as ``censored_error`` is.
    """
    step_row = np.asarray(step_row).reshape(-1).astype(np.int64)
    step_t = np.asarray(step_t).reshape(-1).astype(np.int64)
    lengths = np.asarray(lengths).reshape(-1).astype(np.int64)
    pred_remaining = np.asarray(pred_remaining, dtype=np.float64).reshape(-1)
    n_steps = step_row.size
    if step_t.size != n_steps or pred_remaining.size != n_steps:
        raise ValueError(f"dynamic_metrics: step_row ({n_steps}), step_t ({step_t.size}) and "
                         f"pred_remaining ({pred_remaining.size}) must have one entry per step")
    if n_steps == 0:
        raise ValueError("dynamic_metrics: no steps to score")
    gid = _group_ids(groups, lengths.size, "dynamic_metrics")
    if step_row.min() < 0 or step_row.max() >= lengths.size:
        raise ValueError(f"dynamic_metrics: step_row must index lengths (0..{lengths.size - 1})")
    total = lengths[step_row]
    bad = (step_t < 0) | (step_t >= total)
    if bad.any():
        s = int(np.argmax(bad))
        raise ValueError(f"dynamic_metrics: step {s} has t={step_t[s]} outside [0, L={total[s]}) "
                         f"for row {step_row[s]}; steps must satisfy 0 <= t < L; docs/protocol.md)")
    if not np.all(np.isfinite(pred_remaining)):
        raise ValueError("dynamic_metrics: pred_remaining contains NaN/inf")

    remaining = total - step_t
    row_cens = np.zeros(lengths.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    if row_cens.shape != lengths.shape:
        raise ValueError(f"dynamic_metrics: censored has {row_cens.size} flags for "
                         f"{lengths.size} rows")
    abs_err = np.abs(censored_error(pred_remaining, remaining.astype(np.float64),
                                    row_cens[step_row]))
    n_rows = lengths.size

    # Per-request mean error, then per-prompt totals of those means for the bootstrap.
    per_request = _request_means(step_row, abs_err, n_rows)
    scored = np.isfinite(per_request)
    r_mean = per_request[scored]
    r_gid = gid[scored]
    g_sum = np.bincount(r_gid, weights=r_mean)
    g_cnt = np.bincount(r_gid).astype(np.float64)
    present = g_cnt > 0

    # Progress bins: per (request, bin) mean, then the mean over requests present in the bin.
    b = np.minimum((n_bins * step_t) // total, n_bins - 1)
    cell = step_row * n_bins + b
    c_sum = np.bincount(cell, weights=abs_err, minlength=n_rows * n_bins).reshape(n_rows, n_bins)
    c_cnt = np.bincount(cell, minlength=n_rows * n_bins).reshape(n_rows, n_bins)
    by_progress: list[float | None] = []
    for k in range(n_bins):
        has = c_cnt[:, k] > 0
        by_progress.append(float(np.mean(c_sum[has, k] / c_cnt[has, k])) if has.any() else None)

    if observed_steps is None:
        observed_steps = observed_step_grid(int(step_t.max()))
    by_observed: list[float | None] = []
    n_observed: list[int] = []
    for t in observed_steps:
        at = step_t == t
        n_observed.append(int(np.unique(step_row[at]).size))
        by_observed.append(float(abs_err[at].mean()) if at.any() else None)

    fixed = _fixed_population(step_row, step_t, total, abs_err, observed_steps, n_rows)
    return {
        "fixed_population": fixed,
        "n_steps": int(n_steps),
        "n_requests": int(scored.sum()),
        "n_prompts": int(present.sum()),
        "mae": float(r_mean.mean()),
        "mae_ci": bootstrap_ratio_ci(g_sum[present], g_cnt[present], n_boot, seed, ci),
        "mae_by_progress": by_progress,
        "observed_steps": [int(t) for t in observed_steps],
        "mae_by_observed_steps": by_observed,
        "n_by_observed_steps": n_observed,
        "mean_remaining": float(remaining.mean()),
        "std_remaining": float(remaining.std()),
    }


def _fixed_population(step_row: np.ndarray, step_t: np.ndarray, total: np.ndarray,
                      abs_err: np.ndarray, observed_steps: Sequence[int],
                      n_rows: int) -> dict[str, Any] | None:
    """MAE at each observed t <= T over one population: the requests with L > T, where T is the
    largest observed t that at least half of the scored requests outlive. The plain by-observed
    reading loses the short requests as t grows, so its columns cover different requests; these
    columns do not (at the price of covering only the longer half)."""
    lengths = np.zeros(n_rows, dtype=np.int64)
    lengths[step_row] = total
    scored = np.unique(step_row)
    reach = [t for t in observed_steps if (lengths[scored] > t).sum() * 2 >= scored.size]
    if not reach:
        return None
    t_max = max(reach)
    members = np.zeros(n_rows, dtype=bool)
    members[scored[lengths[scored] > t_max]] = True
    ts = [int(t) for t in observed_steps if t <= t_max]
    mae = []
    for t in ts:
        at = (step_t == t) & members[step_row]
        mae.append(float(abs_err[at].mean()) if at.any() else None)
    return {"t_max": int(t_max), "n_requests": int(members.sum()), "observed_steps": ts,
            "mae": mae}


def observed_step_grid(max_t: int) -> list[int]:
    """0, 8, 16, 32, 64, ... up to ``max_t``: the observed-step counts the ForeLen note reports."""
    grid, t = [0], 8
    while t <= max_t:
        grid.append(t)
        t *= 2
    return grid


def _rows_by_group(gid: np.ndarray) -> list[np.ndarray]:
    """The row indices of each group (0..G-1 ids), one array per group."""
    order = np.argsort(gid, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(gid[order])) + 1)


def paired_difference(err_a: np.ndarray, err_b: np.ndarray, groups: np.ndarray,
                      n_boot: int = 1000, seed: int = 0, ci: float = 0.95) -> dict[str, Any]:
    """Mean of ``err_a - err_b`` over the same rows, with a bootstrap interval over prompts and,
    where a side has several seeds, over its seeds too.

    Two predictors scored on the same prompts share the prompts' difficulty, so the interval of
    their difference is much narrower than the two unpaired intervals suggest. ``err_a`` and
    ``err_b`` are one error per row, or one row of errors per seed (seeds x rows): then the mean
    is taken over each side's seeds first, and each replicate also redraws each side's seeds
    with replacement, so that a difference smaller than training variance is not called
    significant (`seeded_bootstrap_ci`). With one seed a side the interval is the prompt
    bootstrap alone. ``excludes_zero`` says whether the interval lies on one side of 0;
    ``seeds`` holds each side's number of seeds.
    """
    a = np.atleast_2d(np.asarray(err_a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(err_b, dtype=np.float64))
    if a.ndim > 2 or b.ndim > 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"paired_difference: errors of shape {np.shape(err_a)} and "
                         f"{np.shape(err_b)} do not cover the same rows")
    diff = a.mean(axis=0) - b.mean(axis=0)
    gid = _group_ids(groups, diff.size, "paired_difference")
    count = np.bincount(gid).astype(np.float64)
    if a.shape[0] == 1 and b.shape[0] == 1:
        interval = bootstrap_ratio_ci(np.bincount(gid, weights=diff), count, n_boot, seed, ci)
    else:
        interval = seeded_bootstrap_ci(_cluster_totals(a, gid), _cluster_totals(b, gid), count,
                                       n_boot, seed, ci)
    return {"mean": float(diff.mean()), "ci": interval, "n": int(diff.size),
            "seeds": [int(a.shape[0]), int(b.shape[0])],
            "excludes_zero": bool(interval is not None and (interval[0] > 0 or interval[1] < 0))}


def _cluster_totals(errors: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Seeds x clusters: each seed's summed error over each prompt's rows."""
    return np.stack([np.bincount(gid, weights=row, minlength=int(gid.max()) + 1)
                     for row in errors])


def seeded_bootstrap_ci(tot_a: np.ndarray, tot_b: np.ndarray, count: np.ndarray,
                        n_boot: int = 1000, seed: int = 0, ci: float = 0.95
                        ) -> list[float] | None:
    """Percentile interval of (mean over A's seeds - mean over B's seeds) of the per-row error,
    when whole prompts are resampled with replacement and, in the same replicate, each side's
    seeds are resampled with replacement too (a two-level bootstrap: prompts, then seeds).

    ``tot_a`` (seeds x clusters) holds each seed's summed error per prompt, ``count`` each
    prompt's rows. The prompt draws come from the same random stream as `bootstrap_ratio_ci`'s,
    the seed draws from a stream of their own.
    """
    n_groups = count.shape[0]
    if n_boot <= 0 or n_groups == 0:
        return None
    rng = np.random.default_rng(seed)
    seed_rng = np.random.default_rng([seed, 1])
    reps = np.empty(n_boot, dtype=np.float64)
    for start in range(0, n_boot, _BOOT_BLOCK):
        stop = min(start + _BOOT_BLOCK, n_boot)
        idx = rng.integers(0, n_groups, size=(stop - start, n_groups))
        den = count[idx].sum(axis=1)
        side = []
        for tot in (tot_a, tot_b):
            per_seed = tot[:, idx].sum(axis=2).T  # replicates x seeds
            drawn = seed_rng.integers(0, tot.shape[0], size=per_seed.shape)
            side.append(np.take_along_axis(per_seed, drawn, axis=1).mean(axis=1))
        reps[start:stop] = (side[0] - side[1]) / den
    alpha = (1.0 - ci) / 2.0
    low, high = np.quantile(reps, [alpha, 1.0 - alpha])
    return [float(low), float(high)]


def request_errors(step_row: np.ndarray, step_t: np.ndarray, lengths: np.ndarray,
                   pred_remaining: np.ndarray, censored: np.ndarray | None = None) -> np.ndarray:
    """Each request's mean |(L - t) - r_t| over its scored steps (NaN for a request with none):
    the per-request numbers whose mean is the dynamic MAE, kept so that two predictors can be
    compared request by request."""
    step_row = np.asarray(step_row).reshape(-1).astype(np.int64)
    lengths = np.asarray(lengths).reshape(-1)
    remaining = (lengths[step_row] - np.asarray(step_t).reshape(-1)).astype(np.float64)
    cens = np.zeros(lengths.size, bool) if censored is None else np.asarray(censored, bool)
    err = np.abs(censored_error(np.asarray(pred_remaining, dtype=np.float64).reshape(-1),
                                remaining, cens[step_row]))
    return _request_means(step_row, err, lengths.size)


def _request_means(step_row: np.ndarray, step_err: np.ndarray, n_rows: int) -> np.ndarray:
    """Mean of `step_err` per request (row), NaN for a request with no step."""
    total = np.bincount(step_row, weights=step_err, minlength=n_rows)
    count = np.bincount(step_row, minlength=n_rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)
