"""What a right-censored row lets a point metric claim, beyond its error (``metrics.
censored_error``): whether a prediction is within a band of the true length, and whether the
answer ran into the cap.

A row cut at ``c`` has a true length L >= c and nothing more is known, so a metric counts it
only where every such L gives the same answer.
"""

from __future__ import annotations

import numpy as np

__all__ = ["confirmed_within", "reached_cap"]


def confirmed_within(pred, true, censored, band: float = 0.25) -> tuple[np.ndarray, np.ndarray]:
    """(within, decided) per row for "|pred - L| <= band * L". An exact row is decided. A row
    cut at ``c`` is within only for L in [pred / (1 + band), pred / (1 - band)], a bounded
    range, so the data never confirm a hit; they confirm a miss when that range ends below c
    (pred < (1 - band) c). The other censored rows are undecided: a share leaves them out.

    >>> confirmed_within(np.array([10., 90., 70.]), np.array([10., 100., 100.]),
    ...                  np.array([False, True, True]))
    (array([ True, False, False]), array([ True, False,  True]))
    """
    pred = np.asarray(pred, dtype=np.float64).reshape(-1)
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    censored = np.asarray(censored, dtype=bool).reshape(-1)
    within = ~censored & (np.abs(pred - true) <= band * true)
    decided = ~censored | (pred < (1.0 - band) * true)
    return within, decided


def reached_cap(true, censored=None, cap: float | None = None) -> np.ndarray:
    """Whether each answer ran into the length cap: cut there (censored), or as long as it."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    out = np.zeros(true.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1).copy()
    if cap is not None:
        out |= true >= float(cap)
    return out
