"""Harrell's C: a rank score that right-censored lengths do not mislead, and the runaway AUC.

A scheduler that orders requests needs the order of their lengths. Kendall τ on the uncensored
rows leaves out the longest answers (those the cap cut), and τ on every row takes a cut length
for an exact one. Harrell's C uses each pair whose order the data decide: a pair is
**comparable** when the shorter of the two is uncensored and strictly shorter than the other's
recorded length (a censored length is a lower bound, so the other row's true length is longer
still). A comparable pair is concordant when the longer row has the larger prediction (1), tied
when the predictions are equal (1/2), discordant otherwise (0); C is the mean over comparable
pairs. 1 orders every decided pair right, 0.5 is a constant or a coin, 0 reverses them. Pairs
tied in recorded length are not comparable, and two rows cut at the cap never are.

Without censoring and with a binary truth, C is the AUC (the Mann-Whitney statistic, ties 1/2):
``runaway_auc`` is C of a score against "reached the cap", the question whether a predictor
tells the answers that run into the cap from the rest.

Every interval is a bootstrap over prompts with the resamples ``metrics.bootstrap_ratio_ci``
draws for the same seed: a resample repeats a prompt's rows as often as the prompt was drawn, so
a pair counts with the product of its two rows' multiplicities. The sums run over the rows sorted
by recorded length, with a Fenwick tree over prediction ranks holding one column per resample:
O(n log n) per block of resamples.

Hand-checkable example (five rows; row 4 is cut at 50)::

    >>> import numpy as np
    >>> true = np.array([10, 20, 30, 40, 50]); cens = np.array([0, 0, 0, 0, 1], bool)
    >>> pred = np.array([12, 11, 30, 30, 60])
    >>> # comparable: every pair whose shorter row is one of rows 0-3 (uncensored, shorter than
    >>> # the other): 4 + 3 + 2 + 1 = 10 pairs. Discordant: (0, 1) (12 > 11). Tied in prediction:
    >>> # (2, 3). The other 8 are concordant: C = (8 + 0.5) / 10.
    >>> concordance_index(true, pred, cens)
    0.85
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

__all__ = ["concordance_index", "concordance_summary"]

_BOOT_BLOCK = 256  # resamples per block, as metrics.bootstrap_ratio_ci draws them


def _dense_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, equal values sharing one (the Fenwick tree's positions)."""
    return np.unique(values, return_inverse=True)[1].reshape(-1) + 1


def _prefix(tree: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """(k, B) sums of the tree's columns over positions 1..idx[i]."""
    out = np.zeros((idx.size, tree.shape[1]))
    idx = idx.copy()
    live = idx > 0
    while live.any():
        out[live] += tree[idx[live]]
        idx[live] -= idx[live] & -idx[live]
        live = idx > 0
    return out


def _add(tree: np.ndarray, idx: np.ndarray, weights: np.ndarray) -> None:
    """Add each row of `weights` (k, B) at position idx[i]."""
    top = tree.shape[0] - 1
    while idx.size:
        np.add.at(tree, idx, weights)
        idx = idx + (idx & -idx)
        keep = idx <= top
        idx, weights = idx[keep], weights[keep]


def _pair_sums(true: np.ndarray, ranks: np.ndarray, exact: np.ndarray,
               weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column of `weights` (n, B): the weighted concordance (1, 1/2 for a tie in prediction)
    and the weighted count of comparable pairs. Rows go in by falling recorded length; each
    exact row, before its own length goes in, is paired with every row recorded longer."""
    tree = np.zeros((int(ranks.max()) + 1, weights.shape[1]))
    total = np.zeros(weights.shape[1])
    concordant = np.zeros(weights.shape[1])
    comparable = np.zeros(weights.shape[1])
    order = np.argsort(-true, kind="stable")
    ordered = true[order]
    bounds = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1], True])
    for start, stop in pairwise(bounds):
        rows = order[start:stop]
        short = rows[exact[rows]]
        if short.size and start > 0:
            at_most = _prefix(tree, ranks[short])
            below = _prefix(tree, ranks[short] - 1)
            w = weights[short]
            concordant += (w * (total - at_most + 0.5 * (at_most - below))).sum(axis=0)
            comparable += (w * total).sum(axis=0)
        _add(tree, ranks[rows], weights[rows])
        total += weights[rows].sum(axis=0)
    return concordant, comparable


def _inputs(true, pred, censored) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    pred = np.asarray(pred, dtype=np.float64).reshape(-1)
    if pred.shape != true.shape:
        raise ValueError(f"concordance: true has {true.size} rows but pred has {pred.size}")
    exact = np.ones(true.size, bool) if censored is None else \
        ~np.asarray(censored, dtype=bool).reshape(-1)
    if exact.shape != true.shape:
        raise ValueError(f"concordance: censored has {exact.size} flags for {true.size} rows")
    return true, pred, exact


def concordance_index(true, pred, censored=None) -> float | None:
    """Harrell's C of `pred` against `true` (``censored`` rows are lower bounds); None when no
    pair is comparable (fewer than two distinct recorded lengths with an exact shorter one)."""
    true, pred, exact = _inputs(true, pred, censored)
    if true.size < 2:
        return None
    num, den = _pair_sums(true, _dense_ranks(pred), exact, np.ones((true.size, 1)))
    return float(num[0] / den[0]) if den[0] > 0 else None


def concordance_summary(true, pred, groups, censored=None, n_boot: int = 1000, seed: int = 0,
                        ci: float = 0.95) -> dict[str, Any]:
    """Harrell's C (``value``), its bootstrap interval over prompts (``ci``: None without
    resamples or when none has a comparable pair) and ``n_pairs``, the comparable pairs."""
    true, pred, exact = _inputs(true, pred, censored)
    gid = np.unique(np.asarray(groups), return_inverse=True)[1].reshape(-1)
    if gid.shape != true.shape:
        raise ValueError(f"concordance: {gid.size} prompt ids for {true.size} rows")
    if true.size < 2:
        return {"value": None, "ci": None, "n_pairs": 0}
    ranks = _dense_ranks(pred)
    num, den = _pair_sums(true, ranks, exact, np.ones((true.size, 1)))
    value = float(num[0] / den[0]) if den[0] > 0 else None
    interval = None
    n_groups = int(gid.max()) + 1
    if value is not None and n_boot > 0:
        rng = np.random.default_rng(seed)
        reps = []
        for start in range(0, n_boot, _BOOT_BLOCK):
            block = min(start + _BOOT_BLOCK, n_boot) - start
            draws = rng.integers(0, n_groups, size=(block, n_groups))
            counts = np.stack([np.bincount(d, minlength=n_groups) for d in draws], axis=1)
            num_b, den_b = _pair_sums(true, ranks, exact, counts[gid].astype(np.float64))
            with np.errstate(invalid="ignore", divide="ignore"):
                reps.append(np.where(den_b > 0, num_b / den_b, np.nan))
        reps = np.concatenate(reps)
        reps = reps[np.isfinite(reps)]
        if reps.size:
            alpha = (1.0 - ci) / 2.0
            interval = [float(v) for v in np.quantile(reps, [alpha, 1.0 - alpha])]
    return {"value": value, "ci": interval, "n_pairs": int(den[0])}
