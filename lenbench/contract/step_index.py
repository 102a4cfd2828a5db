"""The scored decoding steps of every row, and a store that holds them without target states.

Dynamic prediction is scored at response steps t = 0, s, 2s, ... < L of each row (s: the
features stage's `step_stride`). Where the features stage runs, its folder records these steps
beside the states; a run whose predictors read no target state (OUTLETS and its ablations run
the target themselves) needs the steps alone, and they follow from the lengths: `StepIndexStore`
serves them to the views in place of a features folder, so such a run skips the teacher-forced
pass over every row (an hour on a CPU for a real world).
"""

from __future__ import annotations

import numpy as np

NO_FORWARD = ("no target states were extracted in this run: none of its predictors declares "
              "hidden states or entropies. Declare them in Needs (hidden=(...) or entropy=True)")


def row_step_offsets(lengths: np.ndarray, stride: int) -> np.ndarray:
    """[n_rows + 1] start of each row's steps among all rows' (ceil(L / stride) steps a row)."""
    per_row = -(-np.asarray(lengths, dtype=np.int64) // int(stride))
    return np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)


def step_index(lengths: np.ndarray, stride: int) -> np.ndarray:
    """[n_steps, 2] (row, t) of every scored step, rows in order, as a features folder has it."""
    lengths = np.asarray(lengths, dtype=np.int64)
    t = [np.arange(0, L, int(stride)) for L in lengths]
    rows = np.repeat(np.arange(len(lengths)), [len(x) for x in t])
    out = np.zeros((len(rows), 2), dtype=np.int32)
    out[:, 0] = rows
    if len(rows):
        out[:, 1] = np.concatenate(t)
    return out


class StepIndexStore:
    """The step index of a world without any target state: what a features folder's reader
    (`FeatureStore`) offers, less the states and entropies, which raise a KeyError saying why."""

    def __init__(self, offsets: np.ndarray, index: np.ndarray, stride: int):
        self.step_offsets, self._index = np.asarray(offsets), np.asarray(index)
        self.meta = {"roles": [], "poolings": [], "step_roles": [], "step_poolings": [],
                     "step_stride": int(stride), "n_rows": len(self.step_offsets) - 1,
                     "n_steps": int(self.step_offsets[-1])}

    @classmethod
    def from_lengths(cls, lengths: np.ndarray, stride: int) -> StepIndexStore:
        """The steps of rows of these response lengths, every `stride` tokens."""
        if int(stride) < 1:
            raise ValueError("features.step_stride must be >= 1")
        return cls(row_step_offsets(lengths, stride), step_index(lengths, stride), stride)

    @classmethod
    def of_store(cls, store) -> StepIndexStore:
        """A feature store's steps without its states: what a run declaring none gets."""
        return cls(store.step_offsets, store.step_index(), store.meta["step_stride"])

    def step_index(self) -> np.ndarray:
        return self._index

    def static(self, role: str, pooling: str) -> np.ndarray:
        raise KeyError(f"hidden({role!r}, {pooling!r}): {NO_FORWARD}")

    def steps(self, role: str, pooling: str = "last") -> np.ndarray:
        raise KeyError(f"steps.hidden({role!r}): {NO_FORWARD}")

    def entropy(self, row: int) -> np.ndarray:
        raise KeyError(f"entropy: {NO_FORWARD}")


def has_entropy(store) -> bool:
    """Whether a feature store holds the per-token entropies (a features folder does)."""
    return store is not None and hasattr(store, "token_offsets")
