"""Causality audit of dynamic predictors: the estimate at step t must not read the future.

`predict_remaining(split)` gets the dynamic view of the scored split (lenbench/inputs.py), which
holds the whole true response because the protocol walks it step by step. Reading it causally is
the predictor's duty; this module checks it instead of assuming it.

What the dynamic protocol allows at step t (t tokens generated, L - t remaining, n prompt tokens):

* the static view's prompt side: prompts, prompt token ids and lengths, group ids, families,
  y_1, the pooled prompt states `hidden(role, pooling)`, the target model;
* the response tokens y_1 .. y_{t+1}, i.e. `sequence_token_ids(i)[:n + t + 1]`. y_{t+1} is
  allowed because it has been sampled from the logits at position n-1+t, and a draft model at step
  t reads it (OUTLETS/EAGLE-3: "the draft reads y_{t+1}");
* the step states of steps t' <= t (`steps.hidden`: the state at position n-1+t', or the entropy
  pool over positions 0..n-1+t'), and the pairing of each step with its row and t;
* the per-token entropy at positions 0 .. n-1+t (`entropy(i)[:n + t]`).

Nothing else: not y_{t+2} onwards, not the states of steps after t, not the entropy at positions
n+t onwards, and not the row's number of response tokens or of steps (that is L).

The audit (`audit_causality`): draw up to `n_rows` rows of the view that have steps (fixed seed)
and a cut step c per row among its steps; build a perturbed view of those rows in which all that
is not allowed at step c is changed:

* response tokens after y_{c+1} are replaced by other tokens (drawn from the rows' own tokens,
  each different from the one it replaces) and the response length is changed (L' != L, at least
  c + 1 and at most the sample's longest sequence, so no sequence grows past what the predictor
  already handled; the sample's longest row keeps its length, so padded batch shapes stay the
  same); the steps after c follow the new length (their number changes with it);
* the step states of steps after c are Gaussian noise with the per-dimension mean and std of the
  sampled rows' step states (every role and pooling the features stage holds);
* the entropy at positions n+c onwards is uniform noise.

Prompt side, y_1 .. y_{c+1}, the states of steps <= c and the entropy at positions < n+c are
copied unchanged. The predictor (a shallow copy, so that state it keeps about the scored split is
not overwritten) predicts the unperturbed and the perturbed rows with the same random seed, and
its estimates at steps t <= c must agree (`np.allclose`, rtol 1e-4, atol 1e-3 tokens by default).
"""

from __future__ import annotations

import copy
import logging
import random
from contextlib import contextmanager
from typing import Any

import numpy as np
import pandas as pd
import torch

from lenbench.inputs import SplitView
from lenbench.predictor import Predictor

log = logging.getLogger(__name__)


class _MemoryStore:
    """A FeatureStore look-alike over in-memory arrays (the perturbed rows' features)."""

    def __init__(self, meta: dict, static: dict, steps: dict, step_index: np.ndarray,
                 entropy: list[np.ndarray]):
        self.meta = meta
        self._static, self._steps, self._index = static, steps, step_index
        self._entropy = entropy
        counts = np.bincount(step_index[:, 0], minlength=len(entropy)) if len(step_index) \
            else np.zeros(len(entropy), dtype=np.int64)
        self.step_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.token_offsets = np.concatenate([[0], np.cumsum([len(e) for e in entropy])])

    def static(self, role: str, pooling: str) -> np.ndarray:
        if (role, pooling) not in self._static:
            raise KeyError(f"features for role={role!r} pooling={pooling!r} were not extracted")
        return self._static[(role, pooling)]

    def steps(self, role: str, pooling: str = "last") -> np.ndarray:
        if (role, pooling) not in self._steps:
            raise KeyError(f"step features for role={role!r} pooling={pooling!r} were not "
                           "extracted")
        return self._steps[(role, pooling)]

    def step_index(self) -> np.ndarray:
        return self._index

    def entropy(self, row: int) -> np.ndarray:
        return self._entropy[row].copy()


def _available(store, kind: str) -> list[tuple[str, str]]:
    """The (role, pooling) pairs the store holds, static or step."""
    meta = store.meta
    if kind == "static":
        pairs, read = [(r, p) for r in meta.get("roles", []) for p in meta.get("poolings", [])], \
            store.static
    else:
        pairs, read = [(r, p) for r in meta.get("step_roles", [])
                       for p in meta.get("step_poolings", ["last"])], store.steps
    out = []
    for pair in pairs:
        try:
            read(*pair)
        except KeyError:
            continue
        out.append(pair)
    return out


@contextmanager
def _same_randomness(seed: int):
    """Seed every generator for one call, then restore their states (the run is unaffected)."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def _other_tokens(rng: np.random.Generator, pool: np.ndarray, original: np.ndarray,
                  size: int) -> np.ndarray:
    """`size` tokens from `pool`; where `original` has a token at that place, a different one."""
    out = pool[rng.integers(0, len(pool), size)]
    if len(pool) > 1:
        same = np.flatnonzero(out[: len(original)] == original[: len(out)])
        for k in same:  # the next pool token over: different by construction
            out[k] = pool[(np.searchsorted(pool, out[k]) + 1) % len(pool)]
    return out


def perturbed_views(view: SplitView, n_rows: int = 8, seed: int = 0
                    ) -> tuple[SplitView, SplitView, np.ndarray]:
    """(reference, perturbed, cut steps): the dynamic views of up to `n_rows` sampled rows, as
    they are and with everything after what step c allows changed (module docstring)."""
    store = view._features
    if store is None:
        raise ValueError("the causality audit needs the step features of the scored split")
    table, rows = view._table, view._rows
    offsets = store.step_offsets
    counts = offsets[rows + 1] - offsets[rows]
    rng = np.random.default_rng(seed)
    candidates = np.flatnonzero(counts > 0)
    pick = np.sort(rng.choice(candidates, min(n_rows, len(candidates)), replace=False))
    sub = table.iloc[pick].reset_index(drop=True)
    prompts = [np.asarray(p, dtype=np.int64) for p in sub["prompt_token_ids"]]
    responses = [np.asarray(r, dtype=np.int64) for r in sub["output_token_ids"]]
    lengths = [len(r) for r in responses]
    index = store.step_index()
    row_t = [np.asarray(index[offsets[g]: offsets[g + 1], 1], dtype=np.int64) for g in rows[pick]]
    cuts = np.array([int(rng.choice(ts)) for ts in row_t], dtype=np.int64)
    pool = np.unique(np.concatenate(prompts + responses)) if len(pick) else np.zeros(1, np.int64)
    width = max((len(p) + L for p, L in zip(prompts, lengths)), default=0)
    anchor = int(np.argmax([len(p) + L for p, L in zip(prompts, lengths)])) if len(pick) else -1
    stride = int(store.meta.get("step_stride", 1))

    static_pairs, step_pairs = _available(store, "static"), _available(store, "steps")
    # noise: per dimension, the mean and std of the sampled rows' step states (pooled over rows,
    # so a dimension that is constant within a row still gets noise at the scale rows differ by)
    spans = [np.arange(offsets[g], offsets[g + 1]) for g in rows[pick]]
    span = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
    scale = {}
    for pair in step_pairs:
        sample = np.asarray(store.steps(*pair)[span], dtype=np.float64)
        scale[pair] = (sample.mean(0), sample.std(0) + 1e-3 * (np.abs(sample).mean() + 1.0))
    new_resp, new_len, new_index, entropies = [], [], [], []
    new_steps: dict[tuple[str, str], list[np.ndarray]] = {pair: [] for pair in step_pairs}
    for j, g in enumerate(rows[pick]):
        n, L, c, ts = len(prompts[j]), lengths[j], int(cuts[j]), row_t[j]
        options = np.setdiff1d(np.arange(c + 1, width - n + 1), [L])
        L_new = L if j == anchor or not len(options) else int(rng.choice(options))
        tail = _other_tokens(rng, pool, responses[j][c + 1:], L_new - (c + 1))
        new_resp.append(np.concatenate([responses[j][: c + 1], tail]))
        new_len.append(L_new)
        keep = ts <= c
        later = np.arange(0, L_new, stride)
        later = later[later > c]
        new_index.append(np.stack([np.full(keep.sum() + len(later), j),
                                   np.concatenate([ts[keep], later])], 1))
        for pair in step_pairs:
            orig = np.asarray(store.steps(*pair)[offsets[g]: offsets[g + 1]], dtype=np.float32)
            noise = rng.normal(*scale[pair], (len(later), orig.shape[1]))
            new_steps[pair].append(np.concatenate([orig[keep], noise.astype(np.float32)]))
        ent = np.asarray(store.entropy(int(g)), dtype=np.float32)
        top = max(float(ent.max()) if len(ent) else 0.0, 1.0)  # nats
        entropies.append(np.concatenate([ent[: n + c], rng.uniform(
            0.0, top, n + L_new - (n + c)).astype(np.float32)]))

    hidden = {pair: np.asarray(store.static(*pair)[rows[pick]], dtype=np.float32)
              for pair in static_pairs}
    dim = hidden[static_pairs[0]].shape[1] if static_pairs else 0
    steps = {pair: np.concatenate(v) if v else np.zeros((0, dim), np.float32)
             for pair, v in new_steps.items()}
    step_index = np.concatenate(new_index).astype(np.int64) if new_index \
        else np.zeros((0, 2), dtype=np.int64)
    memory = _MemoryStore(dict(store.meta), hidden, steps, step_index, entropies)
    perturbed_table = sub.copy()
    perturbed_table["output_token_ids"] = pd.Series(new_resp, dtype=object)
    perturbed_table["L"] = np.asarray(new_len, dtype=np.int64)
    reference = view._copy(pick, labels_visible=False)
    perturbed = SplitView(view.name, perturbed_table, np.arange(len(pick)), memory, view.target,
                          labels_visible=False)
    return reference, perturbed, cuts


def audit_causality(predictor: Predictor, view: SplitView, n_rows: int = 8, seed: int = 0,
                    rtol: float = 1e-4, atol: float = 1e-3) -> dict[str, Any]:
    """Check that `predictor.predict_remaining` at step t ignores everything after y_{t+1}.

    `predictor` is fitted and dynamic; `view` is the scored split (labels visible or not). Returns
    {"checked_rows", "steps_compared", "rows_with_new_length", "cut_steps", "max_abs_change",
    "rtol", "atol", "passed"} (and "error" when a prediction raised). Costs two predictions of at
    most `n_rows` rows (the predictor's own models run on them).
    """
    reference, perturbed, cuts = perturbed_views(view, n_rows, seed)
    out: dict[str, Any] = {"checked_rows": len(cuts), "steps_compared": 0,
                           "rows_with_new_length": int(np.sum(
                               perturbed._table["L"].to_numpy()
                               != reference._table["L"].to_numpy())),
                           "cut_steps": [int(c) for c in cuts], "max_abs_change": 0.0,
                           "rtol": rtol, "atol": atol, "passed": True}
    if not len(cuts):
        return out
    probe = copy.copy(predictor)  # what predict_remaining stores on itself stays on the copy
    try:
        with _same_randomness(seed):
            before = np.asarray(probe.predict_remaining(reference), dtype=np.float64).reshape(-1)
        with _same_randomness(seed):
            after = np.asarray(probe.predict_remaining(perturbed), dtype=np.float64).reshape(-1)
    except Exception as exc:  # noqa: BLE001 - a predictor that breaks on the perturbed view fails
        return out | {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
    s0, s1 = reference.steps, perturbed.steps
    if before.shape[0] != len(s0) or after.shape[0] != len(s1):
        return out | {"passed": False, "error": "predict_remaining returned the wrong number of "
                      f"values ({before.shape[0]} for {len(s0)} steps, {after.shape[0]} for "
                      f"{len(s1)} steps)"}
    a, b = [], []
    for j, c in enumerate(cuts):
        a.append(before[(s0.row == j) & (s0.t <= c)])
        b.append(after[(s1.row == j) & (s1.t <= c)])
    a, b = np.concatenate(a), np.concatenate(b)
    diff = np.abs(a - b)
    out["steps_compared"] = len(a)
    out["max_abs_change"] = float(np.nanmax(diff)) if len(diff) and not np.isnan(diff).all() \
        else 0.0
    out["passed"] = bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
    return out
