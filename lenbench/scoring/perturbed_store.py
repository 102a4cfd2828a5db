"""The feature store as the audit's copies see it: some rows' steps and entropies rewritten in
place, every other row read from the store itself.

The audit (lenbench/scoring/audit.py) hands this store to its fresh copies of the fitted
predictor in place of the real one, wherever they hold it: in the view they predict and in any
reference kept from `fit` (a training view's store). A rewritten row keeps its index, so its
number of steps, its later step states and its entropies change for every reader, whichever way
it reaches them. Nothing of the store is copied: the rewritten steps live in memory, and each
index is mapped either to the store's own arrays or to them.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

NOISE_SAMPLE = 4096  # steps of the rewritten rows that set the noise's mean and std


@dataclass
class RowChange:
    """One rewritten row of the store."""

    row: int  # its index in the store
    keep: int  # how many of its first steps are kept
    t: np.ndarray  # the t of the steps that follow them
    entropy: np.ndarray | None  # its whole new entropy (prompt + response), if the store has one


def entropy_reader(store):
    """`store.entropy`, reading the store's entropy file through one memory map (the store's
    own method maps it anew for every row)."""
    folder = getattr(store, "folder", None)
    if folder is None:
        return store.entropy
    values = np.load(Path(folder) / "entropy.npy", mmap_mode="r")
    offsets = np.asarray(store.token_offsets, dtype=np.int64)
    return lambda row: np.asarray(values[offsets[row]: offsets[row + 1]])


class _StepLayout:
    """Where each step of the rewritten store comes from: the store's own arrays (a kept step)
    or the rewritten rows' new steps (`extra`, in the order of the changes)."""

    def __init__(self, base_offsets: np.ndarray, changes: list[RowChange]):
        self.base_offsets = np.asarray(base_offsets, dtype=np.int64)
        counts = np.diff(self.base_offsets)
        self.keep = counts.copy()
        self.extra_start = np.zeros(len(counts), dtype=np.int64)
        start = 0
        for change in changes:
            self.keep[change.row] = change.keep
            self.extra_start[change.row] = start
            counts[change.row] = change.keep + len(change.t)
            start += len(change.t)
        self.offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.n_extra = start

    def locate(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For steps of the rewritten store: whether each is a kept one, its index in the
        store's arrays (kept) and its index among the new steps (the others)."""
        row = np.searchsorted(self.offsets, index, side="right") - 1
        place = index - self.offsets[row]
        kept = place < self.keep[row]
        return kept, self.base_offsets[row] + place, self.extra_start[row] + place - self.keep[row]


class _Rewritten:
    """A step array of the store with the rewritten rows' steps in place, indexed like one array
    by an index array, a boolean mask, a slice or an integer (optionally with a column key)."""

    def __init__(self, base, extra: np.ndarray, layout: _StepLayout):
        self._base, self._extra, self._layout = base, extra, layout
        self.shape = (int(layout.offsets[-1]), *base.shape[1:])
        self.dtype = base.dtype
        self.ndim = len(self.shape)

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
        if len(index) and (index.min() < 0 or index.max() >= len(self)):
            raise IndexError(f"index out of range for {len(self)} steps")
        kept, base_index, extra_index = self._layout.locate(index)
        out = np.empty((len(index), *self.shape[1:]), dtype=self.dtype)
        if kept.any():
            out[kept] = self._base[base_index[kept]]
        if (~kept).any():
            out[~kept] = self._extra[extra_index[~kept]]
        out = out[(slice(None), *rest)]
        return out[0] if scalar else out

    def __array__(self, dtype=None, copy=None):
        out = self[:]
        return out if dtype is None else out.astype(dtype)


class PerturbedStore:
    """A feature store with `changes` applied: the rewritten rows' later steps are Gaussian
    noise with the per-dimension mean and std of those rows' real steps (drawn when a step array
    is first read, from `noise_seed`), their step index follows their new t, and their entropy
    is the one given. Static (prompt) features, and every other row, are the store's own."""

    def __init__(self, base, changes: list[RowChange], noise_seed: int):
        self._base, self._changes, self._noise_seed = base, changes, int(noise_seed)
        self._layout = _StepLayout(base.step_offsets, changes)
        self.step_offsets = self._layout.offsets
        self.meta = dict(getattr(base, "meta", None) or {})
        self._steps: dict[tuple[str, str], _Rewritten] = {}
        self._index: _Rewritten | None = None
        self._entropy = {c.row: c.entropy for c in changes if c.entropy is not None}
        self._base_entropy = None  # entropy_reader(base), made on the first read
        if hasattr(base, "token_offsets"):
            tok = np.asarray(base.token_offsets, dtype=np.int64)
            counts = np.diff(tok)
            for row, ent in self._entropy.items():
                counts[row] = len(ent)
            self.token_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @property
    def base(self):
        """The store the changes apply to."""
        return self._base

    def static(self, role: str, pooling: str):
        return self._base.static(role, pooling)

    def step_index(self) -> _Rewritten:
        if self._index is None:
            base = self._base.step_index()
            dtype = np.asarray(base[:1]).dtype
            extra = [np.stack([np.full(len(c.t), c.row), c.t], 1) for c in self._changes]
            extra = np.concatenate(extra).astype(dtype) if extra else np.zeros((0, 2), dtype)
            self._index = _Rewritten(base, extra, self._layout)
        return self._index

    def steps(self, role: str, pooling: str = "last") -> _Rewritten:
        key = (role, pooling)
        if key not in self._steps:
            base = self._base.steps(role, pooling)  # raises for a pair that was not extracted
            self._steps[key] = _Rewritten(base, self._noise(base, key), self._layout)
        return self._steps[key]

    def _noise(self, base, key: tuple[str, str]) -> np.ndarray:
        """The new steps of `base`: noise at the scale the rewritten rows' real steps vary by
        (pooled over those rows, so a dimension constant within a row still gets noise)."""
        rng = np.random.default_rng([self._noise_seed, zlib.crc32("/".join(key).encode())])
        offsets = self._layout.base_offsets
        spans = [np.arange(offsets[c.row], offsets[c.row + 1]) for c in self._changes]
        span = np.concatenate(spans) if spans else np.zeros(0, dtype=np.int64)
        if len(span) > NOISE_SAMPLE:
            span = np.sort(rng.choice(span, NOISE_SAMPLE, replace=False))
        width = base.shape[1:]
        if not len(span):
            return np.zeros((self._layout.n_extra, *width), dtype=base.dtype)
        sample = np.asarray(base[span], dtype=np.float64)
        mean = sample.mean(0).astype(np.float32)
        std = (sample.std(0) + 1e-3 * (np.abs(sample).mean() + 1.0)).astype(np.float32)
        noise = rng.standard_normal((self._layout.n_extra, *width), dtype=np.float32)
        return (noise * std + mean).astype(base.dtype)

    def entropy(self, row: int) -> np.ndarray:
        row = int(row)
        if row in self._entropy:
            return self._entropy[row].copy()
        if self._base_entropy is None:
            self._base_entropy = entropy_reader(self._base)
        return self._base_entropy(row)
