"""The result file: one schema-versioned JSON per run, at a deterministic path, written atomically.

The leaderboard is a pure function of a folder of these files, so the format is the
contract between a run and everything that reads it later. Shape of a result::

    schema_version  1
    protocol_version  int: the scoring protocol the figures were computed under (PROTOCOL_VERSION;
                    absent in files written before it existed: protocol 1)
    status          "ok" | "failed"
    error           null | {type, message, traceback}
    kind            "predictor" | "reference"
    dataset         {name, key, n_train, n_val, n_test, n_test_prompts}
    model           {name, key}
    predictor       {name, target, params, dynamic}
    seed            int
    config_hash     str  (config_hash() of the resolved config, seed included)
    metrics         {static: static_metrics() | null, dynamic: dynamic_metrics() | null,
                     variants: {name: static_metrics()}, distribution: optional
                     {static, dynamic} (lenbench.results.distribution_checks), noise_floor: the
                     reference's bounds (noise_floor.noise_floor_bounds: in_sample,
                     leave_one_out, interval, n, n_prompts, n_censored,
                     n_prompts_median_censored; the last two absent in older files)}
    timings         {fit_s, predict_s, predict_ms_per_request, predict_ms_per_step, n_parameters}
    report          {...}  Predictor.report(): free-form figures the predictor measured ({} for
                    references and failed runs; absent in files written before it existed)
    predictions     {true, pred, prompt_id, censored: [...]}  optional (test rows, in order;
                    prompt_id and censored absent in files written before they existed)
    fingerprints    {labels, features}  content hashes of the data scored
                    (lenbench.scoring.fingerprints; absent in files written before they existed)
    scheduling      {...}                            optional, free-form
    transfer        optional (lenbench.transfer): {trained_on, scored_on: {name, key, keys,
                    fingerprints, ...}, metrics: {static, dynamic} | null, predictions, error}
                    the fitted predictor scored on a second prompt set (null on a reference
                    whose transfer set has no prompt with two exact samples)
    config          resolved config dict
    environment     environment_info()
    git             git_info()
    created_at      ISO 8601 UTC

A failed run carries the identity fields, ``error`` and whatever else it has; ``metrics`` may be
null. ``validate_result`` enforces this so that a broken file is reported with its path and the
field to fix instead of breaking the leaderboard.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import platform
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lenbench.results.checks import REGENERATE, ResultError, check_type, fail, get_field, is_number
from lenbench.results.distribution_checks import check_distribution_fields
from lenbench.stages import atomic_write_bytes

__all__ = ["PROTOCOL_VERSION", "SCHEMA_VERSION", "ResultError", "config_hash",
           "environment_info", "git_info", "json_safe", "load_results", "protocol_version",
           "result_path", "utc_now", "validate_result", "write_result"]

SCHEMA_VERSION = 1  # the file layout; bump only when a reader can no longer load old files
# The scoring rules the figures were computed under; a result without the field is protocol 1.
# Version 2: the scheduling score ranks SJF keys by rank quantiles (scale-free); censored rows are
# scored by every distribution score and by the noise floor; the audit of what was scored
# re-predicts the full scored split with fresh copies of the fitted predictor.
PROTOCOL_VERSION = 2
PROTOCOL_CHANGES = {2: "the scale-free scheduling score, censored rows in every distribution "
                       "score and in the noise floor, and the full-split audit"}


def protocol_version(result: Mapping[str, Any]) -> int:
    """The scoring protocol a result was computed under (1 when the file predates the field)."""
    version = result.get("protocol_version")
    return int(version) if is_number(version) else 1

STATUSES = ("ok", "failed")
KINDS = ("predictor", "reference")


# ---------------------------------------------------------------------------------------------
# identity and paths


def config_hash(cfg: Mapping[str, Any]) -> str:
    """Stable 12-hex-digit id of a resolved config: same config, same result path, on any machine.

    Keys are sorted and non-JSON values (paths, enums) are stringified, so dict order and types
    that round-trip to the same text do not change the hash. Include the seed in ``cfg``: runs that
    differ only by seed must not overwrite each other.
    """
    text = json.dumps(cfg, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")


def safe_name(name: str) -> str:
    """A path component from a free-form name (``org/model`` -> ``org_model``), never empty or
    dots."""
    cleaned = _UNSAFE.sub("_", str(name)).strip("_")
    if set(cleaned) <= {"."}:  # "", "." and ".." would escape or collapse the folder layout
        cleaned = cleaned.replace(".", "_") or "_"
    return cleaned


def result_path(
    results_dir: str | os.PathLike[str], dataset: str, model: str, predictor: str, config_hash: str,
    labels_fingerprint: str | None = None,
) -> Path:
    """Deterministic home of a run's result: rerunning a config on the same labels overwrites
    its own file only; the same config scored on other labels (another machine's build of the
    data) gets a file of its own instead of silently replacing this one."""
    stem = safe_name(config_hash) + (f"-{safe_name(labels_fingerprint[:8])}"
                                     if labels_fingerprint else "")
    return Path(results_dir) / safe_name(dataset) / safe_name(model) / safe_name(predictor) / \
        f"{stem}.json"


# ---------------------------------------------------------------------------------------------
# writing


def _json_default(obj: Any) -> Any:
    """Serialise numpy scalars/arrays and paths that metrics and configs naturally contain."""
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"object of type {type(obj).__name__} is not JSON serialisable")


def _sanitise_floats(obj: Any) -> Any:
    """NaN/inf are not JSON; store them as null so that any JSON reader can load the file."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _sanitise_floats(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_sanitise_floats(v) for v in obj]
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return _sanitise_floats(obj.tolist())
    return obj


def json_safe(obj: Any) -> Any:
    """``obj`` as plain JSON values (numpy converted, NaN/inf as null); TypeError if impossible.

    Used to check free-form parts of a result (a predictor's report) when they are produced, so
    a bad value names its source instead of failing the final write.
    """
    return json.loads(json.dumps(_sanitise_floats(obj), allow_nan=False, default=_json_default))


def write_result(path: str | os.PathLike[str], result: Mapping[str, Any]) -> Path:
    """Write ``result`` so that readers see either the old file or the complete new one, never half.

    A killed run leaves at most a hidden ``.*.tmp`` file (see `atomic_write_bytes`), which
    ``load_results`` ignores.
    """
    text = json.dumps(_sanitise_floats(result), indent=1, sort_keys=True, allow_nan=False,
                      default=_json_default) + "\n"
    return atomic_write_bytes(path, text.encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# validation

def _check_static(m: Any, field: str, source: str) -> None:
    check_type(m, field, source, "object")
    check_type(get_field(m, "n", source, field), f"{field}.n", source, "int")
    check_type(get_field(m, "mae", source, field), f"{field}.mae", source, "number")
    ci = get_field(m, "mae_ci", source, field)
    if ci is not None and not (isinstance(ci, list) and len(ci) == 2 and all(map(is_number, ci))):
        raise fail(source, f"{field}.mae_ci", f"should be [low, high] or null, got {ci!r}")
    for key in ("kendall_tau", "spearman", "within_25", "rmse"):
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
    if version != SCHEMA_VERSION:
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


# ---------------------------------------------------------------------------------------------
# loading


def load_results(results_dir: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """All valid results under ``results_dir`` and one problem line per file that is not.

    A broken file must be visible (the leaderboard lists it) but must not hide the other results.
    Files are read in sorted path order so that everything downstream is deterministic. Each loaded
    result gets ``_source``: its path relative to ``results_dir`` (not part of the schema).
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder '{root}' does not exist; run `lenbench` first or "
                                "point to the folder that holds the result JSON files")
    results: list[dict[str, Any]] = []
    problems: list[str] = []
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # hidden files and temp files of an interrupted write
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            problems.append(f"{rel}: not readable JSON ({exc}); fix: {REGENERATE}")
            continue
        try:
            validate_result(data, source=rel)
        except ResultError as exc:
            problems.append(str(exc))
            continue
        data["_source"] = rel
        results.append(data)
    return results, problems


# ---------------------------------------------------------------------------------------------
# provenance


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_info(device: str | None = None) -> dict[str, Any]:
    """Versions and hardware a number was measured on; timings mean nothing without them.

    ``device`` overrides detection (pass the device the run actually used); otherwise "cuda:NAME"
    when torch sees a GPU, else "cpu". torch is only imported if it is already installed.
    """
    import numpy

    torch_version = _version("torch")
    if device is None:
        device = "cpu"
        if torch_version is not None:
            try:
                import torch

                if torch.cuda.is_available():
                    device = f"cuda:{torch.cuda.get_device_name(0)}"
            except (ImportError, OSError, RuntimeError):  # a broken torch must not lose a result
                device = "cpu"
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch_version,
        "transformers": _version("transformers"),
        "numpy": numpy.__version__,
        "device": device,
        "cpu_count": os.cpu_count(),
    }


def _git(path: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def git_info(path: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The code revision a result came from, and whether uncommitted edits could have changed it.

    Both values are None outside a git work tree (e.g. an installed wheel) or without a commit yet.
    """
    p = Path(path)
    rev = _git(p, "rev-parse", "HEAD")
    status = _git(p, "status", "--porcelain")
    return {
        "revision": rev.strip() if rev else None,
        "dirty": None if status is None else bool(status.strip()),
    }


def utc_now() -> str:
    """``created_at`` stamp: ISO 8601 in UTC with a ``Z``, second precision."""
    from datetime import UTC, datetime

    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
