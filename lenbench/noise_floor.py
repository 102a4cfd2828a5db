"""The noise floor: the error of knowing each prompt's median length, the best a prompt-only
predictor can do when one prompt has many possible lengths (docs/protocol.md, "The noise floor").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenbench.metrics import _group_ids, _rows_by_group, bootstrap_ratio_ci


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


def _per_prompt_median(lengths: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Each row's prompt median, the row itself included."""
    out = np.empty(lengths.size)
    for rows in _rows_by_group(gid):
        out[rows] = np.median(lengths[rows])
    return out


def noise_floor_bounds(lengths: np.ndarray, groups: np.ndarray, n_boot: int = 1000,
                       seed: int = 0, ci: float = 0.95) -> dict[str, Any] | None:
    """Bounds on the irreducible MAE: the error of knowing each prompt's true median length.

    With k samples per prompt the true median is unknown. The sample median *including* the row
    minimises the in-sample absolute error, so it scores at most what the true median would
    (optimistic: a lower bound); the median of the *other* samples is independent of the row, and
    the true median minimises the expected error against it, so it scores at least as much
    (pessimistic: an upper bound; exactly twice the in-sample error at k = 2). The floor lies
    between them; ``interval`` joins the lower end of the in-sample bootstrap interval to the
    upper end of the leave-one-out one (prompts resampled). Prompts with one sample are left out
    (``n`` counts the rows used). None when no prompt has two samples.
    """
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    gid = _group_ids(groups, lengths.size, "noise_floor_bounds")
    sizes = np.bincount(gid)
    keep = sizes[gid] >= 2
    if not keep.any():
        return None
    lengths, gid = lengths[keep], np.unique(gid[keep], return_inverse=True)[1].reshape(-1)
    counts = np.bincount(gid).astype(np.float64)
    in_err = np.abs(lengths - _per_prompt_median(lengths, gid))
    loo_err = np.abs(lengths - noise_floor_predictions(lengths, gid))
    in_ci = bootstrap_ratio_ci(np.bincount(gid, weights=in_err), counts, n_boot, seed, ci)
    loo_ci = bootstrap_ratio_ci(np.bincount(gid, weights=loo_err), counts, n_boot, seed, ci)
    return {
        "n": int(lengths.size), "n_prompts": int(counts.size),
        "in_sample": float(in_err.mean()), "in_sample_ci": in_ci,
        "leave_one_out": float(loo_err.mean()), "leave_one_out_ci": loo_ci,
        "interval": None if in_ci is None or loo_ci is None else [in_ci[0], loo_ci[1]],
    }
