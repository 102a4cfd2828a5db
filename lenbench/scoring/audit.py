"""The audit of what was scored: a fresh copy of the fitted predictor must reproduce the scored
predictions on a random share of the test rows whose forbidden parts are changed.

The harness records, for every scored call (`predict`, `predict_variants`,
`predict_distribution` on the static view; `predict_remaining`, `predict_remaining_distribution`
on the dynamic view), the random state it started from, what it returned and how long it took
(`ScoredRecord`), and keeps a copy of the predictor as `fit` left it. The audit then:

1. draws rows of the scored split from its own random stream (lenbench/scoring/audit_plan.py:
   enough rows to catch a leak on 3% of rows with probability 0.95, at most a quarter of the
   split's rows and steps) and builds a view of them with each row changed after a cut step c,
   in its view and in the feature store (lenbench/scoring/causality.py);
2. deep-copies the fitted state, with the changed store in place of the real one wherever the
   copy holds it (so a store kept from `fit` shows the changes too; the target model and the
   views are shared, never copied), and replays the scored calls in their order on that copy,
   each from the random state its scored call started from, on the changed view (static
   methods on its static view). A call that raises leaves the next one a new copy;
3. compares each result with what the scored call returned for those rows (before the harness
   clipped it): every static value, and the dynamic values at steps t <= c, must agree within
   `rtol` and `atol` (tokens; 1e-6 for histogram probabilities). Quantile levels and histogram
   edges must be the same.

So a prediction that depends on anything the protocol forbids at its step (the response after
y_{t+1}, the number of tokens or steps of a row, later states or entropies, another row's
future), on the other rows of the view, on the audit's view being a copy, or on state left by
calls the scored pass did not make, is caught when it moves a value of a drawn row. A predictor
fails when any method fails or raises; the result records each method's comparison, the rows
drawn, the power reached and the audit's cost next to the scored prediction's.
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
from lenbench.scoring.audit_plan import (
    LEAK_SHARE,
    MAX_EXTRA_COST,
    POWER_TARGET,
    audit_rng,
    draw_rows,
    new_audit_seed,
    power_against,
    rows_for_power,
)
from lenbench.scoring.causality import Perturbation, perturb, steps_per_row

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


def fresh_copy(predictor: Predictor, shared=(), substitutes=()) -> Predictor:
    """A deep copy of `predictor` that shares, instead of copying, the objects in `shared` (views,
    the feature store, the target model and its tokenizer) and any tensor of the predictor that
    lives in the target model's memory (a draft's frozen embedding), and that holds, wherever the
    predictor holds an object of the (original, substitute) pairs `substitutes`, its substitute."""
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
    for original, substitute in substitutes:
        keep.append(original)
        memo[id(original)] = substitute
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
    starting random state, output and duration: what `audit_scored` replays and compares with."""

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
        self.call_seconds: dict[str, float] = {}
        self.seconds = time.perf_counter() - t0

    def call(self, method: str, view):
        """`predictor.<method>(view)`, recorded; returns what the predictor returned."""
        state = random_state()
        t0 = time.perf_counter()
        out = getattr(self.predictor, method)(view)
        self.call_seconds[method] = time.perf_counter() - t0
        self.calls[method] = (state, copy.deepcopy(out))
        return out

    @property
    def scored_seconds(self) -> float:
        """The time the scored calls took, together."""
        return float(sum(self.call_seconds.values()))

    def probe(self, substitutes=()) -> Predictor:
        """A fresh copy of the fitted state, holding `substitutes` (`fresh_copy`)."""
        if self._fitted is None:
            return copy.copy(self.predictor)
        return fresh_copy(self._fitted, self.shared, substitutes)

    def release(self) -> None:
        """Drop the kept copy of the fitted state (after the audit)."""
        self._fitted = None


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


def _compare(method: str, scored, again, at0: np.ndarray, at1: np.ndarray, n_expected: int,
             rtol: float, atol: float) -> dict[str, dict[str, Any]]:
    """Per part of the output, the comparison of the scored values at `at0` with the audit's at
    `at1` (the same rows, or steps, in the same order)."""
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
        a, b = a[at0], b[at1]
        tol = atol if unit == "tokens" else PROBABILITY_ATOL
        bad = ~np.isclose(a, b, rtol=rtol, atol=tol, equal_nan=True).all(axis=1)
        diff = np.abs(a - b)
        out[name] = {"passed": not bad.any(), "compared": int(len(a)), "unit": unit,
                     "max_abs_change": float(np.nanmax(diff)) if diff.size
                     and not np.isnan(diff).all() else 0.0, "moved": int(bad.sum())}
    return out


def _substitutes(record: ScoredRecord, view: SplitView, pert: Perturbation) -> list[tuple]:
    """The changed store in place of the real one, and of each recorded view that holds it."""
    store = view._features
    if pert.store is None or store is None:
        return []
    pairs: list[tuple] = [(store, pert.store)]
    for obj in record.shared:
        if isinstance(obj, SplitView) and obj._features is store:
            changed = copy.copy(obj)
            changed.__dict__.pop("steps", None)  # a cached Steps reads the real store
            changed._features = pert.store
            pairs.append((obj, changed))
    return pairs


def _replay(method: str, probe: Predictor, record: ScoredRecord, view: SplitView,
            pert: Perturbation, static_view, rtol: float, atol: float):
    """One scored call replayed on the changed rows, and its comparison; (entries, seconds)."""
    state, scored = record.calls[method]
    dynamic = method in DYNAMIC_METHODS
    t0 = time.perf_counter()
    with replayed(state):
        again = getattr(probe, method)(pert.view if dynamic else static_view)
    seconds = time.perf_counter() - t0
    if not dynamic:
        return _compare(method, scored, again, pert.rows, np.arange(len(pert.rows)),
                        len(pert.rows), rtol, atol), seconds
    s0, s1 = view.steps, pert.view.steps
    at0 = np.flatnonzero(pert.fixed_scored(s0.row, s0.t))
    at1 = np.flatnonzero(pert.fixed(s1.row, s1.t))
    if not np.array_equal(s0.t[at0], s1.t[at1]):
        raise RuntimeError("the kept steps of the changed rows do not line up with the scored "
                           "ones")
    return _compare(method, scored, again, at0, at1, len(s1), rtol, atol), seconds


def audit_scored(record: ScoredRecord, view: SplitView, needs: Needs,
                 audit_seed: int | None = None, n_rows: int | None = None, rtol: float = 1e-4,
                 atol: float = 1e-3) -> dict[str, Any]:
    """Replay every call in `record` on changed rows of `view` (the scored split) with a fresh
    copy of the fitted predictor, and compare with the scored outputs (module docstring).
    `audit_seed` seeds the audit's random stream (fresh when None; recorded); `n_rows` checks
    that many rows instead of the planned number. Returns {"passed", "methods", "failed",
    "checked_rows", "power", "extra_cost", ...}; releases the record's copy."""
    t0 = time.perf_counter()
    seed = new_audit_seed() if audit_seed is None else int(audit_seed)
    rng = audit_rng(seed)
    methods = list(record.calls)  # in the order they were scored
    draw = draw_rows(steps_per_row(view), rng, any(m in DYNAMIC_METHODS for m in methods),
                     n_rows=n_rows)
    pert = perturb(view, draw.rows, rng)
    new_length = int((pert.new_length != pert.old_length).sum())
    out: dict[str, Any] = {
        "passed": True, "rule": "scored outputs reproduced on a random share of the test rows, "
        "perturbed after a cut step (lenbench/scoring/audit.py)", "n_rows": len(view),
        "checked_rows": len(pert.rows), "share": len(pert.rows) / max(len(view), 1),
        "steps_share": draw.steps_share, "rows_with_new_length": new_length,
        "leak_share": LEAK_SHARE, "power": power_against(new_length),
        "power_target": POWER_TARGET, "rows_for_power": rows_for_power(),
        "limited_by": draw.limited_by, "max_extra_cost": MAX_EXTRA_COST, "audit_seed": seed,
        "cut_steps": [int(c) for c in pert.cuts], "fresh_copies": record._fitted is not None,
        "rtol": rtol, "atol": atol, "methods": {}, "failed": [], "steps_compared": 0,
        "max_abs_change": 0.0}
    if record.copy_error:
        out["copy_error"] = record.copy_error
    static_view = pert.view.static_view(needs) if set(methods) & set(STATIC_METHODS) else None
    substitutes = _substitutes(record, view, pert)
    probe, repredict = None, 0.0
    for method in methods:
        try:
            if probe is None:
                probe = record.probe(substitutes)
            entries, seconds = _replay(method, probe, record, view, pert, static_view, rtol,
                                       atol)
            repredict += seconds
        except Exception as exc:  # noqa: BLE001 - a predictor that breaks on the view fails
            entries = {method: {"passed": False, "error": f"{type(exc).__name__}: {exc}"}}
            probe = None  # the next call starts from the fitted state again
        for name, entry in entries.items():
            out["methods"][name] = entry
            if not entry["passed"]:
                out["failed"].append(name)
            if entry.get("unit") == "tokens":
                out["max_abs_change"] = max(out["max_abs_change"], entry["max_abs_change"])
            if method in DYNAMIC_METHODS and "compared" in entry:
                out["steps_compared"] = max(out["steps_compared"], entry["compared"])
    del probe
    record.release()
    out["passed"] = not out["failed"]
    errors = [f"{name}: {e['error']}" for name, e in out["methods"].items() if "error" in e]
    if errors:
        out["error"] = "; ".join(errors)
    scored = record.scored_seconds
    out["seconds"] = record.seconds + time.perf_counter() - t0
    out.update(scored_seconds=scored, repredict_seconds=repredict,
               extra_cost=out["seconds"] / scored if scored > 0 else None,
               repredict_cost=repredict / scored if scored > 0 else None)
    log.info("audit: %d of %d test rows changed (%.1f%%; %s), power %.3f against a leak on "
             "%.0f%% of rows, %.2f s (%s of the prediction time): %s", len(pert.rows), len(view),
             100 * out["share"], draw.limited_by, out["power"], 100 * LEAK_SHARE, out["seconds"],
             "n/a" if out["extra_cost"] is None else f"{100 * out['extra_cost']:.0f}%",
             "passed" if out["passed"] else f"failed ({', '.join(out['failed'])})")
    return out


def scored_methods(predictor: Predictor) -> list[str]:
    """The methods the harness scores for this predictor, in the order it scores them."""
    return ["predict", "predict_variants",
            *(["predict_distribution"] if predictor.distributional else []),
            *(["predict_remaining_distribution"] if predictor.dynamic_distributional else []),
            *(["predict_remaining"] if predictor.dynamic else [])]


def scored_record(predictor: Predictor, view: SplitView) -> tuple[ScoredRecord, SplitView]:
    """Score a fitted `predictor` on `view` as the harness does (each method it scores, on the
    whole split, in the harness's order), on a copy that shares the view's feature store and
    target; returns the record and the dynamic view it was scored on."""
    hidden = view.hide_labels()
    static = view.static_view(predictor.needs)
    shared = (view, hidden, static, view._features, view.target)
    record = ScoredRecord(fresh_copy(predictor, shared), shared)
    for method in scored_methods(predictor):
        record.call(method, hidden if method in DYNAMIC_METHODS else static)
    return record, hidden


def audit_causality(predictor: Predictor, view: SplitView, n_rows: int | None = None,
                    audit_seed: int | None = None, rtol: float = 1e-4,
                    atol: float = 1e-3) -> dict[str, Any]:
    """Score a fitted `predictor` on `view` (`scored_record`) and audit those calls
    (`audit_scored`). The random state is put back, so the predictor and the run are left as
    they were."""
    with replayed(random_state()):
        record, hidden = scored_record(predictor, view)
        return audit_scored(record, hidden, predictor.needs, audit_seed, n_rows, rtol, atol)
