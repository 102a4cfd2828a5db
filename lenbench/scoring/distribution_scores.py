"""Per-row scores of predicted length distributions, exact for right-censored rows.

A row's true length ``L`` is either exact or, when the cap cut the answer off (``censored``), only
known from below: the true length is at least ``c``, the recorded length. Every row is scored;
none is left out. Predicted distributions are first clipped to ``[1, cap]`` as point predictions
are (mass below 1 moves to 1, mass above the cap to the cap: the top of the clipped distribution
stands for "the cap or beyond"), and each score is then one that the censored rows decide:

- **CRPS**, threshold-weighted over ``[1, T)``: ``∫_1^T (F(x) - 1{x >= L})² dx``, with ``T`` at
  most every censored row's cut-off (the cap, when every censored row was cut at it). A row
  censored at ``c >= T`` has ``1{x >= L} = 0`` on the whole range, so its score is known exactly,
  and the weighted CRPS is a proper score. Equivalently it is the plain CRPS of the distribution
  clipped to ``[1, T]`` against ``L`` clipped there. A histogram (uniform mass per bin) is scored
  exactly; quantiles through ``2 ∫_0^1 pinball_τ dτ`` by the midpoint rule on ``CRPS_GRID``
  cells of τ.
- **Pinball loss** at level q, ``q (L - Q) if L >= Q else (1 - q)(Q - L)`` with ``Q`` the clipped
  quantile. For a censored row it is a lower bound: ``q · max(c - Q, 0)``, which is the least the
  loss can be whatever the true length beyond ``c`` (the loss of the capped length when ``c`` is
  the cap); the upper bound is unbounded, so none is reported.
- **Interval coverage** of ``[lo, hi]`` (clipped quantiles, ends included). An exact row is
  covered or not. A censored row is certainly *not* covered when ``hi < c``; certainly covered
  when ``lo <= c`` and ``hi`` reaches the row's cap (the interval is open above: "at the cap or
  beyond"); undecidable otherwise (only possible when ``c`` is below the cap). ``coverage_*``
  counts the certain coverings (a lower bound) and ``coverage_*_high`` adds the undecidable rows
  (an upper bound); they agree when every censored row was cut at the cap. Clipping changes
  what a calibrated predictor covers: an interval that reaches the cap also holds the mass
  beyond it, and one that starts at 1 the mass below. ``coverage_*_nominal`` is that share,
  ``q_hi - q_lo`` with ``q_hi`` read as 1 where the interval reaches the cap and ``q_lo`` as 0
  where it starts at 1: calibration is coverage equal to it, not to the bare level.
- **PIT**: the mid-PIT ``(F(L - 1) + F(L)) / 2`` of the clipped CDF for an exact row; for a
  censored row a uniform draw over ``[F(c - 1), 1]``, where a calibrated predictor's PIT of the
  unseen true length lies. The draws are seeded (one per row, in row order), so a run reproduces
  them, and the result stores each row's value.
"""

from __future__ import annotations

import numpy as np

from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution

__all__ = ["CRPS_GRID", "INTERVALS", "clip_counts", "crps", "mass_at_cap", "pinball", "pit",
           "row_scores", "score_threshold"]

INTERVALS = {"50": (0.25, 0.75), "80": (0.1, 0.9)}  # name -> (lower level, upper level)
CRPS_GRID = 400  # cells of τ for the quantile-form CRPS
_CHUNK = 4096  # rows per block of the CRPS computation
_PIT_STREAM = 1729  # keeps the PIT draws apart from any other use of the run's seed


def _per_row(value, n: int, default: float) -> np.ndarray:
    """A scalar, None (`default`) or one value per row, as an (n,) float array."""
    if value is None:
        return np.full(n, default)
    return np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)).astype(np.float64)


def score_threshold(cap, true, censored, at_most: float | None = None) -> float | None:
    """The weighted CRPS's upper end ``T``: the cap, lowered to the smallest cut-off of a censored
    row when one lies below it (only then is every row's score known) and to `at_most` when given
    (a subset of rows scored as the full set is); None when there is none of these (the CRPS is
    then unweighted above 1)."""
    cens = np.asarray(censored, dtype=bool).reshape(-1)
    cuts = np.asarray(true, dtype=np.float64).reshape(-1)[cens]
    ends = [float(v) for v in (cap, at_most) if v is not None]
    ends += [float(cuts.min())] if cuts.size else []
    return min(ends) if ends else None


def pinball(dist: LengthDistribution, true, levels=QUANTILE_LEVELS, censored=None,
            cap=None) -> np.ndarray:
    """(n, len(levels)) pinball loss of each row's quantile (clipped to [1, cap]) at each level;
    a censored row's is the lower bound ``q · max(c - Q, 0)``."""
    levels = np.asarray(levels, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64).reshape(-1, 1)
    q = np.clip(dist.quantile(levels), 1.0, _per_row(cap, len(dist), np.inf)[:, None])
    diff = true - q
    loss = np.maximum(levels * diff, (levels - 1.0) * diff)
    if censored is not None:
        cens = np.asarray(censored, dtype=bool).reshape(-1)
        loss[cens] = levels * np.maximum(diff[cens], 0.0)
    return loss


def crps(dist: LengthDistribution, true, lo=None, hi=None) -> np.ndarray:
    """(n,) ``∫_lo^hi (F(x) - 1{x >= L})² dx`` per row (`lo`, `hi` scalars or per row; None:
    unbounded, the plain CRPS). Exact for histograms; see the module for quantiles."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    lo, hi = _per_row(lo, true.size, -np.inf), _per_row(hi, true.size, np.inf)
    cells = (np.arange(CRPS_GRID) + 0.5) / CRPS_GRID
    out = np.empty(true.size)
    for start in range(0, true.size, _CHUNK):  # blocks of rows: bounded memory
        rows = np.arange(start, min(start + _CHUNK, true.size))
        part, a, b = dist.take(rows), lo[rows, None], hi[rows, None]
        y = np.clip(true[rows], lo[rows], hi[rows])
        if dist.is_histogram:
            out[rows] = _histogram_crps(part, y, a, b)
        else:  # the clipped distribution's quantile function is the clipped one
            q = np.clip(part.quantile(cells), a, b)
            diff = y[:, None] - q
            out[rows] = 2.0 * np.maximum(cells * diff, (cells - 1.0) * diff).mean(axis=1)
    return out


def _sq_integral(a: np.ndarray, b: np.ndarray, width: np.ndarray) -> np.ndarray:
    """∫ u² over an interval of `width` where u runs linearly from a to b."""
    return width * (a * a + a * b + b * b) / 3.0


def _histogram_crps(dist: LengthDistribution, y: np.ndarray, lo: np.ndarray,
                    hi: np.ndarray) -> np.ndarray:
    """Exact ∫_lo^hi (F - 1{x >= y})² of a piecewise-linear CDF (uniform mass per bin), y within
    [lo, hi]: each bin, cut to the window, is split at y; the part below integrates F², the part
    above (F - 1)²; outside the edges F is 0 or 1."""
    e = dist.edges
    cum = np.concatenate([np.zeros((len(dist), 1)), np.cumsum(dist.probs, axis=1)], axis=1)
    cum[:, -1] = 1.0
    a, b = e[None, :-1], e[None, 1:]
    c0, c1 = cum[:, :-1], cum[:, 1:]
    s, t = np.clip(a, lo, hi), np.clip(b, lo, hi)  # the bin's part inside the window
    yy = y[:, None]
    cut = np.clip(yy, s, t)  # where y splits it (an end when y lies outside it)

    def at(x):
        return c0 + (c1 - c0) * (x - a) / (b - a)

    fs, fy, ft = at(s), at(cut), at(t)
    inside = _sq_integral(fs, fy, cut - s) + _sq_integral(fy - 1.0, ft - 1.0, t - cut)
    lo, hi = lo[:, 0], hi[:, 0]
    below = np.maximum(np.minimum(hi, e[0]) - np.maximum(lo, y), 0.0)  # F = 0 against 1
    above = np.maximum(np.minimum(hi, y) - np.maximum(lo, e[-1]), 0.0)  # F = 1 against 0
    return inside.sum(axis=1) + below + above


def _clipped_cdf(dist: LengthDistribution, x: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """P(clip(L, 1, cap) <= x) per row."""
    return np.where(x < 1.0, 0.0, np.where(x >= cap, 1.0, dist.cdf(x)))


def pit(dist: LengthDistribution, true, censored=None, cap=None, seed: int = 0) -> np.ndarray:
    """(n,) PIT of each row under its distribution clipped to [1, cap]: the mid-PIT
    (F(L - 1) + F(L)) / 2 of an exact length, a seeded uniform draw over [F(c - 1), 1] for a
    length censored at c."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    cap = _per_row(cap, true.size, np.inf)
    below = _clipped_cdf(dist, true - 1.0, cap)
    out = 0.5 * (below + _clipped_cdf(dist, true, cap))
    if censored is not None:
        cens = np.asarray(censored, dtype=bool).reshape(-1)
        u = np.random.default_rng((int(seed), _PIT_STREAM)).random(true.size)  # one per row
        out[cens] = below[cens] + u[cens] * (1.0 - below[cens])
    return out


def clip_counts(dist: LengthDistribution, cap=None) -> dict[str, np.ndarray]:
    """Per row: whether the distribution put mass below 1 (``low``) or above the cap (``high``),
    and how much mass clipping to [1, cap] moved (``mass``)."""
    n = len(dist)
    low = dist.cdf(np.nextafter(1.0, 0.0))
    cap = _per_row(cap, n, np.inf)
    high = np.where(np.isfinite(cap), 1.0 - dist.cdf(np.where(np.isfinite(cap), cap, 0.0)), 0.0)
    return {"low": low > 1e-12, "high": high > 1e-12, "mass": low + high}


def mass_at_cap(dist: LengthDistribution, cap) -> np.ndarray | None:
    """(n,) P(L >= cap) per row: the mass that clipping to [1, cap] puts at the cap, the
    predicted chance that the answer runs into it (a quantile at the cap counts, through the
    CDF just below it); None without a cap."""
    if cap is None:
        return None
    below = np.nextafter(_per_row(cap, len(dist), np.inf), 0.0)
    return np.clip(1.0 - dist.cdf(below), 0.0, 1.0)


def row_scores(dist: LengthDistribution, true, censored=None, cap=None, threshold=None,
               seed: int = 0) -> dict[str, np.ndarray]:
    """Per-row scores, each row against its (possibly censored) length with the distribution
    clipped to [1, cap] (`cap`, `threshold`: scalars or one per row, None for none):
    ``pinball`` (n, Q) at QUANTILE_LEVELS and ``pinball_mean`` (lower bounds on censored rows),
    ``crps`` (weighted over [1, threshold)), ``pit``, and per interval ``coverage_50`` (certainly
    covered), ``coverage_50_high`` (covered or undecidable), ``coverage_50_nominal`` (what a
    calibrated predictor covers of the clipped interval) and ``width_50``, likewise for 80."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    cens = np.zeros(true.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    if cens.shape != true.shape:
        raise ValueError(f"row_scores: censored has {cens.size} flags for {true.size} rows")
    cap_row = _per_row(cap, true.size, np.inf)
    top = np.minimum(cap_row, _per_row(threshold, true.size, np.inf))
    loss = pinball(dist, true, censored=cens, cap=cap_row)
    out = {"pinball": loss, "pinball_mean": loss.mean(axis=1),
           "crps": crps(dist, true, 1.0, top),
           "pit": pit(dist, true, cens, cap_row, seed)}
    for name, (lo_level, hi_level) in INTERVALS.items():
        q = np.clip(dist.quantile([lo_level, hi_level]), 1.0, cap_row[:, None])
        lo, hi = q[:, 0], q[:, 1]
        inside = (lo <= true) & (true <= hi)
        certain = np.where(cens, (lo <= true) & (hi >= cap_row), inside)
        possible = np.where(cens, hi >= true, inside)
        out[f"coverage_{name}"] = certain.astype(np.float64)
        out[f"coverage_{name}_high"] = possible.astype(np.float64)
        out[f"coverage_{name}_nominal"] = np.where(hi >= cap_row, 1.0, hi_level) - \
            np.where(lo <= 1.0, 0.0, lo_level)
        out[f"width_{name}"] = hi - lo
    return out
