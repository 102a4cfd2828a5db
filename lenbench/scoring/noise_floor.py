"""The noise floor: the error of knowing each prompt's median length, the best a prompt-only
predictor can do when one prompt has many possible lengths (docs/protocol.md, "The noise floor").

Censored samples are used, not dropped. A sample cut off at the cap is known to be at least its
recorded length, and the point metrics score a prediction against it by its shortfall only
(``metrics.censored_error``); the floor is the least expected error of that same score. A
prompt's median is known when fewer than half of its samples are censored; otherwise it lies at
or beyond the cut-off, and a prediction there, clipped to the cap as every prediction is, is the
cap itself, whose error is known. Both bounds below therefore hold with censored samples in them.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np

from lenbench.scoring.metrics import _group_ids, _rows_by_group, bootstrap_ratio_ci, censored_error


def siblings_of_each(values: np.ndarray) -> np.ndarray:
    """(k, k - 1): row i holds the values of every member but i (the leave-one-out samples)."""
    k = values.size
    return np.broadcast_to(values, (k, k))[~np.eye(k, dtype=bool)].reshape(k, k - 1)


def noise_floor_predictions(lengths: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Predict each sample by the median length of the *other* samples of its prompt.

    Another draw from the same prompt is the best any prompt-only predictor can hope to know, so its
    error estimates the irreducible (sampling) error. Leaving the sample itself out keeps the
    estimate honest. NaN where a prompt has a single sample: there is nothing to predict from.
    """
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    gid = _group_ids(groups, lengths.size, "noise_floor_predictions")
    out = np.full(lengths.size, np.nan)
    for rows in _rows_by_group(gid):
        k = rows.size
        if k < 2:
            continue
        out[rows] = np.median(siblings_of_each(lengths[rows]), axis=1)
    return out


def _in_sample_errors(lengths: np.ndarray, cens: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Each row's error at its prompt's best single prediction: the p that minimises the prompt's
    summed censored error (``censored_error``). Without censoring that is the sample median. The
    sum is convex and piecewise linear with kinks at the recorded lengths, so the best p is one
    of them."""
    out = np.empty(lengths.size)
    for rows in _rows_by_group(gid):
        x, c = lengths[rows], cens[rows]
        err = np.abs(censored_error(x[:, None], x[None, :], c[None, :]))  # candidate p x row
        out[rows] = err[np.argmin(err.sum(axis=1))]
    return out


def noise_floor_bounds(lengths: np.ndarray, groups: np.ndarray, censored: np.ndarray | None = None,
                       n_boot: int = 1000, seed: int = 0, ci: float = 0.95
                       ) -> dict[str, Any] | None:
    """Bounds on the irreducible MAE: the error of knowing each prompt's true median length.

    With k samples per prompt the true median is unknown. The prediction that minimises the
    prompt's own summed error (its sample median when nothing is censored) scores at most what
    the true median would (optimistic: a lower bound); the median of the *other* samples'
    recorded lengths is independent of the row, and the true median (clipped to the cap)
    minimises the expected error against it, so it scores at least as much (pessimistic: an upper
    bound; exactly twice the in-sample error at k = 2). Censored rows (``censored``) count with
    the point metrics' censored error. The floor lies between the bounds; ``interval`` joins the
    lower end of the in-sample bootstrap interval to the upper end of the leave-one-out one
    (prompts resampled). Prompts with one sample are left out (``n`` counts the rows used,
    ``n_censored`` the censored ones among them; ``n_prompts_median_censored`` the prompts with
    at least half their samples censored, whose median is only known to lie at or beyond the
    cut-off). None when no prompt has two samples.
    """
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    gid = _group_ids(groups, lengths.size, "noise_floor_bounds")
    cens = np.zeros(lengths.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    if cens.size != lengths.size:
        raise ValueError(f"noise_floor_bounds: censored has {cens.size} flags for "
                         f"{lengths.size} rows")
    sizes = np.bincount(gid)
    keep = sizes[gid] >= 2
    if not keep.any():
        return None
    lengths, cens = lengths[keep], cens[keep]
    gid = np.unique(gid[keep], return_inverse=True)[1].reshape(-1)
    counts = np.bincount(gid).astype(np.float64)
    in_err = _in_sample_errors(lengths, cens, gid)
    loo_err = np.abs(censored_error(noise_floor_predictions(lengths, gid), lengths, cens))
    in_ci = bootstrap_ratio_ci(np.bincount(gid, weights=in_err), counts, n_boot, seed, ci)
    loo_ci = bootstrap_ratio_ci(np.bincount(gid, weights=loo_err), counts, n_boot, seed, ci)
    half_censored = 2 * np.bincount(gid, weights=cens.astype(np.float64)) >= counts
    return {
        "n": int(lengths.size), "n_prompts": int(counts.size), "n_censored": int(cens.sum()),
        "n_prompts_median_censored": int(half_censored.sum()),
        "in_sample": float(in_err.mean()), "in_sample_ci": in_ci,
        "leave_one_out": float(loo_err.mean()), "leave_one_out_ci": loo_ci,
        "interval": None if in_ci is None or loo_ci is None else [in_ci[0], loo_ci[1]],
    }


DENSE_SAMPLES = 8  # the samples a prompt needs for the extrapolated floor
FIRST_FIT_SIZE = 3  # the smallest median size the extrapolation fits (1 and 2 are far off 1/j)


def _subsets(n: int, j: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    """Index sets of size j from range(n): all of them, or `limit` drawn without repeats."""
    from itertools import combinations
    from math import comb

    if comb(n, j) <= limit:
        return np.array(list(combinations(range(n), j)), dtype=np.int64).reshape(-1, j)
    return np.sort(np.stack([rng.choice(n, j, replace=False) for _ in range(limit)]), axis=1)


def median_error_curve(lengths: np.ndarray, cens: np.ndarray, sizes: range,
                       rng: np.random.Generator, limit: int = 64) -> np.ndarray:
    """D(j) for one prompt: the mean censored error of predicting each of its samples by the
    median of j of its other samples, over every such set (or `limit` drawn ones)."""
    k = lengths.size
    others = np.stack([np.delete(np.arange(k), i) for i in range(k)])  # k x (k - 1)
    out = []
    for j in sizes:
        picks = others[:, _subsets(k - 1, j, limit, rng)]  # k x sets x j
        med = np.median(lengths[picks], axis=2)  # k x sets
        err = np.abs(censored_error(med, lengths[:, None], cens[:, None]))
        out.append(err.mean())
    return np.array(out)


def _extrapolate(curve: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
    """(D at infinitely many samples, slope) of the least-squares line D(j) = D_inf + a / j."""
    x = np.stack([np.ones(sizes.size), 1.0 / sizes], axis=1)
    (d_inf, slope), *_ = np.linalg.lstsq(x, curve, rcond=None)
    return float(d_inf), float(slope)


def extrapolated_floor(lengths: np.ndarray, groups: np.ndarray,
                       censored: np.ndarray | None = None, min_samples: int = DENSE_SAMPLES,
                       n_boot: int = 1000, seed: int = 0, ci: float = 0.95,
                       prompts: Collection | None = None) -> dict[str, Any] | None:
    """One estimate of the irreducible MAE: the error of knowing each prompt's true median.

    The in-sample and leave-one-out bounds (`noise_floor_bounds`) bracket it widely because a
    median of few samples misses the true one. On the prompts with at least `min_samples`
    samples, D(j), the error of predicting a sample by the median of j of its prompt's other
    samples, falls as j grows towards the floor D(inf); the excess of an estimated median's
    error shrinks as 1/j for large j. So D(j) for j = 3 .. min_samples - 1 (averaged over the
    rows, censored ones scored as the point metrics score them) is fitted by D_inf + a / j, and
    D_inf is the estimate; its interval redraws the prompts. With `prompts` (group ids, such as
    the prompts a world drew by hash), only those of them are used: prompts densely sampled
    for being first in the source are no random draw. None with no such prompt.
    """
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    gid = _group_ids(groups, lengths.size, "extrapolated_floor")
    cens = np.zeros(lengths.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    if min_samples < FIRST_FIT_SIZE + 2:
        raise ValueError(f"extrapolated_floor: min_samples must be at least "
                         f"{FIRST_FIT_SIZE + 2} to fit two sizes, not {min_samples}")
    sizes = np.arange(FIRST_FIT_SIZE, min_samples)
    rng = np.random.default_rng([seed, 2])
    curves, weights = [], []
    keep = None if prompts is None else set(prompts)
    names = np.asarray(groups).reshape(-1)
    for rows in _rows_by_group(gid):
        if rows.size >= min_samples and (keep is None or names[rows[0]] in keep):
            curves.append(median_error_curve(lengths[rows], cens[rows],
                                             range(FIRST_FIT_SIZE, min_samples), rng))
            weights.append(rows.size)
    if not curves:
        return None
    c, w = np.stack(curves), np.asarray(weights, dtype=np.float64)
    estimate, slope = _extrapolate(w @ c / w.sum(), sizes)
    interval = None
    if n_boot > 0:
        boot = np.random.default_rng(seed)
        draws = boot.integers(0, len(c), size=(n_boot, len(c)))
        reps = [_extrapolate(w[d] @ c[d] / w[d].sum(), sizes)[0] for d in draws]
        tail = 100 * (1 - ci) / 2
        interval = [float(np.percentile(reps, tail)), float(np.percentile(reps, 100 - tail))]
    return {"estimate": estimate, "ci": interval, "slope": slope,
            "n_prompts": len(c), "n": int(w.sum()), "min_samples": int(min_samples),
            "prompts": "all dense" if prompts is None else "drawn",
            "fit_sizes": [int(j) for j in sizes],
            "curve": [float(v) for v in w @ c / w.sum()]}
