"""The audit of what was scored: fresh copies of the fitted predictor must reproduce the scored
predictions on a full-size copy of the test split whose forbidden parts are changed.

The harness records, for every scored call (`predict`, `predict_variants`,
`predict_distribution` on the static view; `predict_remaining`, `predict_remaining_distribution`
on the dynamic view), the random state it started from and what it returned (`ScoredRecord`),
and keeps a copy of the predictor as `fit` left it. The audit then:

1. builds one perturbed view of the whole scored split (lenbench/scoring/causality.py: up to
   `n_rows` seeded rows changed after a cut step c, every other row as it was, the split's size
   and sequence lengths kept);
2. for each recorded method, deep-copies the fitted state (so nothing a scored call stored on the
   predictor can reach the audit, and no audit call sees another's), restores the random state
   the scored call started from, and calls the method on the perturbed view (static methods on
   its static view);
3. compares the result with what the scored call returned (before the harness clipped it):
   every value of an unchanged row, and of a changed row the static values and the dynamic
   values at steps t <= c, must agree within `rtol` and `atol` (tokens; 1e-6 for histogram
   probabilities). Quantile levels and histogram edges must be the same.

So a prediction that depends on anything the protocol forbids at its step (the response after
y_{t+1}, the number of tokens or steps of a row, later states or entropies, another row's
future), on the size of the view, on the audit's view being a copy, or on state a previous call
left on the predictor, is caught when it moves a scored value. A predictor fails when any
method fails or raises; the result records each method's comparison. Cost: one extra call of
each scored method on the full split, one deep copy of the predictor per call (the target
model, the feature store and the views are shared, never copied), and the perturbation of
`n_rows` rows.
"""

from __future__ import annotations

import copy
import logging
import random
import time
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from lenbench.contract.distributions import LengthDistribution
from lenbench.contract.needs import Needs, TargetModel
from lenbench.contract.predictor import Predictor
from lenbench.contract.views import SplitView
from lenbench.scoring.causality import perturb

log = logging.getLogger(__name__)

STATIC_METHODS = ("predict", "predict_variants", "predict_distribution")
DYNAMIC_METHODS = ("predict_remaining", "predict_remaining_distribution")
PROBABILITY_ATOL = 1e-6  # histogram probabilities are compared with this atol, not tokens'


def random_state() -> dict[str, Any]:
    """The global random states (Python, NumPy, torch, and CUDA once it is in use)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(),
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_random_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        torch.cuda.set_rng_state_all(state["cuda"])


@contextmanager
def replayed(state: dict[str, Any]):
    """Run with the global random states set to `state`, then put the run's states back."""
    saved = random_state()
    _set_random_state(state)
    try:
        yield
    finally:
        _set_random_state(saved)


def _tensors(obj, seen: set[int], depth: int = 0):
    """The tensors a predictor holds in its modules, containers and nested predictors."""
    if id(obj) in seen or depth > 8:
        return
    seen.add(id(obj))
    if isinstance(obj, torch.nn.Module):
        yield from obj.parameters()
        yield from obj.buffers()
    elif isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _tensors(value, seen, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            yield from _tensors(value, seen, depth + 1)
    elif isinstance(obj, Predictor):
        for value in vars(obj).values():
            yield from _tensors(value, seen, depth + 1)


def fresh_copy(predictor: Predictor, shared=()) -> Predictor:
    """A deep copy of `predictor` that shares, instead of copying, the objects in `shared` (views,
    the feature store, the target model and its tokenizer) and any tensor of the predictor that
    lives in the target model's memory (a draft's frozen embedding)."""
    memo: dict[Any, Any] = {}
    keep = []
    for obj in shared:
        if obj is None:
            continue
        keep.append(obj)
        memo[id(obj)] = obj
        if isinstance(obj, TargetModel):
            for part in (obj.model, obj.tokenizer):
                if part is not None:
                    keep.append(part)
                    memo[id(part)] = part
    models = [m for m in keep if isinstance(getattr(m, "model", m), torch.nn.Module)]
    storages = memo.setdefault("torch", {})
    pointers = set()
    for model in {id(m): m for m in (getattr(x, "model", x) for x in models)}.values():
        for tensor in (*model.parameters(), *model.buffers()):
            memo[id(tensor)] = tensor
            storage = tensor.untyped_storage()
            storages[storage._cdata] = storage
            pointers.add(storage.data_ptr())
    if pointers:
        for tensor in _tensors(predictor, set()):
            if tensor.untyped_storage().data_ptr() in pointers:
                memo[id(tensor)] = tensor
    memo[id(memo)] = keep  # deepcopy's keep-alive list
    return copy.deepcopy(predictor, memo)


class ScoredRecord:
    """A fitted predictor's state, kept before its first scored call, and each scored call's
    starting random state and output: what `audit_scored` replays and compares with."""

    def __init__(self, predictor: Predictor, shared=()):
        t0 = time.perf_counter()
        self.predictor, self.shared = predictor, tuple(shared)
        self.copy_error: str | None = None
        try:
            self._fitted: Predictor | None = fresh_copy(predictor, self.shared)
        except Exception as exc:  # noqa: BLE001 - recorded: the audit then copies shallowly
            self._fitted = None
            self.copy_error = f"{type(exc).__name__}: {exc}"
            log.warning("the fitted predictor cannot be deep-copied (%s): its audit re-predicts "
                        "with shallow copies of its state after scoring", self.copy_error)
        self.calls: dict[str, tuple[dict[str, Any], Any]] = {}
        self.seconds = time.perf_counter() - t0

    def call(self, method: str, view):
        """`predictor.<method>(view)`, recorded; returns what the predictor returned."""
        state = random_state()
        out = getattr(self.predictor, method)(view)
        self.calls[method] = (state, copy.deepcopy(out))
        return out

    def probe(self, last: bool) -> Predictor:
        """A fresh copy of the fitted state (the kept copy itself for the `last` call)."""
        if self._fitted is None:
            return copy.copy(self.predictor)
        if last:
            probe, self._fitted = self._fitted, None
            self.copy_error = "released"
            return probe
        return fresh_copy(self._fitted, self.shared)


def _parts(out) -> dict[str, tuple[tuple, np.ndarray, str]]:
    """What a method returned as {part: (form, values [n, k], unit)}."""
    if isinstance(out, dict):
        return {f".{k}": v for k, value in out.items() for v in _parts(value).values()}
    if isinstance(out, LengthDistribution):
        if out.is_histogram:
            return {"": (("histogram", *np.round(out.edges, 9)), out.probs, "probability")}
        return {"": (("quantiles", *np.round(out.levels, 9)), out.values, "tokens")}
    values = np.asarray(out, dtype=np.float64)
    return {"": ((), values.reshape(len(values), -1) if values.ndim else values.reshape(1, 1),
                 "tokens")}


def _compare(method: str, scored, again, rows0: np.ndarray, rows1: np.ndarray,
             changed_row: np.ndarray, n_expected: int, rtol: float, atol: float
             ) -> dict[str, dict[str, Any]]:
    """Per part of the output, the comparison of the scored values at `rows0` with the audit's
    at `rows1` (`changed_row`: whether each compared value belongs to a perturbed row)."""
    first, second = _parts(scored), _parts(again)
    if set(first) != set(second):
        return {method: {"passed": False, "error": f"returned parts {sorted(second)} where the "
                         f"scored call returned {sorted(first)}"}}
    out = {}
    for part, (form, a, unit) in first.items():
        form2, b, _ = second[part]
        name = f"{method}{part}"
        if len(b) != n_expected or form != form2 or a.shape[1:] != b.shape[1:]:
            out[name] = {"passed": False, "error": f"returned {b.shape} values of form {form2[:1]} "
                         f"where the scored call returned {a.shape} of form {form[:1]} "
                         f"({n_expected} expected)"}
            continue
        a, b = a[rows0], b[rows1]
        tol = atol if unit == "tokens" else PROBABILITY_ATOL
        bad = ~np.isclose(a, b, rtol=rtol, atol=tol, equal_nan=True).all(axis=1)
        diff = np.abs(a - b)
        out[name] = {"passed": not bad.any(), "compared": int(len(a)), "unit": unit,
                     "max_abs_change": float(np.nanmax(diff)) if diff.size
                     and not np.isnan(diff).all() else 0.0,
                     "changed_values": {"perturbed_rows": int((bad & changed_row).sum()),
                                        "other_rows": int((bad & ~changed_row).sum())}}
    return out


def audit_scored(record: ScoredRecord, view: SplitView, needs: Needs, n_rows: int = 16,
                 seed: int = 0, rtol: float = 1e-4, atol: float = 1e-3) -> dict[str, Any]:
    """Replay every call in `record` on a perturbed full-size copy of `view` (the scored split)
    with fresh copies of the fitted predictor, and compare with the scored outputs (module
    docstring). Returns {"passed", "methods", "failed", "checked_rows", ...}; use it once."""
    t0 = time.perf_counter()
    pert = perturb(view, n_rows, seed)
    out: dict[str, Any] = {
        "passed": True, "rule": "scored outputs reproduced on a full-size view with rows "
        "perturbed after a cut step (lenbench/scoring/audit.py)", "n_rows": len(view),
        "checked_rows": len(pert.rows),
        "rows_with_new_length": int((pert.new_length != pert.old_length).sum()),
        "cut_steps": [int(c) for c in pert.cuts], "fresh_copies": record._fitted is not None,
        "rtol": rtol, "atol": atol, "methods": {}, "failed": [], "steps_compared": 0,
        "max_abs_change": 0.0}
    if record.copy_error:
        out["copy_error"] = record.copy_error
    methods = [m for m in (*STATIC_METHODS, *DYNAMIC_METHODS) if m in record.calls]
    changed = np.zeros(len(view), dtype=bool)
    changed[pert.rows] = True
    static_view = pert.view.static_view(needs) if set(methods) & set(STATIC_METHODS) else None
    for k, method in enumerate(methods):
        state, scored = record.calls[method]
        try:
            probe = record.probe(last=k == len(methods) - 1)
            dynamic = method in DYNAMIC_METHODS
            with replayed(state):
                again = getattr(probe, method)(pert.view if dynamic else static_view)
            del probe
            if dynamic:
                s0, s1 = view.steps, pert.view.steps
                rows0 = np.flatnonzero(pert.fixed(s0.row, s0.t))
                rows1 = np.flatnonzero(pert.fixed(s1.row, s1.t))
                entries = _compare(method, scored, again, rows0, rows1, changed[s0.row[rows0]],
                                   len(s1), rtol, atol)
            else:
                every = np.arange(len(view))
                entries = _compare(method, scored, again, every, every, changed, len(view),
                                   rtol, atol)
        except Exception as exc:  # noqa: BLE001 - a predictor that breaks on the view fails
            entries = {method: {"passed": False, "error": f"{type(exc).__name__}: {exc}"}}
        for name, entry in entries.items():
            out["methods"][name] = entry
            if not entry["passed"]:
                out["failed"].append(name)
            if entry.get("unit") == "tokens":
                out["max_abs_change"] = max(out["max_abs_change"], entry["max_abs_change"])
            if method in DYNAMIC_METHODS and "compared" in entry:
                out["steps_compared"] = max(out["steps_compared"], entry["compared"])
    out["passed"] = not out["failed"]
    errors = [f"{name}: {e['error']}" for name, e in out["methods"].items() if "error" in e]
    if errors:
        out["error"] = "; ".join(errors)
    out["seconds"] = record.seconds + time.perf_counter() - t0
    return out


def scored_methods(predictor: Predictor) -> list[str]:
    """The methods the harness scores for this predictor."""
    return ["predict", "predict_variants",
            *(["predict_distribution"] if predictor.distributional else []),
            *(["predict_remaining"] if predictor.dynamic else []),
            *(["predict_remaining_distribution"] if predictor.dynamic_distributional else [])]


def audit_causality(predictor: Predictor, view: SplitView, n_rows: int = 16, seed: int = 0,
                    rtol: float = 1e-4, atol: float = 1e-3) -> dict[str, Any]:
    """Score a fitted `predictor` on `view` as the harness does (each method it scores, on the
    whole split) and audit those calls (`audit_scored`). The scoring runs on a copy, and the
    random state is put back, so the predictor and the run are left as they were."""
    hidden = view.hide_labels()
    static = view.static_view(predictor.needs)
    with replayed(random_state()):
        record = ScoredRecord(fresh_copy(predictor))
        for method in scored_methods(predictor):
            record.call(method, hidden if method in DYNAMIC_METHODS else static)
        return audit_scored(record, hidden, predictor.needs, n_rows, seed, rtol, atol)
