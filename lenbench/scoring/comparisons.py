"""Paired comparisons: each predictor against a reference predictor on the same test rows.

Unpaired intervals overlap almost everywhere, because most of a predictor's error comes from how
hard each prompt is, which every predictor shares. The difference of two predictors' errors on the
same rows cancels that shared part, so its interval (a bootstrap over prompts) says whether one is
really better. A predictor's figure is its errors averaged over its seeds, row by row; the interval
is a bootstrap over prompts that also redraws each predictor's seeds in every replicate, so it
covers training variance as well as the prompts' sampling (`metrics.paired_difference`).

Results can be paired only when they were scored on the same rows: the leaderboard groups them by
label fingerprint, and these functions also check that the rows' prompt ids and true lengths agree.
Step by step (`paired_steps`), both predictors are also read on one population of requests at
every listed step, so that a column's difference is not a difference of who is still decoding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from lenbench.scoring.metrics import censored_error, paired_difference

DEFAULT_REFERENCE = "mlp_probe"
FALLBACK_REFERENCE = "constant"  # used when the reference predictor is not in a table
DASH = "—"


class ScoredRows(Protocol):
    """What a pairing reads of one run's scored rows (a result's `predictions`): None where the
    file predates a column or the predictor has no such reading."""

    @property
    def true(self) -> Sequence[Any]: ...
    @property
    def pred(self) -> Sequence[Any]: ...
    @property
    def prompt_id(self) -> Sequence[Any] | None: ...
    @property
    def censored(self) -> Sequence[Any] | None: ...
    @property
    def dynamic_error(self) -> Sequence[Any] | None: ...
    @property
    def dynamic_steps(self) -> Mapping[str, Any] | None: ...


def seed_row_errors(runs: Sequence[ScoredRows | None], kind: str = "static"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(error per seed and test row, seeds x rows; prompt ids; true lengths), or None when the
    runs do not record row identities (written before they did) or disagree on the rows.

    `kind` "static": |L̂ - L| (right-censored rows scored as in the metrics); "dynamic": the
    request's mean remaining-length error (NaN where a request has no scored step).
    """
    errors, ids, true = [], None, None
    for p in runs:
        if p is None or p.prompt_id is None or (kind == "dynamic" and p.dynamic_error is None):
            return None
        t = np.asarray(p.true, dtype=np.float64)
        if ids is None:
            ids, true = list(p.prompt_id), t
        elif list(p.prompt_id) != ids or not np.array_equal(t, true):
            return None
        if kind == "static":
            cens = np.asarray(p.censored or np.zeros(t.size), dtype=bool)
            errors.append(np.abs(censored_error(np.asarray(p.pred, dtype=np.float64), t,
                                                cens)))
        else:
            errors.append(np.array([np.nan if e is None else e for e in p.dynamic_error],
                                   dtype=np.float64))
    if ids is None:
        return None
    return np.stack(errors), np.asarray(ids), true


def row_errors(runs: Sequence[ScoredRows | None], kind: str = "static"
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(mean error over seeds per test row, prompt ids, true lengths): `seed_row_errors`
    averaged over the seeds."""
    found = seed_row_errors(runs, kind)
    return None if found is None else (found[0].mean(axis=0), found[1], found[2])


def paired_rows(runs: Sequence[ScoredRows | None], reference: Sequence[ScoredRows | None],
                kind: str = "static", n_boot: int = 1000, ci: float = 0.95
                ) -> dict[str, Any] | None:
    """`metrics.paired_difference` of this predictor's errors against the reference's, seed by
    seed on the rows both score, or None when the two cannot be paired."""
    mine, ref = seed_row_errors(runs, kind), seed_row_errors(reference, kind)
    if mine is None or ref is None or len(mine[1]) != len(ref[1]) or \
            not np.array_equal(mine[1], ref[1]) or not np.array_equal(mine[2], ref[2]):
        return None
    both = np.isfinite(mine[0]).all(axis=0) & np.isfinite(ref[0]).all(axis=0)
    if not both.any():
        return None
    return paired_difference(mine[0][:, both], ref[0][:, both], mine[1][both], n_boot=n_boot,
                             ci=ci)


def gain_split(runs: Sequence[ScoredRows | None], reference: Sequence[ScoredRows | None]
               ) -> tuple[float, float] | None:
    """The reference's MAE minus this predictor's (errors averaged over seeds row by row), split
    into what the rows that ended before the cap and the censored rows contribute: (ended,
    censored), in tokens per test row, summing to the whole gain. None where the two cannot be
    paired or the rows record no censoring."""
    mine, ref = row_errors(runs), row_errors(reference)
    first = next((p for p in runs if p is not None), None)
    if mine is None or ref is None or first is None or first.censored is None or \
            not np.array_equal(mine[1], ref[1]) or not np.array_equal(mine[2], ref[2]):
        return None
    gain = ref[0] - mine[0]
    cens = np.asarray(first.censored, dtype=bool)
    n = gain.size
    return float(gain[~cens].sum() / n), float(gain[cens].sum() / n)


def paired_cell(runs: Sequence[ScoredRows | None], reference: Sequence[ScoredRows | None],
                kind: str = "static", n_boot: int = 1000, ci: float = 0.95) -> str:
    """This predictor's error, over its runs' scored rows, minus the reference's, as
    `delta_text` writes it, or a dash when the two cannot be paired."""
    d = paired_rows(runs, reference, kind, n_boot, ci)
    return DASH if d is None else delta_text(d)


PROMPTS_ONLY = "°"  # a side with one seed: the interval covers the prompts, not the training


def _fewest_seeds(d: Mapping[str, Any], trained_reference: bool) -> int:
    seeds = list(d.get("seeds") or (2, 2))
    return min(seeds if trained_reference else seeds[:1])


def separated(d: Mapping[str, Any], trained_reference: bool = True) -> bool:
    """The tables' rule for a paired difference shown in bold: its interval excludes 0 and both
    sides have several seeds (only this side where the reference is not trained, as the
    siblings' distribution is not). With one seed a side, the interval covers how the prompts
    were drawn but not how the training went, so it cannot tell a better predictor from a lucky
    fit."""
    return bool(d.get("excludes_zero")) and _fewest_seeds(d, trained_reference) >= 2


def delta_text(d: Mapping[str, Any], trained_reference: bool = True) -> str:
    """"+1.3 [+0.4, +2.2]" (a `metrics.paired_difference`), bold where `separated`, marked °
    where a side has one seed (its interval covers the prompts only)."""
    mean = f"{d['mean']:+.1f}"
    mark = PROMPTS_ONLY if _fewest_seeds(d, trained_reference) == 1 else ""
    if d.get("ci") is None:
        return mean + mark
    lo, hi = d["ci"]
    bold = separated(d, trained_reference)
    return f"{f'**{mean}**' if bold else mean} [{lo:+.1f}, {hi:+.1f}]{mark}"


def choose_reference(names: Sequence[str], wanted: str = DEFAULT_REFERENCE) -> str | None:
    """The reference predictor of a table: `wanted` if it is there, else the constant."""
    for name in (wanted, FALLBACK_REFERENCE):
        if name in names:
            return name
    return None


def step_errors_by_row(runs: Sequence[ScoredRows | None]
                       ) -> tuple[np.ndarray, list[int], np.ndarray, np.ndarray] | None:
    """(seeds x rows x listed steps error, the listed t, prompt ids, true lengths) from the
    runs' `dynamic_steps`, or None when a run lacks them or the runs disagree on the rows or the
    steps. An entry is NaN where a run has no scored step there."""
    out, ts, ids, true = [], None, None, None
    for p in runs:
        steps = None if p is None else getattr(p, "dynamic_steps", None)
        if p is None or p.prompt_id is None or not isinstance(steps, Mapping):
            return None
        t = [int(x) for x in steps.get("t") or []]
        err = np.array([[np.nan if v is None else float(v) for v in row]
                        for row in steps.get("error") or []], dtype=np.float64)
        rows_true = np.asarray(p.true, dtype=np.float64)
        if err.shape != (rows_true.size, len(t)):
            return None
        if ts is None:
            ts, ids, true = t, list(p.prompt_id), rows_true
        elif t != ts or list(p.prompt_id) != ids or not np.array_equal(rows_true, true):
            return None
        out.append(err)
    if ts is None:
        return None
    return np.stack(out), ts, np.asarray(ids), true


def step_population(true: np.ndarray, ts: Sequence[int], *errors: np.ndarray
                    ) -> tuple[int, np.ndarray] | None:
    """(T, rows): the one population every column of a step table covers. T is the largest
    listed t that at least half of the rows outlive (`metrics.dynamic_metrics`'s fixed
    population); the rows are those longer than T that have an error at every listed t <= T
    in each of `errors`. None when no listed t qualifies."""
    reach = [t for t in ts if (true > t).sum() * 2 >= true.size]
    if not reach:
        return None
    t_max = max(reach)
    cols = [j for j, t in enumerate(ts) if t <= t_max]
    rows = true > t_max
    for err in errors:
        rows &= np.isfinite(err[:, cols]).all(axis=1)
    return t_max, rows


def paired_steps(runs: Sequence[ScoredRows | None], reference: Sequence[ScoredRows | None],
                 n_boot: int = 1000, ci: float = 0.95) -> dict[str, Any] | None:
    """This predictor's remaining-length error minus the reference's at each listed t up to T,
    on one population (`step_population`, the same rows for both and for every t, scored by
    every seed), each with a paired bootstrap interval over prompts and seeds
    (`paired_difference`), and the reference's own error there (mean over its seeds); None when
    the two cannot be paired or no population exists."""
    mine, ref = step_errors_by_row(runs), step_errors_by_row(reference)
    if mine is None or ref is None or mine[1] != ref[1] or \
            not np.array_equal(mine[2], ref[2]) or not np.array_equal(mine[3], ref[3]):
        return None
    seeds_a, ts, ids, true = mine
    seeds_b = ref[0]
    # a seed's NaN makes the row's mean NaN, so the population is scored by every seed
    err_a, err_b = seeds_a.mean(axis=0), seeds_b.mean(axis=0)
    found = step_population(true, ts, err_a, err_b)
    if found is None or not found[1].any():
        return None
    t_max, rows = found
    cells, ref_mae = [], []
    for j, t in enumerate(ts):
        if t > t_max:
            break
        cells.append(paired_difference(seeds_a[:, rows, j], seeds_b[:, rows, j], ids[rows],
                                       n_boot=n_boot, ci=ci))
        ref_mae.append(float(err_b[rows, j].mean()))
    return {"t": [t for t in ts if t <= t_max], "t_max": int(t_max), "rows": rows,
            "n_requests": int(rows.sum()), "n_prompts": int(np.unique(ids[rows]).size),
            "reference_mae": ref_mae, "cells": cells}
