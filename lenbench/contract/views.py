"""What a predictor sees of one split (train, val or test): three views by protocol.

Labels are readable on the splits a predictor learns from and hidden on the split it is scored
on, so a predictor cannot peek by accident. Features are memory-mapped and read on demand.

The three views (the contract each predictor method is held to):

* **Training view** (`SplitView`, given to `fit(train, val)`): everything about the train and
  val rows, labels included: `lengths`, `response_token_ids`, `sequence_token_ids(i)`, `steps`
  (with `remaining`), `hidden(role, pooling)`, `entropy(i)` over prompt + response, `target`.
* **Static view** (`StaticView`, given to `predict()` and `predict_variants()` on the scored
  split): what a server knows right after prefill, and nothing about the response beyond y_1. It
  is built by copying the prompt side out of the split (`SplitView.static_view(needs)`) and holds
  no reference, public or private, to the label table, the feature store, the step arrays or the
  responses. It offers `name`, `len()`, `prompts` (the prompt text, for `Needs(text=True)`
  only; others raise `FeatureNotDeclared`), `prompt_token_ids`, `prompt_lengths`,
  `group_ids`, `families`, `first_response_tokens` (y_1, sampled from the prefill logits),
  `hidden(role, pooling)` for exactly the pairs in `Needs.hidden` x `Needs.pooling` (others
  raise `FeatureNotDeclared`, naming the Needs field; the features stage may hold more, the view
  never does, so a predictor behaves the same alone and in a suite), `entropy(i)` cut to the
  prompt positions 0..n-1 (n entries for a prompt of n tokens; entry j is the entropy of the
  distribution over token j+1, so the last is that of the prefill distribution y_1 was sampled
  from; position n, whose input is y_1, is left out: it needs a decode step), available when the
  predictor declared target states (`Needs.hidden`, or `Needs(entropy=True)`), and `target`
  (the model handle, for `Needs(target_model=True)` only). `lengths`, `response_token_ids`,
  `steps` and `sequence_token_ids(i)` raise `LabelsHidden`.
* **Dynamic view** (`SplitView.hide_labels()`, given to `predict_remaining()` on the scored
  split): the dynamic protocol walks the true response, so the view has `steps` (`row`, `t`,
  `hidden(role, pooling)`), `sequence_token_ids(i)` (prompt + whole response) and `entropy(i)`
  over prompt + response, besides the static view's prompt side; `lengths`,
  `response_token_ids` and `steps.remaining` raise `LabelsHidden`. Causality is the predictor's
  duty and is audited, not assumed (`lenbench/scoring/audit.py`): its estimate at step t may
  read the prompt side, y_1 .. y_{t+1} (`sequence_token_ids(i)[:n + t + 1]`; y_{t+1} because a
  draft model reads the token the target just sampled, as OUTLETS/EAGLE-3 do), the step states of
  steps t' <= t and the entropies at positions 0 .. n-1+t; nothing after, and not the row's
  number of tokens or steps (that is L).

The label table the views are built from has the columns of `lenbench/contract/labels.py`.
"""

from __future__ import annotations

import copy
from functools import cached_property

import numpy as np
import pandas as pd

from lenbench.contract.features import FeatureStore
from lenbench.contract.needs import Needs, TargetModel
from lenbench.contract.step_index import has_entropy


class LabelsHidden(RuntimeError):
    """Raised when a predictor reads the labels of the split it is being scored on."""


class FeatureNotDeclared(RuntimeError):
    """Raised when a predictor reads a feature of the static view that its `Needs` omits."""


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
        self._rows = np.asarray(rows, dtype=np.int64)  # indices into the features' rows
        # only this split's rows are kept: no other split's labels are reachable from a view
        self._table = labels.iloc[self._rows].reset_index(drop=True)
        self._features = features
        self.target = target
        self._labels_visible = labels_visible

    def __len__(self) -> int:
        return len(self._rows)

    def hide_labels(self) -> SplitView:
        """The dynamic view of this split: labels hidden, the response walkable by steps."""
        return self._copy(np.arange(len(self)), labels_visible=False)

    def _copy(self, local: np.ndarray, labels_visible: bool) -> SplitView:
        """A view of some of this view's rows (by position), sharing its features."""
        view = copy.copy(self)
        view.__dict__.pop("steps", None)  # a cached Steps reads lengths through its own view
        view._rows, view._labels_visible = self._rows[local], labels_visible
        view._table = self._table.iloc[local].reset_index(drop=True)
        return view

    def static_view(self, needs: Needs) -> StaticView:
        """The static view of this split for a predictor declaring `needs` (a copy of the
        prompt side; it references neither this view, nor its labels, nor its features)."""
        return StaticView(self, needs)

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

        Visible in the dynamic view of the scored split because the dynamic protocol walks the
        true response; a predictor must use it causally (its estimate at step t may read tokens
        up to y_{t+1}, i.e. `[:n + t + 1]`), which lenbench.scoring.audit audits. The static view
        (`predict()`) raises instead.
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

    @property
    def censored(self) -> np.ndarray:
        """Whether each row's L is right-censored (cut at the cap: the true length is at least
        L); all False for labels without the flag. Hidden where the lengths are."""
        self._check_visible()
        if "censored" not in self._table:
            return np.zeros(len(self), bool)
        return self._table["censored"].to_numpy(dtype=bool)

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

    def _prompt_entropy(self) -> tuple[np.ndarray, ...]:
        """Copies of the entropy at the prompt positions 0..n-1 of every row (static view)."""
        store = self._store()
        ent = np.load(store.folder / "entropy.npy", mmap_mode="r") \
            if hasattr(store, "folder") else None
        out = []
        for i, n in enumerate(self.prompt_lengths):
            row = int(self._rows[i])
            values = ent[store.token_offsets[row]: store.token_offsets[row] + n] \
                if ent is not None else store.entropy(row)[:n]
            out.append(_frozen(np.asarray(values, dtype=np.float32)))
        return tuple(out)

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


_STATIC_ALLOWS = ("prompts (with Needs(text=True)), prompt_token_ids, prompt_lengths, "
                  "group_ids, families, "
                  "first_response_tokens (y_1), hidden(role, pooling) as declared in Needs, "
                  "entropy(i) over the prompt positions, and target")


def _frozen(values: np.ndarray) -> np.ndarray:
    values = np.array(values)  # a copy, never a view of the label table or a memory map
    values.setflags(write=False)
    return values


class StaticView:
    """The scored split as `predict()` and `predict_variants()` see it: the prompt side only.

    Built from a SplitView by copying what a server knows right after prefill: prompts, prompt
    token ids and lengths, group ids, families, y_1 (`first_response_tokens`, sampled from the
    prefill logits), the pooled prompt states `hidden(role, pooling)` for exactly the pairs the
    predictor declared in `Needs.hidden` x `Needs.pooling`, the per-token entropy at the prompt
    positions 0..n-1 (n entries; the last is the entropy of the prefill distribution y_1 was
    sampled from; position n, whose input is y_1, needs a decode step and is left out) when the
    predictor declared features, and the target model handle when it declared
    `Needs(target_model=True)`. No attribute holds the label table, the feature store, step
    arrays, responses or lengths, so nothing reachable from the view reveals L. `lengths`,
    `response_token_ids`, `steps` and `sequence_token_ids(i)` raise `LabelsHidden`; an
    undeclared feature raises `FeatureNotDeclared` (the features stage may hold more for other
    predictors of a suite; this view never exposes it, so a predictor behaves the same alone).
    """

    def __init__(self, split: SplitView, needs: Needs):
        table = split._table
        self.name = split.name
        self._n = len(split)
        self._needs = needs

        def column(name: str, convert):
            return convert(table[name]) if name in table.columns else None

        self._prompts = column("text", lambda c: tuple(str(x) for x in c))
        self._prompt_token_ids = column(
            "prompt_token_ids", lambda c: tuple(tuple(int(t) for t in x) for x in c))
        self._group_ids = column("prompt_id", lambda c: _frozen(c.to_numpy()))
        self._families = column("family", lambda c: _frozen(c.to_numpy()))
        self._first_response_tokens = column("output_token_ids", lambda c: _frozen(
            c.map(lambda x: int(x[0]) if len(x) else -1).to_numpy(dtype=np.int64)))
        self._hidden: dict[tuple[str, str], np.ndarray] = {}
        self._unavailable: dict[tuple[str, str], str] = {}  # declared, but not extracted
        for role in needs.hidden:
            for pooling in needs.pooling:
                try:
                    self._hidden[(role, pooling)] = _frozen(split.hidden(role, pooling))
                except (KeyError, RuntimeError) as exc:
                    self._unavailable[(role, pooling)] = str(exc)
        self._entropy: tuple[np.ndarray, ...] | None = None
        if needs.forward and has_entropy(split._features) and self._prompt_token_ids is not None:
            self._entropy = split._prompt_entropy()
        self._target = split.target if needs.target_model else None

    def __len__(self) -> int:
        return self._n

    def __repr__(self) -> str:
        return f"StaticView({self.name!r}, {self._n} rows)"

    def _get(self, value, column: str):
        if value is None:
            raise KeyError(f"the label table of the {self.name!r} split has no {column!r} column")
        return value

    @property
    def prompts(self) -> list[str]:
        """The prompt text, for predictors that declare it (`Needs(text=True)`)."""
        if not self._needs.text:
            raise FeatureNotDeclared("prompts (the prompt text) are handed to predict() only "
                                     "when the predictor declares them: set needs = "
                                     "Needs(text=True) on the class (prompt_token_ids and "
                                     "prompt_lengths need no declaration)")
        return list(self._get(self._prompts, "text"))

    @property
    def prompt_token_ids(self) -> list[list[int]]:
        return [list(x) for x in self._get(self._prompt_token_ids, "prompt_token_ids")]

    @property
    def prompt_lengths(self) -> np.ndarray:
        ids = self._get(self._prompt_token_ids, "prompt_token_ids")
        return np.array([len(x) for x in ids], dtype=np.int64)

    @property
    def group_ids(self) -> np.ndarray:
        """The prompt id of each row (several samples of one prompt share it)."""
        return self._get(self._group_ids, "prompt_id").copy()

    @property
    def families(self) -> np.ndarray:
        return self._get(self._families, "family").copy()

    @property
    def first_response_tokens(self) -> np.ndarray:
        """y_1, the token sampled from the prefill logits (-1 for an empty response)."""
        return self._get(self._first_response_tokens, "output_token_ids").copy()

    @property
    def target(self) -> TargetModel | None:
        if not self._needs.target_model:
            raise FeatureNotDeclared("the target model is handed only to predictors that "
                                     "declare it: set needs = Needs(target_model=True)")
        return self._target

    def hidden(self, role: str = "mid", pooling: str = "last") -> np.ndarray:
        """Target state of the prompt, pooled, float32 [n_rows, H] (declared pairs only)."""
        key = (role, pooling)
        if key in self._hidden:
            return self._hidden[key].copy()
        if key in self._unavailable:
            raise KeyError(self._unavailable[key])
        missing = [f"Needs.hidden (add {role!r})"] if role not in self._needs.hidden else []
        if pooling not in self._needs.pooling:
            missing.append(f"Needs.pooling (add {pooling!r})")
        raise FeatureNotDeclared(
            f"hidden({role!r}, {pooling!r}) was not declared in {' and '.join(missing)}: the "
            f"static view holds only Needs.hidden x Needs.pooling = "
            f"{sorted(self._hidden) + sorted(self._unavailable)}; declare it on the class, "
            "e.g. needs = Needs(hidden=('mid',), pooling=('last',))")

    def entropy(self, i: int) -> np.ndarray:
        """Per-token next-token entropy at the prompt positions 0..n-1 of row i (n values; the
        last is the entropy of the prefill distribution that y_1 was sampled from)."""
        if self._entropy is None:
            raise FeatureNotDeclared("entropy(i) comes from the features stage, which runs for a "
                                     "predictor only when it declares Needs.hidden or "
                                     "Needs(entropy=True): set needs = Needs(entropy=True, ...)")
        return self._entropy[i].copy()

    def _hidden_from_predict(self, what: str):
        raise LabelsHidden(f"{what} reveals the response (and so L) of the {self.name!r} split: "
                           f"predict() sees the static view, which allows {_STATIC_ALLOWS}; "
                           "learn from the split given to fit(), and read the response step by "
                           "step in predict_remaining() (dynamic predictors)")

    @property
    def lengths(self) -> np.ndarray:
        self._hidden_from_predict("lengths")

    @property
    def censored(self) -> np.ndarray:
        self._hidden_from_predict("censored (a censored row's L is the cap)")

    @property
    def response_token_ids(self) -> list[list[int]]:
        self._hidden_from_predict("response_token_ids")

    @property
    def steps(self) -> Steps:
        self._hidden_from_predict("steps (their number per row)")

    def sequence_token_ids(self, i: int) -> np.ndarray:
        self._hidden_from_predict("sequence_token_ids(i) (the whole response)")
