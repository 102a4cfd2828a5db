"""Checking a loaded result against the schema (lenbench/results/__init__.py), strictly where the
leaderboard relies on a field, so that a broken file is reported with its path and the field to
fix instead of breaking the leaderboard."""

from __future__ import annotations

from typing import Any

from lenbench.results.checks import REGENERATE, ResultError, check_type, fail, get_field, is_number
from lenbench.results.distribution_checks import check_distribution_fields
from lenbench.results.versions import KINDS, SCHEMA_VERSION, STATUSES

__all__ = ["validate_result"]


def _check_static(m: Any, field: str, source: str) -> None:
    check_type(m, field, source, "object")
    check_type(get_field(m, "n", source, field), f"{field}.n", source, "int")
    check_type(get_field(m, "mae", source, field), f"{field}.mae", source, "number")
    ci = get_field(m, "mae_ci", source, field)
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(map(is_number, ci))):
        raise fail(source, f"{field}.mae_ci", f"should be [low, high] or null, got {ci!r}")
    for key in ("kendall_tau", "spearman", "within_25", "rmse", "c_index", "runaway_auc",
                "mae_uncensored"):
        if key in m:
            check_type(m[key], f"{field}.{key}", source, "number", nullable=True)


def _check_dynamic(m: Any, field: str, source: str) -> None:
    check_type(m, field, source, "object")
    check_type(get_field(m, "mae", source, field), f"{field}.mae", source, "number")
    bins = get_field(m, "mae_by_progress", source, field)
    check_type(bins, f"{field}.mae_by_progress", source, "list")
    if not all(b is None or is_number(b) for b in bins):
        raise fail(source, f"{field}.mae_by_progress", "should hold numbers or nulls")


def _check_transfer(t: Any, source: str) -> None:
    """The transfer block names both prompt sets and holds scores or the error that stopped
    them."""
    check_type(t, "transfer", source, "object")
    for side in ("trained_on", "scored_on"):
        check_type(get_field(t, f"{side}.name", source, "transfer"), f"transfer.{side}.name",
                   source, "str")
    metrics = t.get("metrics")
    if metrics is None:
        check_type(get_field(t, "error", source, "transfer"), "transfer.error", source, "object")
        return
    check_type(metrics, "transfer.metrics", source, "object")
    _check_static(get_field(metrics, "static", source, "transfer.metrics"),
                  "transfer.metrics.static", source)
    if metrics.get("dynamic") is not None:
        _check_dynamic(metrics["dynamic"], "transfer.metrics.dynamic", source)


def validate_result(d: Any, source: str = "<result>") -> dict[str, Any]:
    """Check a loaded result against the schema and return it; raise ResultError naming the field.

    Checks what the leaderboard relies on, strictly, and leaves the rest free so that predictors and
    the simulator can add fields without a schema bump.
    """
    if not isinstance(d, dict):
        raise ResultError(f"{source}: a result must be a JSON object, got {type(d).__name__}; "
                          f"fix: {REGENERATE}")
    version = get_field(d, "schema_version", source)
    if version not in range(1, SCHEMA_VERSION + 1):  # older layouts load (results/upgrade.py)
        fix = ("upgrade lenbench to read it" if is_number(version) and version > SCHEMA_VERSION
               else REGENERATE)
        raise fail(source, "schema_version", f"is {version!r}, this lenbench reads "
                    f"{SCHEMA_VERSION}", fix)
    if "protocol_version" in d:  # optional: files written before it existed are protocol 1
        check_type(d["protocol_version"], "protocol_version", source, "int")
        if d["protocol_version"] < 1:
            raise fail(source, "protocol_version", f"is {d['protocol_version']!r}, expected 1 or "
                       "more")
    status = get_field(d, "status", source)
    if status not in STATUSES:
        raise fail(source, "status", f"is {status!r}, expected one of {list(STATUSES)}")
    kind = get_field(d, "kind", source)
    if kind not in KINDS:
        raise fail(source, "kind", f"is {kind!r}, expected one of {list(KINDS)}")
    for field in ("dataset.name", "model.name", "predictor.name", "config_hash", "created_at"):
        check_type(get_field(d, field, source), field, source, "str")
    check_type(get_field(d, "seed", source), "seed", source, "int")
    for field in ("config", "environment", "git"):
        check_type(get_field(d, field, source), field, source, "object")

    if status == "failed":
        err = get_field(d, "error", source)
        check_type(err, "error", source, "object")
        check_type(get_field(err, "type", source, "error"), "error.type", source, "str")
        check_type(get_field(err, "message", source, "error"), "error.message", source, "text")
        return d

    check_type(get_field(d, "predictor.dynamic", source), "predictor.dynamic", source, "bool")
    check_type(get_field(d, "timings", source), "timings", source, "object")
    metrics = get_field(d, "metrics", source)
    check_type(metrics, "metrics", source, "object")
    static = get_field(metrics, "static", source, "metrics")
    dynamic = metrics.get("dynamic")
    if static is None and dynamic is None:
        raise fail(source, "metrics", "has neither static nor dynamic metrics for an ok run",
                    "record the metrics, or set status to 'failed' with an error")
    if static is not None:
        _check_static(static, "metrics.static", source)
    if dynamic is not None:
        _check_dynamic(dynamic, "metrics.dynamic", source)
    variants = metrics.get("variants") or {}
    check_type(variants, "metrics.variants", source, "object")
    for name, vm in variants.items():
        _check_static(vm, f"metrics.variants.{name}", source)
    preds = d.get("predictions")
    if preds is not None:
        check_type(preds, "predictions", source, "object")
        true = get_field(preds, "true", source, "predictions")
        pred = get_field(preds, "pred", source, "predictions")
        check_type(true, "predictions.true", source, "list")
        check_type(pred, "predictions.pred", source, "list")
        if len(true) != len(pred):
            raise fail(source, "predictions", f"has {len(true)} true values but {len(pred)} "
                        "predictions")
    check_distribution_fields(d, source)  # metrics.distribution, predictions.quantiles
    if d.get("scheduling") is not None:
        check_type(d["scheduling"], "scheduling", source, "object")
    if d.get("transfer") is not None:
        _check_transfer(d["transfer"], source)
    if d.get("report") is not None:
        check_type(d["report"], "report", source, "object")
    return d
