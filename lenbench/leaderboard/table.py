"""Results as data: every figure of a results folder in one tidy table.

One row per (dataset, model, predictor, variant, seed, metric) with its value, so a notebook or
a script compares runs with pandas instead of parsing markdown, and every cell of the leaderboard
can be traced to a row here. `variant` is empty for the predictor's own figures and names the
extra readings a predictor reports (e.g. a classifier's argmax and expectation). Metric names are
dotted paths into the result file (`static.mae`, `dynamic.mae_ci_low`, `timings.fit_s`,
`scheduling.score`; a distribution's figures as `distribution.static.crps`), so each value can be
found in the JSON it came from. `protocol_version` is the scoring protocol the figure was computed
under (1 for files that predate the field; a rescored file's variants keep theirs, and so does a
scheduling score not yet rescored): compare figures across runs of the same protocol only.

Each row also names where its figure comes from: `labels`, the fingerprint of the labels it was
scored on (two builds of one world are two label sets), `params`, the key of the predictor's
arguments (the leaderboard's "[params ...]"), and `result`, the result file's path in the folder.
Every column but `value` together is the row's key, unique in a table.

    lenbench-leaderboard --table results.csv      # the same table, written as CSV
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from lenbench.results import Result, computing_params, config_hash, load_results

COLUMNS = ["dataset", "model", "labels", "predictor", "params", "variant", "seed", "kind",
           "status", "protocol_version", "result", "metric", "value"]


def _number(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _scalars(prefix: str, block: Mapping[str, Any] | None) -> Iterable[tuple[str, float]]:
    """A block's numbers; a two-element `<name>_ci` interval becomes `_ci_low`, `_ci_high`."""
    for key, value in sorted((block or {}).items()):
        if (number := _number(value)) is not None:
            yield f"{prefix}.{key}", number
        elif key.endswith("_ci") and isinstance(value, list | tuple) and len(value) == 2:
            for side, bound in zip(("low", "high"), value):
                if (number := _number(bound)) is not None:
                    yield f"{prefix}.{key}_{side}", number


def _scheduling_score(result: Result) -> Iterable[tuple[str, float]]:
    """The predictor's scheduling score on the run's score metric, with its 95% interval (the
    share of the oracle's gain over FCFS, one run's simulator seeds)."""
    sched = result.scheduling or {}
    own = (sched.get("rows") or {}).get(result.predictor.name) or {}
    score = (own.get("score") or {}).get(sched.get("score_metric")) if isinstance(own, Mapping) \
        else None
    if isinstance(score, Mapping):
        for key, name in (("value", "score"), ("ci95_low", "score_ci_low"),
                          ("ci95_high", "score_ci_high")):
            if (number := _number(score.get(key))) is not None:
                yield f"scheduling.{name}", number


def result_figures(result: Result) -> list[tuple[str, str, float]]:
    """(variant, metric, value) of every figure of one result: the rows of the tidy table."""
    metrics = result.metrics
    out: list[tuple[str, str, float]] = []
    for part, block in (("static", metrics.static), ("dynamic", metrics.dynamic)):
        out += [("", m, v) for m, v in _scalars(part, block)]
    for variant, block in sorted(metrics.variants.items()):
        out += [(variant, m, v) for m, v in _scalars("static", block)]
    dist = metrics.distribution
    for part, block in (("static", dist.static), ("dynamic", dist.dynamic)) if dist else ():
        out += [("", m, v) for m, v in _scalars(f"distribution.{part}", block)]
    out += [("", m, v) for m, v in _scalars("timings", dict(result.timings.items()))]
    out += [("", m, v) for m, v in _scheduling_score(result)]
    out += [("", m, v) for m, v in _audit(result)]
    return out


def _audit(result: Result) -> Iterable[tuple[str, float]]:
    """The audit's verdict as a figure, `causality.passed`: 1 passed, 0 failed (non-causal);
    none where no audit was recorded (references, files from before the audit)."""
    passed = (result.causality or {}).get("passed")
    if isinstance(passed, bool):
        yield "causality.passed", float(passed)


def _provenance(result: Result) -> dict[str, str]:
    """Where a result's figures come from: its labels, its predictor's arguments, its file."""
    return {"labels": str((result.fingerprints and result.fingerprints.labels) or ""),
            "params": config_hash(computing_params(result.predictor.params)),
            "result": result.source}


def figures(result: Result, variant: str | None = None) -> dict[str, float]:
    """One reading of a result as the leaderboard's rows read it, by metric name: the
    predictor's own figures, or a variant's static figures beside the run's timings and
    scheduling score (a variant has no dynamic figures of its own)."""
    own = variant or ""
    return {metric: value for var, metric, value in result_figures(result)
            if var == own or (var == "" and not metric.startswith(("static.", "dynamic.")))}


def result_rows(result: Result) -> list[dict[str, Any]]:
    """The tidy rows of one result (a failed run gives none: it has no figures)."""
    ident = {"dataset": result.dataset.name, "model": result.model.name,
             "predictor": result.predictor.name, "seed": result.seed, "kind": result.kind,
             **_provenance(result),
             "status": result.status}
    def protocol(variant: str, metric: str) -> int:
        """The protocol the figure was computed under: its block's (a rescoring keeps some)."""
        if variant:
            return result.block_protocol("metrics.variants")
        if metric.startswith("scheduling."):
            return result.block_protocol("scheduling")
        return result.protocol_version

    return [{**ident, "variant": variant, "metric": metric, "value": value,
             "protocol_version": protocol(variant, metric)}
            for variant, metric, value in result_figures(result)]


def results_table(results: Iterable[Result]) -> pd.DataFrame:
    """Loaded results (e.g. `lenbench.results.load_results(folder)[0]`) as one tidy table."""
    rows = [row for result in results for row in result_rows(result)]
    table = pd.DataFrame(rows, columns=COLUMNS)
    return table.sort_values(COLUMNS[:-1], kind="stable", ignore_index=True)


def load_table(results_dir: str | os.PathLike[str]) -> tuple[pd.DataFrame, list[str]]:
    """The tidy table of a results folder, and one problem line per file that could not be read."""
    results, problems = load_results(results_dir)
    return results_table(results), problems
