"""Reference predictors that bound what any real predictor can do for scheduling.

Each takes the true lengths and returns predicted lengths as float64, so a real predictor's
test-set output and these bounds are interchangeable inputs to the simulator.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

# Salts keep these streams apart from a caller's generator built from the same integer seed
# (e.g. lengths drawn with default_rng(1) and noise with seed=1 would otherwise be correlated).
_NOISE_SALT = 0x6E6F697379
_PERM_SALT = 0x7065726D


def _rng(seed: int, salt: int) -> np.random.Generator:
    return np.random.default_rng([seed, salt])


def _true(true_len: ArrayLike) -> NDArray[np.float64]:
    arr = np.asarray(true_len, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError("true_len must be 1-D")
    return arr


def oracle(true_len: ArrayLike) -> NDArray[np.float64]:
    """Perfect predictions: the upper bound on scheduling gain."""
    return _true(true_len).copy()


def noisy_oracle(true_len: ArrayLike, sigma: float, seed: int = 0) -> NDArray[np.float64]:
    """true * exp(N(0, sigma)): multiplicative noise; sweeping sigma traces P99 against
    ranking quality (sigma = 0 is the oracle)."""
    if sigma < 0:
        raise ValueError("sigma must be >= 0")
    true = _true(true_len)
    return true * np.exp(_rng(seed, _NOISE_SALT).normal(0.0, sigma, size=true.shape))


def constant(true_len: ArrayLike, value: float | None = None) -> NDArray[np.float64]:
    """The same prediction for everyone (default: the mean true length), the no-information
    lower bound. SJF then admits in FCFS order exactly (ties break by arrival)."""
    true = _true(true_len)
    fill = float(true.mean()) if value is None else float(value)
    return np.full(true.shape, fill)


def random_permutation(true_len: ArrayLike, seed: int = 0) -> NDArray[np.float64]:
    """The true lengths shuffled: the right marginal distribution with no ranking information
    (Kendall tau about 0), which measures the harm of confident mis-ranking."""
    true = _true(true_len)
    return _rng(seed, _PERM_SALT).permutation(true)


def one_bit(true_len: ArrayLike, threshold: float) -> NDArray[np.float64]:
    """Short/long advice only: each request gets the mean true length of its side of
    `threshold` (queues with one bit of advice)."""
    true = _true(true_len)
    long_ = true >= threshold
    out = np.empty_like(true)
    for mask in (long_, ~long_):
        if mask.any():
            out[mask] = true[mask].mean()
    return out
