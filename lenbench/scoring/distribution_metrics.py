"""Summaries of predicted length distributions: means of the per-row scores with bootstrap
intervals, static and dynamic, and the sibling reference.

The per-row scores (pinball loss, interval coverage and width, threshold-weighted CRPS, PIT) are
defined in ``lenbench.scoring.distribution_scores``; every row is scored, right-censored ones
included, with each predicted distribution clipped to ``[1, cap]`` as point predictions are.
Each score is averaged over rows, with a bootstrap interval over *prompts*
(``metrics.bootstrap_ratio_ci``, as for the MAE), so rows of one prompt are resampled together;
the PIT values are pooled into a histogram of ``PIT_BINS`` equal bins.

Besides the means, a summary says what it covers and how censoring was handled: ``n`` rows (or
steps and requests), ``n_censored`` of them censored, ``threshold`` (the upper end T of the
weighted CRPS, null when unweighted), and what clipping moved: ``n_clipped_low`` and
``n_clipped_high`` (rows whose distribution put mass below 1 or above the cap) and
``clipped_mass`` (the mean probability mass moved). ``coverage_50`` / ``coverage_80`` are the
shares certainly covered, ``coverage_50_high`` / ``coverage_80_high`` add the undecidable
censored rows, and ``coverage_50_nominal`` / ``coverage_80_nominal`` are what a calibrated
predictor covers of its clipped intervals; ``pinball_mean`` is a lower bound when rows are
censored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.scoring.censored_rows import reached_cap
from lenbench.scoring.concordance import concordance_summary
from lenbench.scoring.distribution_scores import (
    CRPS_GRID,
    INTERVALS,
    clip_counts,
    crps,
    mass_at_cap,
    pinball,
    pit,
    row_scores,
    score_threshold,
)
from lenbench.scoring.metrics import _group_ids, _request_means, _rows_by_group, bootstrap_ratio_ci
from lenbench.scoring.noise_floor import siblings_of_each

__all__ = ["CRPS_GRID", "INTERVALS", "PIT_BINS", "crps", "distribution_metrics",
           "dynamic_distribution_metrics", "mass_at_cap", "pinball", "pit", "pit_histogram",
           "row_scores", "runaway_scores", "score_threshold", "sibling_distributions"]

PIT_BINS = 10
# the reference's quantile grid: fine enough that its piecewise-linear form follows the
# siblings' step CDF to within 1/200 of probability
SIBLING_LEVELS = tuple(np.arange(1, 200) / 200)


def pit_histogram(values, n_bins: int = PIT_BINS) -> list[float]:
    """Share of PIT values in each of `n_bins` equal bins of [0, 1] (1 falls in the last bin)."""
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        return [0.0] * n_bins
    idx = np.minimum((values * n_bins).astype(np.int64), n_bins - 1)
    return (np.bincount(idx, minlength=n_bins) / values.size).tolist()


_MEANS = ("pinball_mean", "crps", "coverage_50", "coverage_50_high", "coverage_50_nominal",
          "width_50", "coverage_80", "coverage_80_high", "coverage_80_nominal", "width_80")


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


def _flags(censored, n: int, what: str) -> np.ndarray:
    cens = np.zeros(n, bool) if censored is None else np.asarray(censored, dtype=bool).reshape(-1)
    if cens.size != n:
        raise ValueError(f"{what}: censored has {cens.size} flags for {n} rows")
    return cens


def _clipping(dist: LengthDistribution, cap) -> dict[str, Any]:
    counts = clip_counts(dist, cap)
    return {"n_clipped_low": int(counts["low"].sum()), "n_clipped_high": int(counts["high"].sum()),
            "clipped_mass": float(counts["mass"].mean()) if counts["mass"].size else 0.0}


def runaway_scores(p_cap, quantiles, true, groups, censored=None, cap=None, n_boot: int = 1000,
                   seed: int = 0, ci: float = 0.95) -> dict[str, Any]:
    """How a distribution treats the cap: ``runaway_auc`` (with ``runaway_auc_ci``) of `p_cap`,
    each row's P(L >= cap), for "reached the cap", None without a cap or when every row or none
    reached it; ``q75_at_cap`` and ``q90_at_cap``, the shares of rows whose clipped quantiles
    at 0.75 and 0.9 (`quantiles`, at QUANTILE_LEVELS) sit at the cap."""
    out: dict[str, Any] = {"runaway_auc": None, "runaway_auc_ci": None, "q75_at_cap": None,
                           "q90_at_cap": None}
    if cap is None or p_cap is None:
        return out
    q = np.asarray(quantiles, dtype=np.float64)
    for level, key in ((0.75, "q75_at_cap"), (0.9, "q90_at_cap")):
        out[key] = float(np.mean(q[:, QUANTILE_LEVELS.index(level)] >= float(cap))) \
            if q.size else None
    reached = reached_cap(true, censored, cap)
    if 0 < reached.sum() < reached.size:
        auc = concordance_summary(reached.astype(np.float64), p_cap, groups, None, n_boot, seed,
                                  ci)
        out["runaway_auc"], out["runaway_auc_ci"] = auc["value"], auc["ci"]
    return out


def distribution_metrics(dist: LengthDistribution, true, groups, censored=None, cap=None,
                         threshold: float | None = None, n_boot: int = 1000, seed: int = 0,
                         ci: float = 0.95) -> dict[str, Any] | None:
    """Static distribution scores over every row, censored ones included (scored as
    ``distribution_scores`` says, with each distribution clipped to [1, `cap`]), each mean with
    a bootstrap interval over prompts; None when there is no row."""
    true = np.asarray(true, dtype=np.float64).reshape(-1)
    _check(dist, true.size, "distribution_metrics: the distribution")
    gid = _group_ids(groups, true.size, "distribution_metrics")
    cens = _flags(censored, true.size, "distribution_metrics")
    if true.size == 0:
        return None
    top = score_threshold(cap, true, cens, threshold)
    scores = row_scores(dist, true, cens, cap, top, seed)
    quantiles = np.clip(dist.quantile(QUANTILE_LEVELS), 1.0, np.inf if cap is None else cap)
    return {"n": int(true.size), "n_prompts": int(np.unique(gid).size),
            "n_censored": int(cens.sum()), "threshold": top, **_clipping(dist, cap),
            **_summary(scores, gid, n_boot, seed, ci),
            **runaway_scores(mass_at_cap(dist, cap), quantiles, true, gid, cens, cap, n_boot,
                             seed, ci)}


def dynamic_distribution_metrics(step_row, step_t, lengths, dist: LengthDistribution, groups,
                                 censored=None, cap=None, threshold: float | None = None,
                                 n_boot: int = 1000, seed: int = 0,
                                 ci: float = 0.95) -> dict[str, Any] | None:
    """Remaining-length distribution scores: at step t the truth is L - t (a lower bound on a
    censored row), the cap is ``cap - t`` and the weighted CRPS's end ``T - t``; each score is
    averaged over a request's steps first, then over requests (as the dynamic MAE is), with a
    bootstrap interval over prompts. Every step is scored; None when there is none."""
    step_row = np.asarray(step_row).reshape(-1).astype(np.int64)
    step_t = np.asarray(step_t).reshape(-1).astype(np.float64)
    lengths = np.asarray(lengths, dtype=np.float64).reshape(-1)
    _check(dist, step_row.size, "dynamic_distribution_metrics: the distribution")
    gid = _group_ids(groups, lengths.size, "dynamic_distribution_metrics")
    cens = _flags(censored, lengths.size, "dynamic_distribution_metrics")
    if step_row.size == 0:
        return None
    top = score_threshold(cap, lengths, cens, threshold)
    step_cap = None if cap is None else float(cap) - step_t
    steps = row_scores(dist, lengths[step_row] - step_t, cens[step_row], step_cap,
                       None if top is None else top - step_t, seed + 1)
    per_request = {k: np.stack([_request_means(step_row, col, lengths.size)
                                for col in v.T], axis=1) if v.ndim == 2
                   else _request_means(step_row, v, lengths.size) for k, v in steps.items()
                   if k != "pit"}
    scored = np.isfinite(per_request["crps"])
    per_request = {k: v[scored] for k, v in per_request.items()}
    per_request["pit"] = steps["pit"]  # the PIT histogram pools steps: one value per forecast
    r_gid = np.unique(gid[scored], return_inverse=True)[1].reshape(-1)
    return {"n_steps": int(step_row.size), "n_requests": int(scored.sum()),
            "n_prompts": int(r_gid.max() + 1), "n_censored": int((cens & scored).sum()),
            "n_censored_steps": int(cens[step_row].sum()), "threshold": top,
            **_clipping(dist, step_cap), **_summary(per_request, r_gid, n_boot, seed, ci)}


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
