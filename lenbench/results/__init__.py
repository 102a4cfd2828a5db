"""The result file: one schema-versioned JSON per run, at a deterministic path, written atomically.

The leaderboard is a pure function of a folder of these files, so the format is the
contract between a run and everything that reads it later. Shape of a result::

    schema_version  1
    protocol_version  int: the scoring protocol the figures were computed under (PROTOCOL_VERSION;
                    absent in files written before it existed: protocol 1)
    status          "ok" | "failed"
    error           null | {type, message, traceback}
    kind            "predictor" | "reference"
    dataset         {name, key, n_train, n_val, n_test, n_test_prompts, mean_L}
    model           {name, key, source: optional (where converted weights came from)}
    predictor       {name, target, params, dynamic, reads_next_token: optional, reads: optional
                    {text, target_states, target_model}}
    seed            int
    config_hash     str  (config_hash() of the resolved config, seed included, the predictor's
                    display-only settings left out: `computing_params`)
    metrics         {static: static_metrics() | null, dynamic: dynamic_metrics() | null,
                     variants: {name: static_metrics()}, distribution: optional
                     {static, dynamic} (lenbench.results.distribution_checks), noise_floor: the
                     reference's bounds (noise_floor.noise_floor_bounds: in_sample,
                     leave_one_out, interval, n, n_prompts, n_censored,
                     n_prompts_median_censored; the last two absent in older files)}
    timings         {fit_s, fit_s_earlier_runs, predict_s, predict_ms_per_request,
                    predict_ms_per_step, n_parameters}  fit_s includes fit_s_earlier_runs:
                    epochs of a resumed or reused fit that earlier runs trained (absent in
                    files written before it existed)
    report          {...}  Predictor.report(): free-form figures the predictor measured ({} for
                    references and failed runs; absent in files written before it existed)
    predictions     {true, pred, prompt_id, censored: [...]}  optional (test rows, in order;
                    prompt_id and censored absent in files written before they existed);
                    prompt_len (prompt tokens per row: what the simulator serves) and, for a
                    dynamic predictor, dynamic_steps ({t: listed steps, error: per row, the
                    remaining-length error at each t or null}) absent in older files;
                    variants ({name: [...]}: each decoding variant's predictions, scored as
                    metrics.variants[name]) absent in older files
    fingerprints    {labels, features}  content hashes of the data scored
                    (lenbench.scoring.fingerprints; absent in files written before they existed)
    causality       {passed, ...}  optional: the audit of what was scored
                    (lenbench.scoring.audit; absent in files written before it existed)
    scheduling      {...}                            optional, free-form
    transfer        optional (lenbench.transfer): {trained_on, scored_on: {name, key, keys,
                    fingerprints, ...}, metrics: {static, dynamic} | null, predictions, error}
                    the fitted predictor scored on a second prompt set (null on a reference
                    whose transfer set has no prompt with two exact samples)
    generation      how the labels were made (the generate stage's card)
    stage_keys      the cache key of each stage the run read
    config          resolved config dict
    environment     environment_info()
    git             git_info()
    created_at      ISO 8601 UTC
    rescored        optional: {from_protocol, to_protocol, at, kept} written by
                    `python -m lenbench.results.rescore`, which recomputed the figures it could
                    from the stored predictions; kept maps each block it could not recompute
                    (e.g. "metrics.variants") to the protocol its figures are from;
                    variants {at, added, from}: the decodings `python -m
                    lenbench.results.add_median` added from the stored quantiles

A failed run carries the identity fields, ``error`` and whatever else it has; ``metrics`` may be
null. ``validate_result`` (validation.py) enforces this so that a broken file is reported with its
path and the field to fix instead of breaking the leaderboard.

Results are written as plain mappings (`write_result`) and read back as a typed `Result`
(model.py) through one loader (loading.py: `load_results`, `load_result`), which upgrades files of
older layouts in one place (upgrade.py), so no reader guesses which fields a file has.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lenbench.results.checks import ResultError
from lenbench.results.loading import load_result, load_results, load_results_from, read_result
from lenbench.results.model import (
    DatasetInfo,
    DistributionScores,
    ErrorInfo,
    Fingerprints,
    Metrics,
    ModelInfo,
    Predictions,
    PredictorInfo,
    Result,
    Timings,
    Transfer,
)
from lenbench.results.provenance import environment_info, git_info, utc_now
from lenbench.results.validation import validate_result
from lenbench.results.versions import PROTOCOL_CHANGES, PROTOCOL_VERSION, SCHEMA_VERSION
from lenbench.stages import atomic_write_bytes

__all__ = ["DISPLAY_ONLY_KEYS", "PROTOCOL_CHANGES", "PROTOCOL_VERSION", "SCHEMA_VERSION",
           "DatasetInfo", "DistributionScores", "ErrorInfo", "Fingerprints", "Metrics",
           "ModelInfo", "PredictorInfo", "Predictions", "Result", "ResultError", "Timings",
           "Transfer", "computing_params", "config_hash", "environment_info", "git_info",
           "json_safe", "load_result", "load_results", "load_results_from", "read_result",
           "result_path", "safe_name", "utc_now", "validate_result", "write_result"]


# ---------------------------------------------------------------------------------------------
# identity and paths


# Predictor settings that change how a run shows itself while it runs, never what it computes.
# Reserved: a predictor must not give them another meaning (CONTRIBUTING.md, "Adding a
# predictor"); only a true/false/null value is taken for the display flag.
DISPLAY_ONLY_KEYS = frozenset({"progress"})


def computing_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A predictor's settings less the display-only ones (`DISPLAY_ONLY_KEYS`), at every depth
    (a wrapped predictor's own settings included): what a run's identity is made of, so that
    turning a progress bar on or off neither renames a result file nor splits a leaderboard
    row."""
    def strip(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: strip(v) for k, v in value.items()
                    if not (k in DISPLAY_ONLY_KEYS and (v is None or isinstance(v, bool)))}
        if isinstance(value, list | tuple):
            return [strip(v) for v in value]
        return value

    return strip(params)


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
