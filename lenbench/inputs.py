"""SplitView: what a predictor sees of one split (train, val or test).

Labels are readable on the splits a predictor learns from and hidden on the split it is scored
on, so a predictor cannot peek by accident. Features are memory-mapped and read on demand.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np
import pandas as pd

from lenbench.features.extract import FeatureStore
from lenbench.predictor import TargetModel


class LabelsHidden(RuntimeError):
    """Raised when a predictor reads the labels of the split it is being scored on."""


class Steps:
    """The (row, t) pairs of dynamic prediction: t tokens generated, L - t remaining."""

    def __init__(self, view: SplitView, global_index: np.ndarray, local_rows: np.ndarray,
                 t: np.ndarray):
        self._view = view
        self._global_index = global_index  # positions in the feature store's step arrays
        self.row = local_rows  # index into the split's rows
        self.t = t

    def __len__(self) -> int:
        return len(self.t)

    @property
    def remaining(self) -> np.ndarray:
        """True remaining tokens L - t (hidden on the scored split)."""
        return self._view.lengths[self.row] - self.t

    def hidden(self, role: str = "mid", pooling: str = "last") -> np.ndarray:
        """Per-step target state, float32 [n_steps, H]: at position n-1+t ("last"), or the
        entropy-weighted pool of positions 0..n-1+t ("entropy")."""
        store = self._view._features
        return np.asarray(store.steps(role, pooling)[self._global_index], dtype=np.float32)


class SplitView:
    """Rows of one split with their prompts, labels and (if extracted) target features."""

    def __init__(self, name: str, labels: pd.DataFrame, rows: np.ndarray,
                 features: FeatureStore | None = None, target: TargetModel | None = None,
                 labels_visible: bool = True):
        self.name = name
        self._labels = labels
        self._rows = np.asarray(rows, dtype=np.int64)  # indices into the full label table
        self._features = features
        self.target = target
        self._labels_visible = labels_visible

    def __len__(self) -> int:
        return len(self._rows)

    def hide_labels(self) -> SplitView:
        return SplitView(self.name, self._labels, self._rows, self._features, self.target, False)

    @cached_property
    def _table(self) -> pd.DataFrame:
        return self._labels.iloc[self._rows].reset_index(drop=True)

    @property
    def prompts(self) -> list[str]:
        return list(self._table["text"])

    @property
    def prompt_token_ids(self) -> list[list[int]]:
        return [list(x) for x in self._table["prompt_token_ids"]]

    @property
    def prompt_lengths(self) -> np.ndarray:
        return self._table["prompt_token_ids"].map(len).to_numpy()

    @property
    def response_token_ids(self) -> list[list[int]]:
        """The target's own response tokens (hidden on the scored split: they reveal L)."""
        self._check_visible()
        return [list(x) for x in self._table["output_token_ids"]]

    @property
    def first_response_tokens(self) -> np.ndarray:
        """y_1, the token sampled from the prefill logits: known to a server right after
        prefill, so static predictors may read it (EAGLE-3's draft state after prefill does)."""
        return self._table["output_token_ids"].map(lambda x: int(x[0]) if len(x) else -1).to_numpy()

    def sequence_token_ids(self, i: int) -> np.ndarray:
        """Prompt plus the whole response of row i, for teacher-forced dynamic prediction.

        Visible on the scored split because the dynamic protocol walks the true response; a
        predictor must use it causally (its estimate at step t may read tokens up to y_{t+1}).
        """
        row = self._table.iloc[i]
        return np.concatenate([np.asarray(row["prompt_token_ids"], dtype=np.int64),
                               np.asarray(row["output_token_ids"], dtype=np.int64)])

    def _check_visible(self) -> None:
        if not self._labels_visible:
            raise LabelsHidden(f"the labels of the {self.name!r} split are hidden from predict(); "
                               "learn from the split given to fit()")

    @property
    def group_ids(self) -> np.ndarray:
        """The prompt id of each row (several samples of one prompt share it)."""
        return self._table["prompt_id"].to_numpy()

    @property
    def families(self) -> np.ndarray:
        return self._table["family"].to_numpy()

    @property
    def lengths(self) -> np.ndarray:
        """L, the true output length of each row (counting EOS)."""
        self._check_visible()
        return self._table["L"].to_numpy()

    def _store(self) -> FeatureStore:
        if self._features is None:
            raise RuntimeError("this predictor reads hidden states but declared none: set "
                               "needs = Needs(hidden=('mid',), ...) on the class")
        return self._features

    def hidden(self, role: str = "mid", pooling: str = "last") -> np.ndarray:
        """Target state of the prompt, pooled, float32 [n_rows, H]."""
        return np.asarray(self._store().static(role, pooling)[self._rows], dtype=np.float32)

    def entropy(self, i: int) -> np.ndarray:
        """Per-token next-token entropy over prompt + response of row i."""
        return self._store().entropy(int(self._rows[i]))

    @cached_property
    def steps(self) -> Steps:
        store = self._store()
        offsets = store.step_offsets
        starts, ends = offsets[self._rows], offsets[self._rows + 1]
        counts = ends - starts
        global_index = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) \
            if len(starts) else np.zeros(0, dtype=np.int64)
        local_rows = np.repeat(np.arange(len(self._rows)), counts)
        t = np.asarray(store.step_index()[global_index, 1], dtype=np.int64)
        return Steps(self, global_index, local_rows, t)
