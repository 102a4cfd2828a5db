"""A synthetic world for the audit of what was scored, an honest predictor with every method,
and predictors that read the hidden length on a few rows (tests/test_audit.py,
tests/test_audit_power.py).

The world is large enough for the audit's power target within its cost cap: about 540 test
rows, so the 100 rows it changes are under a quarter of the rows and of the steps.
"""

from __future__ import annotations

import copy
import zlib
from pathlib import Path

import numpy as np
import torch

from helpers.worlds import synthetic_world
from lenbench import QUANTILE_LEVELS, LengthDistribution, Needs, Predictor
from lenbench.contract.views import SplitView
from lenbench.scoring.audit import audit_scored, scored_record

# sparse leaks read the rows whose prompt id hashes below this: 3.5% of audit_world's test rows
LEAK_PER_MILLE = 41


def audit_world(folder: Path, n: int = 1800) -> dict[str, SplitView]:
    """`synthetic_world` (step states carry t / 50 in their last dimension) with response
    tokens; train, val and test views sharing one feature store."""
    labels, store = synthetic_world(folder, n=n)
    rng = np.random.default_rng(1)
    labels["output_token_ids"] = [rng.integers(3, 60, L).tolist() for L in labels["L"]]
    return {s: SplitView(s, labels, np.flatnonzero(labels["split"].to_numpy() == s), store)
            for s in ("train", "val", "test")}


def true_remaining(split) -> np.ndarray:
    """L - t read from the dynamic view the forbidden way (the number of steps of a row)."""
    steps = split.steps
    return (np.bincount(steps.row, minlength=len(split))[steps.row] - steps.t).astype(np.float64)


def next_token(split) -> np.ndarray:
    """An allowed dynamic reading: y_{t+1} at each step."""
    steps, n = split.steps, split.prompt_lengths
    out = np.empty(len(steps), dtype=np.float64)
    for r in np.unique(steps.row):
        at = np.flatnonzero(steps.row == r)
        out[at] = split.sequence_token_ids(int(r))[n[r] + steps.t[at]]
    return out


class Honest(Predictor):
    """Every method, each reading only what its step allows (prompt state, y_{t+1}, the
    step's own state); the static point adds one draw per call from the global generators,
    which the audit replays."""

    needs = Needs(hidden=("last",), steps=True)

    def fit(self, train, val=None) -> None:
        self.scale = float(np.mean(train.lengths))

    def predict(self, split) -> np.ndarray:
        noise = np.random.random() + torch.rand(1).item()
        return self.scale * (1.5 + np.tanh(split.hidden("last")[:, 0])) + noise

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return {"half": 0.5 * self.predict(split)}

    def predict_distribution(self, split) -> LengthDistribution:
        return _around(self.predict(split))

    def predict_remaining(self, split) -> np.ndarray:
        return next_token(split) + split.steps.hidden("last")[:, 0]

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        z = 1.0 / (1.0 + np.exp(-split.steps.hidden("last")[:, :2]))
        probs = np.concatenate([z, 1.0 - z], axis=1)
        return LengthDistribution.from_histogram([0, 10, 50, 100, 300], probs)


def _around(point: np.ndarray) -> LengthDistribution:
    return LengthDistribution.from_quantiles(
        QUANTILE_LEVELS, point[:, None] * np.linspace(0.5, 1.5, len(QUANTILE_LEVELS)))


def leaking(group_ids) -> np.ndarray:
    """The rows a sparse leak reads: those whose prompt id hashes below LEAK_PER_MILLE (a fixed
    property of the row, independent of any audit draw)."""
    return np.array([zlib.crc32(str(g).encode()) % 1000 < LEAK_PER_MILLE for g in group_ids])


class SparseLeak(Honest):
    """Honest, except where `leaking`: there a method reads the row's true length. The static
    methods read it from the feature store kept from `fit` (a row's number of steps is L; the
    row is found by its prompt state), the dynamic ones from the dynamic view."""

    leaks: tuple[str, ...] = ()

    def fit(self, train, val=None) -> None:
        super().fit(train, val)
        self.store = train._features
        states = np.asarray(self.store.static("last", "last"), dtype=np.float32)
        self.row_of = {x.tobytes(): g for g, x in enumerate(states)}

    def _stored_length(self, split, point: np.ndarray) -> np.ndarray:
        rows = [self.row_of[x.tobytes()] for x in split.hidden("last")]
        offsets = self.store.step_offsets
        true = np.array([offsets[g + 1] - offsets[g] for g in rows], dtype=np.float64)
        return np.where(leaking(split.group_ids), true, point)

    def predict(self, split) -> np.ndarray:
        point = super().predict(split)
        return self._stored_length(split, point) if "predict" in self.leaks else point

    def predict_distribution(self, split) -> LengthDistribution:
        point = super().predict(split)
        if "predict_distribution" in self.leaks:
            point = self._stored_length(split, point)
        return _around(point)

    def predict_remaining(self, split) -> np.ndarray:
        est = super().predict_remaining(split)
        if "predict_remaining" not in self.leaks:
            return est
        return np.where(leaking(split.group_ids)[split.steps.row], true_remaining(split), est)


def fitted(pred: Predictor, world: dict[str, SplitView]) -> Predictor:
    pred.fit(world["train"], world["val"])
    return pred


def audits(pred: Predictor, view: SplitView, seeds) -> list[dict]:
    """The audit of `pred`'s scored calls on `view` (scored once) under each audit seed."""
    record, hidden = scored_record(pred, view)
    return [audit_scored(copy.copy(record), hidden, pred.needs, audit_seed=s) for s in seeds]

