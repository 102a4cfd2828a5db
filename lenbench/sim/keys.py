"""Queue keys that depend on a predictor's ranking, not on its units.

An ordering policy (SJF, with or without aging) admits the smallest key first. If the key were
the predicted length in tokens, the aging term (a rate per second of waiting) would weigh
differently against a predictor whose outputs are three times larger, although its ranking, and
so pure SJF, is the same. So every ordering row (each predictor, the oracle, the constant and
the distributional row) is keyed by the same rule: a prediction becomes its mid-rank quantile
among that row's predictions on the scored rows,

    key(x) = (#{values < x} + #{values == x} / 2) / n,  in (0, 1),

which is unchanged by any strictly increasing map of the predictions (scaling included), keeps
ties tied (a constant predictor's keys are all 1/2, so its SJF order stays FCFS order), and gives
every row the same key distribution, so that one aging weight, in quantiles per second, means the
same for everyone. Policies that need remaining tokens (preemptive srpt: predicted total minus the
tokens generated) keep token units; their aging weight is converted with `tokens_per_quantile`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


def rank_keys(values: ArrayLike) -> NDArray[np.float64]:
    """Each value's mid-rank quantile among `values` (1-D, finite), in (0, 1)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("values must be a non-empty 1-D array")
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    ordered = np.sort(x)
    below = np.searchsorted(ordered, x, side="left")
    at_or_below = np.searchsorted(ordered, x, side="right")
    return (below + at_or_below) / (2.0 * x.size)


def tokens_per_quantile(lengths: ArrayLike) -> float:
    """Tokens that one unit of quantile spans in the middle of a length distribution: the
    inverse of the mean density between its 10th and 90th percentiles, (q90 - q10) / 0.8, and
    at least 1. It turns an aging weight in quantiles per second into tokens per second."""
    x = np.asarray(lengths, dtype=np.float64)
    if x.size == 0:
        raise ValueError("lengths must not be empty")
    q10, q90 = np.percentile(x, [10, 90])
    return max(float(q90 - q10) / 0.8, 1.0)
