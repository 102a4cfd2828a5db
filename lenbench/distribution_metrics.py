"""Scores of predicted length distributions: pinball loss, interval coverage and width, CRPS, PIT.

A point estimate's MAE says nothing about whether a predictor knows how uncertain it is; these
scores do. Every one is computed per row first (``row_scores``), then averaged, with a bootstrap
interval over *prompts* (``metrics.bootstrap_ratio_ci``, as for the MAE), so rows of one prompt are
resampled together.

- **Pinball loss** at level q: ``q (L - Q(q))`` when ``L >= Q(q)``, else ``(1 - q)(Q(q) - L)``;
  reported per level of ``QUANTILE_LEVELS`` and as their mean.
- **Central intervals**: the 50% interval is [Q(0.25), Q(0.75)], the 80% one [Q(0.1), Q(0.9)];
  coverage is the share of rows with ``Q(lo) <= L <= Q(hi)`` (ends included, lengths are integers)
  and width the mean of ``Q(hi) - Q(lo)``.
- **CRPS** ``∫ (F(x) - 1{x >= L})² dx``, in tokens (a point mass at x scores |x - L|). A histogram
  (uniform mass in each bin) is scored exactly, segment by segment. Quantile form is scored through
  its quantile function, CRPS = 2 ∫_0^1 pinball_τ(L, Q(τ)) dτ, by the midpoint rule on
  ``CRPS_GRID`` equal cells of τ; the quantile function is piecewise linear, so the only error is
  in the cells where Q crosses L (well under 0.1% of the value).
- **PIT**: the mid-PIT ``(F(L - 1) + F(L)) / 2``, which treats the integer length L as the bin
  (L - 1, L] of the predicted distribution and needs no random draw, so every number recomputes
  from the result file. A calibrated predictor's PIT values are uniform on [0, 1] (for lengths
  spread over many tokens); the histogram uses ``PIT_BINS`` equal bins.

**Censored rows are excluded**, not scored: a right-censored length is only a lower bound, and a
coverage or PIT value against it would be a guess. ``n_censored_excluded`` counts them; because they
are the longest answers, the scored rows lean short (the run header says how many went).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenbench.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.metrics import _group_ids, _request_means, _rows_by_group, bootstrap_ratio_ci
from lenbench.noise_floor import siblings_of_each

__all__ = ["CRPS_GRID", "INTERVALS", "PIT_BINS", "crps", "distribution_metrics",
           "dynamic_distribution_metrics", "pinball", "pit", "pit_histogram", "row_scores",
           "sibling_distributions"]

INTERVALS = {"50": (0.25, 0.75), "80": (0.1, 0.9)}  # name -> (lower level, upper level)
CRPS_GRID = 400  # cells of τ for the quantile-form CRPS
PIT_BINS = 10
_CHUNK = 4096  # rows per block of the CRPS computation
# the reference's quantile grid: fine enough that its piecewise-linear form follows the
# siblings' step CDF to within 1/200 of probability
SIBLING_LEVELS = tuple(np.arange(1, 200) / 200)


def pinball(dist: LengthDistribution, true, levels=QUANTILE_LEVELS) -> np.ndarray:
    """(n, len(levels)) pinball loss of each row's quantile at each level."""
    levels = np.asarray(levels, dtype=np.float64)
    diff = np.asarray(true, dtype=np.float64).reshape(-1, 1) - dist.quantile(levels)
    return np.maximum(levels * diff, (levels - 1.0) * diff)


def crps(dist: LengthDistribution, true) -> np.ndarray:
    """(n,) CRPS of each row against its true length (exact for histograms; see the module)."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    cells = (np.arange(CRPS_GRID) + 0.5) / CRPS_GRID
    out = np.empty(true.size)
    for start in range(0, true.size, _CHUNK):  # blocks of rows: bounded memory
        rows = np.arange(start, min(start + _CHUNK, true.size))
        part = dist.take(rows)
        out[rows] = _histogram_crps(part, true[rows]) if dist.is_histogram else \
            2.0 * pinball(part, true[rows], cells).mean(axis=1)
    return out


def _sq_integral(a: np.ndarray, b: np.ndarray, width: np.ndarray) -> np.ndarray:
    """∫ u² over an interval of `width` where u runs linearly from a to b."""
    return width * (a * a + a * b + b * b) / 3.0


def _histogram_crps(dist: LengthDistribution, true: np.ndarray) -> np.ndarray:
    """Exact CRPS of a piecewise-linear CDF (uniform mass per bin): each bin is split at L, the
    part below integrates F², the part above (F - 1)²; outside the edges F is 0 or 1."""
    e = dist.edges
    cum = np.concatenate([np.zeros((len(dist), 1)), np.cumsum(dist.probs, axis=1)], axis=1)
    cum[:, -1] = 1.0
    y = true[:, None]
    a, b = e[None, :-1], e[None, 1:]
    c0, c1 = cum[:, :-1], cum[:, 1:]
    cut = np.clip(y, a, b)  # where L splits the bin (an end when L lies outside it)
    cy = c0 + (c1 - c0) * (cut - a) / (b - a)
    below = _sq_integral(c0, cy, cut - a)
    above = _sq_integral(cy - 1.0, c1 - 1.0, b - cut)
    tails = np.maximum(e[0] - true, 0.0) + np.maximum(true - e[-1], 0.0)
    return (below + above).sum(axis=1) + tails


def pit(dist: LengthDistribution, true) -> np.ndarray:
    """(n,) mid-PIT (F(L - 1) + F(L)) / 2 of each row's integer length L."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    return 0.5 * (dist.cdf(true - 1.0) + dist.cdf(true))


def pit_histogram(values, n_bins: int = PIT_BINS) -> list[float]:
    """Share of PIT values in each of `n_bins` equal bins of [0, 1] (1 falls in the last bin)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        return [0.0] * n_bins
    idx = np.minimum((values * n_bins).astype(np.int64), n_bins - 1)
    return (np.bincount(idx, minlength=n_bins) / values.size).tolist()


def row_scores(dist: LengthDistribution, true) -> dict[str, np.ndarray]:
    """Per-row scores: ``pinball`` (n, Q) at QUANTILE_LEVELS, ``pinball_mean``, ``crps``,
    ``pit``, and ``coverage_50``/``width_50``, ``coverage_80``/``width_80``."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    loss = pinball(dist, true)
    out = {"pinball": loss, "pinball_mean": loss.mean(axis=1), "crps": crps(dist, true),
           "pit": pit(dist, true)}
    for name, (lo, hi) in INTERVALS.items():
        q = dist.quantile([lo, hi])
        out[f"coverage_{name}"] = ((q[:, 0] <= true) & (true <= q[:, 1])).astype(np.float64)
        out[f"width_{name}"] = q[:, 1] - q[:, 0]
    return out


_MEANS = ("pinball_mean", "crps", "coverage_50", "width_50", "coverage_80", "width_80")


def _summary(scores: dict[str, np.ndarray], gid: np.ndarray, n_boot: int, seed: int,
             ci: float) -> dict[str, Any]:
    """Means of the per-unit scores with prompt-bootstrap intervals (one seed for all, so every
    metric sees the same resamples)."""
    counts = np.bincount(gid).astype(np.float64)
    present = counts > 0
    out: dict[str, Any] = {"levels": list(QUANTILE_LEVELS),
                           "pinball": scores["pinball"].mean(axis=0).tolist()}
    for key in _MEANS:
        out[key] = float(scores[key].mean())
        out[f"{key}_ci"] = bootstrap_ratio_ci(np.bincount(gid, weights=scores[key])[present],
                                              counts[present], n_boot, seed, ci)
    out["pit_histogram"] = pit_histogram(scores["pit"])
    return out


def _check(dist: Any, n: int, what: str) -> None:
    if not isinstance(dist, LengthDistribution):
        raise TypeError(f"{what} must be a LengthDistribution, got {type(dist).__name__}")
    if len(dist) != n:
        raise ValueError(f"{what} has {len(dist)} rows for {n} scored rows")


def distribution_metrics(dist: LengthDistribution, true, groups, censored=None,
                         n_boot: int = 1000, seed: int = 0, ci: float = 0.95
                         ) -> dict[str, Any] | None:
    """Static distribution scores over the uncensored rows (censored ones are counted in
    ``n_censored_excluded``), each mean with a bootstrap interval over prompts; None when every
    row is censored."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    _check(dist, true.size, "distribution_metrics: the distribution")
    gid = _group_ids(groups, true.size, "distribution_metrics")
    cens = np.zeros(true.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    keep = ~cens
    if not keep.any():  # every row censored: nothing to score (the point metrics still are)
        return None
    scores = row_scores(dist.take(keep), true[keep])
    gid = np.unique(gid[keep], return_inverse=True)[1].reshape(-1)
    return {"n": int(keep.sum()), "n_prompts": int(gid.max() + 1),
            "n_censored_excluded": int(cens.sum()), **_summary(scores, gid, n_boot, seed, ci)}


def dynamic_distribution_metrics(step_row, step_t, lengths, dist: LengthDistribution, groups,
                                 censored=None, n_boot: int = 1000, seed: int = 0,
                                 ci: float = 0.95) -> dict[str, Any] | None:
    """Remaining-length distribution scores: at step t the truth is L - t; each score is averaged
    over a request's steps first, then over requests (as the dynamic MAE is), with a bootstrap
    interval over prompts. Steps of censored rows are excluded and counted; None when no step
    is left."""
    step_row = np.asarray(step_row).reshape(-1).astype(np.int64)
    step_t = np.asarray(step_t).reshape(-1).astype(np.int64)
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    _check(dist, step_row.size, "dynamic_distribution_metrics: the distribution")
    gid = _group_ids(groups, lengths.size, "dynamic_distribution_metrics")
    cens = np.zeros(lengths.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    keep = ~cens[step_row]
    if not keep.any():  # no uncensored step: nothing to score
        return None
    rows = step_row[keep]
    steps = row_scores(dist.take(keep), lengths[rows] - step_t[keep])
    per_request = {k: np.stack([_request_means(rows, col, lengths.size)
                                for col in v.T], axis=1) if v.ndim == 2
                   else _request_means(rows, v, lengths.size) for k, v in steps.items()
                   if k != "pit"}
    scored = np.isfinite(per_request["crps"])
    per_request = {k: v[scored] for k, v in per_request.items()}
    per_request["pit"] = steps["pit"]  # the PIT histogram pools steps: one value per forecast
    r_gid = np.unique(gid[scored], return_inverse=True)[1].reshape(-1)
    return {"n_steps": int(keep.sum()), "n_requests": int(scored.sum()),
            "n_prompts": int(r_gid.max() + 1),
            "n_censored_excluded": int((~keep).sum()),
            **_summary(per_request, r_gid, n_boot, seed, ci)}


def sibling_distributions(lengths, groups) -> tuple[LengthDistribution | None, np.ndarray]:
    """The distributional noise-floor reference: each row's distribution is the empirical
    distribution of the *other* samples of its prompt (leave-one-out), as quantiles on the dense
    ``SIBLING_LEVELS`` grid (inverted-CDF sample quantiles, so it follows their step CDF).

    Returns the distributions of the rows whose prompt has at least two samples and the boolean
    mask of those rows (None when there is none). With m siblings it is too narrow and coarse:
    one sibling is a point mass; its expected CRPS exceeds that of the prompt's true distribution
    by E|X - X'| / (2m), so it is a pessimistic reference, as the leave-one-out floor is.
    """
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    gid = _group_ids(groups, lengths.size, "sibling_distributions")
    levels = np.asarray(SIBLING_LEVELS)
    values = np.full((lengths.size, levels.size), np.nan)
    for rows in _rows_by_group(gid):
        k = rows.size
        if k < 2:
            continue
        values[rows] = np.quantile(siblings_of_each(lengths[rows]), levels, axis=1,
                                   method="inverted_cdf").T
    keep = np.isfinite(values[:, 0])
    if not keep.any():
        return None, keep
    return LengthDistribution.from_quantiles(levels, values[keep]), keep
