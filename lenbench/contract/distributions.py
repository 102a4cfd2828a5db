"""Predicted length distributions: the one type a distributional predictor returns.

A point estimate hides that one prompt has many possible lengths. A predictor that knows the
spread returns a `LengthDistribution` per row, in whichever form it computes naturally: quantiles
at chosen levels (quantile heads, conformal intervals) or a histogram over length bins (bin
classifiers, soft-label heads). Metrics read both forms through `quantile` and `cdf`, so neither
form is converted by hand in a predictor.

Within a histogram bin the mass is spread uniformly; between two known quantile levels the
quantile function is linear, and beyond the outermost levels there is no mass: the tails below the
lowest and above the highest level sit at those quantiles' values.

A histogram over [0, max_length] cannot say "the cap or beyond" with bins alone: mass spread over
the last bin lies below its upper edge, so an answer the cap cut is never inside its upper
quantiles. `from_histogram(..., tail=)` takes that mass apart, as a one-token bin at the top:
clipped to a cap at the last edge, it sits at the cap.
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
    def from_histogram(cls, edges, probs, tail=None) -> LengthDistribution:
        """`probs` (n, B) over the B bins of `edges`; `tail` (n,), when given, each row's mass at
        or beyond the last edge (e.g. a class of answers that ran into the cap), added as a
        one-token bin [edges[-1], edges[-1] + 1)."""
        edges = np.asarray(edges, dtype=np.float64).reshape(-1)
        probs = np.asarray(probs, dtype=np.float64)
        if tail is not None:
            tail = np.asarray(tail, dtype=np.float64).reshape(-1, 1)
            if probs.ndim != 2 or tail.shape[0] != probs.shape[0]:
                raise ValueError(f"histogram tail must be one value per row ({probs.shape[0]}), "
                                 f"got {tail.shape[0]}")
            edges, probs = np.r_[edges, edges[-1] + 1.0], np.concatenate([probs, tail], axis=1)
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
            cum = self._cum()
            return np.stack([_first_reaching(cum, self.edges, q) for q in levels], axis=1) \
                if levels.size else np.zeros((len(self), 0))
        # levels shared by every row: each wanted level is one blend of two columns
        j = np.clip(np.searchsorted(self.levels, levels, side="right") - 1, 0,
                    max(self.levels.size - 2, 0))
        if self.levels.size == 1:
            return np.repeat(self.values, levels.size, axis=1)
        lo, hi = self.levels[j], self.levels[j + 1]
        frac = np.clip((levels - lo) / (hi - lo), 0.0, 1.0)
        return self.values[:, j] + frac * (self.values[:, j + 1] - self.values[:, j])

    def cdf(self, x) -> np.ndarray:
        """(n,) P(L <= x_i) for each row's own x_i (a scalar x is shared)."""
        x = np.broadcast_to(np.asarray(x, dtype=np.float64), (len(self),))
        rows = np.arange(len(self))
        if self.is_histogram:
            cum, e = self._cum(), self.edges
            j = np.clip(np.searchsorted(e, x, side="right") - 1, 0, e.size - 2)
            frac = np.clip((x - e[j]) / (e[j + 1] - e[j]), 0.0, 1.0)
            return cum[rows, j] + frac * (cum[rows, j + 1] - cum[rows, j])
        # j values lie at or below x; tied values: the CDF there is the highest of their levels
        v, lv = self.values, self.levels
        j = (v <= x[:, None]).sum(axis=1)
        inside = (j > 0) & (j < lv.size)
        out = np.where(j == 0, 0.0, 1.0)
        k = j[inside] - 1
        r = rows[inside]
        lo, hi = v[r, k], v[r, k + 1]
        out[inside] = lv[k] + (lv[k + 1] - lv[k]) * (x[inside] - lo) / (hi - lo)
        return out

    def _cum(self) -> np.ndarray:
        """(n, B + 1) CDF at the edges; the last column exactly 1 despite rounding."""
        cum = np.concatenate([np.zeros((len(self), 1)), np.cumsum(self.probs, axis=1)], 1)
        cum[:, -1] = 1.0
        return cum

    def mean(self) -> np.ndarray:
        """(n,) expected length (bin midpoints; the quantile function's trapezoid integral)."""
        if self.is_histogram:
            return self.probs @ (0.5 * (self.edges[1:] + self.edges[:-1]))
        grid = np.linspace(0.0, 1.0, 201)
        return np.trapezoid(self.quantile(grid), grid, axis=1)


def _first_reaching(cum: np.ndarray, edges: np.ndarray, q: float) -> np.ndarray:
    """Per row, the x where the piecewise-linear CDF `cum` (over `edges`) first reaches q."""
    j = (cum < q).sum(axis=1)  # the first edge index whose CDF is >= q
    out = np.full(cum.shape[0], edges[0])
    inner = j > 0
    j = np.minimum(j[inner], cum.shape[1] - 1)
    lo, hi = cum[inner, j - 1], cum[inner, j]
    frac = np.where(hi > lo, (q - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0)
    out[inner] = edges[j - 1] + frac * (edges[j] - edges[j - 1])
    return out
