"""Predicted length distributions: the one type a distributional predictor returns.

A point estimate hides that one prompt has many possible lengths. A predictor that knows the
spread returns a `LengthDistribution` per row, in whichever form it computes naturally: quantiles
at chosen levels (quantile heads, conformal intervals) or a histogram over length bins (bin
classifiers, soft-label heads). Metrics read both forms through `quantile` and `cdf`, so neither
form is converted by hand in a predictor.

Within a histogram bin the mass is spread uniformly; between two known quantile levels the
quantile function is linear, and beyond the outermost levels there is no mass: the tails below the
lowest and above the highest level sit at those quantiles' values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The levels every distributional predictor is scored at (pinball loss, the 50% and 80% intervals).
QUANTILE_LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)


@dataclass(frozen=True)
class LengthDistribution:
    """Per-row distributions of a length: quantiles (`levels`, `values`) or a histogram
    (`edges`, `probs`). Build with `from_quantiles` or `from_histogram`, which check shapes."""

    levels: np.ndarray | None = None   # (Q,) strictly increasing, in (0, 1)
    values: np.ndarray | None = None   # (n, Q) non-decreasing along each row
    edges: np.ndarray | None = None    # (B + 1,) strictly increasing bin edges
    probs: np.ndarray | None = None    # (n, B) non-negative, rows sum to 1

    @classmethod
    def from_quantiles(cls, levels, values) -> LengthDistribution:
        levels = np.asarray(levels, dtype=np.float64).reshape(-1)
        values = np.asarray(values, dtype=np.float64)
        if values.ndim != 2 or values.shape[1] != levels.size:
            raise ValueError(f"quantile values must be (n, {levels.size}), got {values.shape}")
        if levels.size == 0 or np.any(np.diff(levels) <= 0) or levels[0] <= 0 or levels[-1] >= 1:
            raise ValueError(f"quantile levels must increase strictly within (0, 1): {levels}")
        if not np.isfinite(values).all():
            raise ValueError("quantile values must be finite")
        # crossing quantiles (independent heads) are sorted, the usual repair
        return cls(levels=levels, values=np.sort(values, axis=1))

    @classmethod
    def from_histogram(cls, edges, probs) -> LengthDistribution:
        edges = np.asarray(edges, dtype=np.float64).reshape(-1)
        probs = np.asarray(probs, dtype=np.float64)
        if probs.ndim != 2 or probs.shape[1] != edges.size - 1:
            raise ValueError(f"histogram probs must be (n, {edges.size - 1}), got {probs.shape}")
        if edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError("histogram edges must increase strictly")
        if not np.isfinite(probs).all() or (probs < 0).any():
            raise ValueError("histogram probabilities must be finite and non-negative")
        total = probs.sum(axis=1, keepdims=True)
        if (total <= 0).any():
            raise ValueError("every histogram row needs positive mass")
        return cls(edges=edges, probs=probs / total)

    @property
    def is_histogram(self) -> bool:
        return self.probs is not None

    def __len__(self) -> int:
        return int((self.probs if self.is_histogram else self.values).shape[0])

    def take(self, rows) -> LengthDistribution:
        """The distributions of `rows` (an index array or boolean mask)."""
        if self.is_histogram:
            return LengthDistribution(edges=self.edges, probs=self.probs[rows])
        return LengthDistribution(levels=self.levels, values=self.values[rows])

    def shift(self, offset) -> LengthDistribution:
        """Every row moved by `offset` tokens (a scalar or one per row): a remaining-length
        distribution plus the tokens generated so far is a total-length distribution."""
        offset = np.asarray(offset, dtype=np.float64).reshape(-1)
        if self.is_histogram:
            if np.ptp(offset) > 0:
                raise ValueError("a histogram shares its edges across rows: shift by a scalar")
            return LengthDistribution(edges=self.edges + offset[0], probs=self.probs)
        return LengthDistribution(levels=self.levels, values=self.values + offset[:, None])

    def quantile(self, levels) -> np.ndarray:
        """(n, len(levels)) quantiles at `levels` in [0, 1]."""
        levels = np.clip(np.asarray(levels, dtype=np.float64).reshape(-1), 0.0, 1.0)
        if self.is_histogram:
            cum = np.concatenate([np.zeros((len(self), 1)), np.cumsum(self.probs, axis=1)], 1)
            cum[:, -1] = 1.0
            return np.stack([_interp_rows(np.full(len(self), q), cum, self.edges)
                             for q in levels], axis=1)
        return np.stack([np.interp(levels, self.levels, row) for row in self.values])

    def cdf(self, x) -> np.ndarray:
        """(n,) P(L <= x_i) for each row's own x_i (a scalar x is shared)."""
        x = np.broadcast_to(np.asarray(x, dtype=np.float64), (len(self),))
        if self.is_histogram:
            cum = np.concatenate([np.zeros((len(self), 1)), np.cumsum(self.probs, axis=1)], 1)
            cum[:, -1] = 1.0
            return np.array([np.interp(xi, self.edges, c) for xi, c in zip(x, cum)])
        out = np.empty(len(self))
        for i, (xi, row) in enumerate(zip(x, self.values)):
            if xi < row[0]:
                out[i] = 0.0
            elif xi >= row[-1]:
                out[i] = 1.0
            else:  # tied values: the CDF there is the highest of their levels
                out[i] = np.interp(xi, *_strict(row, self.levels))
        return out

    def mean(self) -> np.ndarray:
        """(n,) expected length (bin midpoints; the quantile function's trapezoid integral)."""
        if self.is_histogram:
            return self.probs @ (0.5 * (self.edges[1:] + self.edges[:-1]))
        grid = np.linspace(0.0, 1.0, 201)
        return self.quantile(grid).mean(axis=1)


def _interp_rows(q: np.ndarray, cum: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per row, the x where the piecewise-linear CDF `cum` (over `edges`) first reaches q."""
    out = np.empty(cum.shape[0])
    for i, (qi, c) in enumerate(zip(q, cum)):
        j = int(np.searchsorted(c, qi, side="left"))
        if j == 0:
            out[i] = edges[0]
            continue
        j = min(j, len(c) - 1)
        lo, hi = c[j - 1], c[j]
        frac = 0.0 if hi <= lo else (qi - lo) / (hi - lo)
        out[i] = edges[j - 1] + frac * (edges[j] - edges[j - 1])
    return out


def _strict(values: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop repeated values (keeping the highest level at each) so np.interp sees increasing x."""
    keep = np.append(np.diff(values) > 0, True)
    return values[keep], levels[keep]
