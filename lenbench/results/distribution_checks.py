"""Validation of the distribution fields of a result file, kept beside the schema (__init__.py).

A distributional run adds ``metrics.distribution`` ({static, dynamic}, each a
``distribution_metrics`` summary or null) and, per test row, ``predictions.quantiles`` (one list of
values at ``predictions.quantile_levels`` per row, clipped to [1, cap] as scored),
``predictions.crps`` and ``predictions.pit`` (a censored row's PIT is its seeded draw; files
written before censored rows were scored hold null there) and ``predictions.p_cap`` (each row's
P(L >= cap); absent without a cap and in older files). A summary holds, besides the means:
``n`` (steps: ``n_steps``, ``n_requests``), ``n_censored`` (steps: also ``n_censored_steps``),
``threshold`` (the weighted CRPS's upper end), ``n_clipped_low``, ``n_clipped_high``,
``clipped_mass``, and per interval ``coverage_*_high`` (censored rows that neither rule decides
counted as covered) and ``coverage_*_nominal`` (what a calibrated predictor covers of the clipped
intervals), ``runaway_auc`` and ``q75_at_cap`` / ``q90_at_cap``;
``lenbench.scoring.distribution_metrics`` defines them. These and
``n_censored_excluded`` (older files) are optional. The leaderboard reads these, so a broken one
is reported by field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lenbench.results.checks import check_type, fail, get_field, is_number

_NUMBERS = ("pinball_mean", "crps", "coverage_50", "width_50", "coverage_80", "width_80")
_OPTIONAL = ("coverage_50_high", "coverage_50_nominal", "coverage_80_high", "coverage_80_nominal",
             "clipped_mass")
_NULLABLE = ("runaway_auc", "q75_at_cap", "q90_at_cap")


def _check_summary(m: Any, field: str, source: str) -> None:
    check_type(m, field, source, "object")
    for key in _NUMBERS:
        check_type(get_field(m, key, source, field), f"{field}.{key}", source, "number")
        ci = m.get(f"{key}_ci")
        if ci is not None and not (isinstance(ci, list) and len(ci) == 2
                                   and all(map(is_number, ci))):
            raise fail(source, f"{field}.{key}_ci", f"should be [low, high] or null, got {ci!r}")
    for key in _OPTIONAL:
        if key in m:
            check_type(m[key], f"{field}.{key}", source, "number")
    for key in _NULLABLE:
        if key in m:
            check_type(m[key], f"{field}.{key}", source, "number", nullable=True)
    hist = get_field(m, "pit_histogram", source, field)
    check_type(hist, f"{field}.pit_histogram", source, "list")
    if not all(map(is_number, hist)):
        raise fail(source, f"{field}.pit_histogram", "should hold numbers")


def check_distribution_fields(d: Mapping[str, Any], source: str) -> None:
    """Raise ResultError naming the field when a distribution field of an ok result is malformed;
    results without them (point predictors, older files) pass untouched."""
    dist = (d.get("metrics") or {}).get("distribution")
    if dist is not None:
        check_type(dist, "metrics.distribution", source, "object")
        for part in ("static", "dynamic"):
            if dist.get(part) is not None:
                _check_summary(dist[part], f"metrics.distribution.{part}", source)
    preds = d.get("predictions") or {}
    if "quantiles" not in preds:
        return
    n = len(preds.get("true") or [])
    levels = get_field(preds, "quantile_levels", source, "predictions")
    check_type(levels, "predictions.quantile_levels", source, "list")
    quantiles = preds["quantiles"]
    check_type(quantiles, "predictions.quantiles", source, "list")
    if len(quantiles) != n or not all(isinstance(q, list) and len(q) == len(levels)
                                      and all(map(is_number, q)) for q in quantiles):
        raise fail(source, "predictions.quantiles", f"should hold {n} lists of {len(levels)} "
                    "numbers (one per test row, one per quantile level)")
    for key in ("crps", "pit", "p_cap"):
        values = preds.get(key)
        if values is not None and (not isinstance(values, list) or len(values) != n
                                   or not all(v is None or is_number(v) for v in values)):
            raise fail(source, f"predictions.{key}", f"should hold {n} numbers or nulls")
