"""What a prediction may read of the scored split, and a copy of the split that changes the rest.

`predict_remaining(split)` gets the dynamic view of the scored split
(lenbench/contract/views.py), which holds the whole true response because the protocol walks it
step by step. Reading it causally is the predictor's duty; lenbench/scoring/audit.py checks it
on the view this module builds.

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
n+t onwards, not the row's number of response tokens or of steps (that is L), and nothing of
another row beyond what that row's own steps allow. The static view (`predict`,
`predict_variants`, `predict_distribution`) allows the prompt side and y_1 only.

`perturb(view)` draws up to `n_rows` rows of the scored split (seeded) and a cut step c per row,
and returns a view of the *whole* split, every other row unchanged, in which those rows have
everything that step c does not allow changed:

* their response lengths are traded in pairs: two drawn rows with different sequence lengths
  n + L swap them (so L' != L for both), which leaves the split's multiset of sequence lengths,
  its longest sequence and (at stride 1) its number of steps as they were: a predictor that pads
  or sorts by length builds batches of the same shapes, so a causal one reproduces its numbers.
  A drawn row without a partner keeps its length (`Perturbation.new_length` says which);
* their response tokens after y_{c+1} are replaced by other tokens (drawn from the drawn rows'
  own tokens, each different from the one it replaces), up to the new length; the steps after c
  follow the new length (their number changes with it);
* their step states after c are Gaussian noise with the per-dimension mean and std of the drawn
  rows' step states (every role and pooling the features stage holds), and their entropies at
  positions n+c onwards are uniform noise.

Prompt side, y_1 .. y_{c+1}, the states of steps <= c and the entropies at positions < n+c are
copied unchanged. The changed rows' features live in memory, over the memory-mapped store
(`_Overlay`); nothing of the store is copied.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lenbench.contract.views import SplitView


@dataclass
class Perturbation:
    """A full-size dynamic view of the scored split with some rows changed after a cut step."""

    view: SplitView  # labels hidden; the same rows in the same order as the scored split
    rows: np.ndarray  # positions of the changed rows in the view
    cuts: np.ndarray  # per changed row, the cut step c
    old_length: np.ndarray  # per changed row, L
    new_length: np.ndarray  # per changed row, L'

    def fixed(self, row: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Mask of the (row, t) steps whose estimate the protocol fixes: every step of an
        unchanged row, and the steps t <= c of a changed one."""
        cut = np.full(len(self.view), np.iinfo(np.int64).max, dtype=np.int64)
        cut[self.rows] = self.cuts
        return np.asarray(t) <= cut[np.asarray(row, dtype=np.int64)]


class _Stacked:
    """Rows of a (memory-mapped) store array followed by rows held in memory, indexed like
    one array by an index array, a slice or an integer (optionally with a column key)."""

    def __init__(self, base, extra: np.ndarray):
        self._base, self._extra, self._n = base, extra, len(base)
        self.shape = (self._n + len(extra), *base.shape[1:])
        self.dtype = base.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key):
        rest = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        scalar = np.isscalar(key)
        if isinstance(key, slice):
            index = np.arange(*key.indices(len(self)))
        else:
            index = np.atleast_1d(np.asarray(key))
            if index.dtype == bool:
                index = np.flatnonzero(index)
        index = np.where(index < 0, index + len(self), index).astype(np.int64)
        out = np.empty((len(index), *self.shape[1:]), dtype=self.dtype)
        low = index < self._n
        if low.any():
            out[low] = self._base[index[low]]
        if (~low).any():
            out[~low] = self._extra[index[~low] - self._n]
        out = out[(slice(None), *rest)]
        return out[0] if scalar else out

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)


class _Overlay:
    """The scored split's feature store with the changed rows added after its last row (their
    features in memory); a reader of any other row reads the store itself."""

    def __init__(self, base, originals: np.ndarray, steps: dict, step_index: np.ndarray,
                 counts: np.ndarray, entropy: list[np.ndarray] | None):
        self._base, self._originals = base, originals
        self._steps, self._index, self._entropy = steps, step_index, entropy
        self._base_entropy = None  # the store's entropy file, mapped once (not once per row)
        self.meta = dict(getattr(base, "meta", {}) or {})
        offsets = np.asarray(base.step_offsets, dtype=np.int64)
        self._n = len(offsets) - 1
        self.step_offsets = np.concatenate([offsets, offsets[-1] + np.cumsum(counts)])
        if entropy is not None and hasattr(base, "token_offsets"):
            tok = np.asarray(base.token_offsets, dtype=np.int64)
            self.token_offsets = np.concatenate([tok, tok[-1] + np.cumsum(
                [len(e) for e in entropy]).astype(np.int64)])

    def static(self, role: str, pooling: str):
        base = self._base.static(role, pooling)  # raises for a pair that was not extracted
        return _Stacked(base, np.asarray(base[self._originals]))

    def steps(self, role: str, pooling: str = "last"):
        base = self._base.steps(role, pooling)
        extra = self._steps.get((role, pooling))
        return _Stacked(base, np.zeros((0, *base.shape[1:]), base.dtype) if extra is None
                        else extra)

    def step_index(self):
        return _Stacked(self._base.step_index(), self._index)

    def entropy(self, row: int) -> np.ndarray:
        if row < self._n:
            folder = getattr(self._base, "folder", None)
            if folder is None:
                return self._base.entropy(row)
            if self._base_entropy is None:
                self._base_entropy = np.load(Path(folder) / "entropy.npy", mmap_mode="r")
            tok = self._base.token_offsets
            return np.asarray(self._base_entropy[tok[row]: tok[row + 1]])
        if self._entropy is None:
            raise AttributeError("the feature store holds no entropies")
        return self._entropy[row - self._n].copy()


def _available(store, kind: str) -> list[tuple[str, str]]:
    """The (role, pooling) pairs the store holds, static or step."""
    meta = getattr(store, "meta", None) or {}
    if kind == "static":
        pairs = [(r, p) for r in meta.get("roles", []) for p in meta.get("poolings", [])]
        read = getattr(store, "static", None)
    else:
        pairs = [(r, p) for r in meta.get("step_roles", [])
                 for p in meta.get("step_poolings", ["last"])]
        read = getattr(store, "steps", None)
    out = []
    for pair in pairs if read is not None else []:
        try:
            read(*pair)
        except KeyError:
            continue
        out.append(pair)
    return out


def _other_tokens(rng: np.random.Generator, pool: np.ndarray, original: np.ndarray,
                  size: int) -> np.ndarray:
    """`size` tokens from `pool`; where `original` has a token at that place, a different one."""
    out = pool[rng.integers(0, len(pool), size)]
    if len(pool) > 1:
        same = np.flatnonzero(out[: len(original)] == original[: len(out)])
        for k in same:  # the next pool token over: different by construction
            out[k] = pool[(np.searchsorted(pool, out[k]) + 1) % len(pool)]
    return out


def _traded_lengths(rng: np.random.Generator, n: np.ndarray, L: np.ndarray,
                    floor: np.ndarray) -> np.ndarray:
    """New response lengths: rows swap their sequence lengths n + L in pairs (a pair must differ,
    and each new length must reach the row's `floor`); a row left without a partner keeps L."""
    total, new = n + L, L.copy()
    free = [int(i) for i in rng.permutation(len(L))]
    while free:
        a = free.pop(0)
        for k, b in enumerate(free):
            if total[a] != total[b] and total[b] - n[a] >= floor[a] \
                    and total[a] - n[b] >= floor[b]:
                new[a], new[b] = total[b] - n[a], total[a] - n[b]
                del free[k]
                break
    return new


def _stride(store, row_t: list[np.ndarray]) -> int:
    """The features stage's step stride (read from the drawn rows' steps when not recorded)."""
    stride = (getattr(store, "meta", None) or {}).get("step_stride")
    if stride is not None:
        return int(stride)
    gaps = np.concatenate([np.diff(ts) for ts in row_t]) if row_t else np.zeros(0)
    gaps = gaps[gaps > 0]
    return int(gaps.min()) if len(gaps) else 1


def perturb(view: SplitView, n_rows: int = 16, seed: int = 0) -> Perturbation:
    """The scored split with up to `n_rows` drawn rows changed after a cut step (module
    docstring); every other row, and the order of rows, as they were."""
    table, rows, store = view._table, view._rows, view._features
    rng = np.random.default_rng(seed)
    lengths = table["L"].to_numpy(dtype=np.int64)
    prompt_n = table["prompt_token_ids"].map(len).to_numpy(dtype=np.int64)
    has_steps = store is not None and hasattr(store, "step_offsets") \
        and hasattr(store, "step_index")
    offsets = np.asarray(store.step_offsets, dtype=np.int64) if has_steps else None
    counts = offsets[rows + 1] - offsets[rows] if has_steps else lengths
    candidates = np.flatnonzero(counts > 0)
    pick = np.sort(rng.choice(candidates, min(n_rows, len(candidates)), replace=False))
    index = store.step_index() if has_steps else None
    row_t = [np.asarray(index[offsets[g]: offsets[g + 1], 1], dtype=np.int64)
             for g in rows[pick]] if has_steps else [np.zeros(1, np.int64) for _ in pick]
    floor = np.array([ts.min() + 1 for ts in row_t], dtype=np.int64)
    new_len = _traded_lengths(rng, prompt_n[pick], lengths[pick], floor)
    cuts = np.array([int(rng.choice(ts[ts < min(L, L2)])) for ts, L, L2 in
                     zip(row_t, lengths[pick], new_len)], dtype=np.int64)
    responses = [np.asarray(table["output_token_ids"].iloc[p], dtype=np.int64) for p in pick]
    prompts = [np.asarray(table["prompt_token_ids"].iloc[p], dtype=np.int64) for p in pick]
    pool = np.unique(np.concatenate(prompts + responses)) if len(pick) else np.zeros(1, np.int64)
    if not len(pool):
        pool = np.zeros(1, np.int64)
    tokens = list(table["output_token_ids"])
    for j, p in enumerate(pick):
        c, resp = int(cuts[j]), responses[j]
        if len(resp) >= lengths[p]:  # the response tokens are stored (not a label import)
            tail = _other_tokens(rng, pool, resp[c + 1:], int(new_len[j]) - (c + 1))
            tokens[p] = np.concatenate([resp[: c + 1], tail]).tolist()
    changed = table.copy()
    changed["output_token_ids"] = pd.Series(tokens, dtype=object)
    new_lengths = lengths.copy()
    new_lengths[pick] = new_len
    changed["L"] = new_lengths
    out = view._copy(np.arange(len(view)), labels_visible=False)
    out._table = changed
    if has_steps:
        out._features = _changed_store(store, rows[pick], row_t, prompt_n[pick], cuts, new_len,
                                       rng)
        out._rows = rows.copy()
        out._rows[pick] = len(offsets) - 1 + np.arange(len(pick))
    return Perturbation(out, pick, cuts, lengths[pick], new_len)


def _changed_store(store, originals: np.ndarray, row_t: list[np.ndarray], prompt_n: np.ndarray,
                   cuts: np.ndarray, new_len: np.ndarray, rng: np.random.Generator) -> _Overlay:
    """The store with the drawn rows' steps and entropies after their cut steps changed."""
    offsets = np.asarray(store.step_offsets, dtype=np.int64)
    n_base, stride = len(offsets) - 1, _stride(store, row_t)
    step_pairs = _available(store, "steps")
    # noise: per dimension, the mean and std of the drawn rows' step states (pooled over rows,
    # so a dimension that is constant within a row still gets noise at the scale rows differ by)
    spans = [np.arange(offsets[g], offsets[g + 1]) for g in originals]
    span = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
    scale = {}
    for pair in step_pairs:
        sample = np.asarray(store.steps(*pair)[span], dtype=np.float64)
        scale[pair] = (sample.mean(0), sample.std(0) + 1e-3 * (np.abs(sample).mean() + 1.0))
    has_entropy = hasattr(store, "entropy") and hasattr(store, "token_offsets")
    new_index, counts, entropies = [], [], []
    new_steps: dict[tuple[str, str], list[np.ndarray]] = {pair: [] for pair in step_pairs}
    for j, g in enumerate(originals):
        n, c, L2, ts = int(prompt_n[j]), int(cuts[j]), int(new_len[j]), row_t[j]
        keep = ts <= c
        later = np.arange(0, L2, stride)
        later = later[later > c]
        counts.append(int(keep.sum()) + len(later))
        new_index.append(np.stack([np.full(counts[-1], n_base + j),
                                   np.concatenate([ts[keep], later])], 1))
        for pair in step_pairs:
            orig = np.asarray(store.steps(*pair)[offsets[g]: offsets[g + 1]])
            noise = rng.normal(*scale[pair], (len(later), orig.shape[1]))
            new_steps[pair].append(np.concatenate([orig[keep], noise.astype(orig.dtype)]))
        if has_entropy:
            ent = np.asarray(store.entropy(int(g)), dtype=np.float32)
            top = max(float(ent.max()) if len(ent) else 0.0, 1.0)  # nats
            entropies.append(np.concatenate([ent[: n + c], rng.uniform(
                0.0, top, max(L2 - c, 0)).astype(np.float32)]))
    index_dtype = np.asarray(store.step_index()[:1]).dtype
    steps = {pair: np.concatenate(v) for pair, v in new_steps.items() if v}
    step_index = np.concatenate(new_index).astype(index_dtype) if new_index \
        else np.zeros((0, 2), dtype=index_dtype)
    return _Overlay(store, originals, steps, step_index, np.asarray(counts, dtype=np.int64),
                    entropies if has_entropy else None)
