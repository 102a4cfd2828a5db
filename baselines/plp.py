"""PLP: progressive length prediction (ForeLen, arXiv 2602.11812).

At decode step t the remaining length L - t is predicted from z_t, the entropy-guided pool over the
prompt and the t tokens generated so far ([I] the paper's "Aggregate"). The features stage
computes z_t incrementally (step_pooling="entropy"). One soft-label head (baselines/soft_bins.py)
is trained on (z_t, L - t) pairs. Each request contributes at most `steps_per_request` steps,
always including t = 0, so the loss is roughly the per-request average over steps of the paper
rather than being dominated by long responses.

Static prediction is the same head at t = 0. z_0 pools prompt positions 0..n-1, which is exactly
the static entropy pool of the prompt. Dynamic MAE is scored by the harness (also by progress
decile). MAE by the number of observed steps (t = 0, 8, 16, 32, ...), the paper's warm-up reading,
is scored on the test split by the harness for every dynamic predictor (metrics.dynamic, shown in
the leaderboard's predictor details); fit also computes it on the val split
(`mae_by_observed_steps`) and `report()` stores that reading.

The head's bin distribution is the predicted distribution: it is trained on remaining tokens, so
at step t it is already a remaining-length histogram over [0, max_length] (no shift), and at
t = 0 (the static pool) remaining equals total.
"""

from __future__ import annotations

import logging
from itertools import pairwise

import numpy as np

from baselines.soft_bins import SoftBinRegressor
from lenbench import Needs, Predictor
from lenbench.contract.distributions import LengthDistribution

log = logging.getLogger(__name__)


class PLP(Predictor):
    def __init__(self, layer: str = "last", aggregate: str = "entropy",
                 max_length: float | None = None, n_bins: int = 20, hidden: int = 512,
                 dropout: float = 0.1, ce_weight: float = 0.95, epochs: int = 40,
                 lr: float = 1e-3, batch_size: int = 256, weight_decay: float = 1e-4,
                 steps_per_request: int = 64, max_train_steps: int = 200_000,
                 observed_steps: tuple[int, ...] = (0, 8, 16, 32, 64), progress: bool = True):
        if aggregate not in ("entropy", "last"):
            raise ValueError("plp.aggregate must be 'entropy' (pool over prompt + generated "
                             "tokens) or 'last' (the state at the current step)")
        self.layer, self.aggregate, self.max_length = layer, aggregate, max_length
        self.steps_per_request, self.max_train_steps = steps_per_request, max_train_steps
        self.observed_steps = tuple(observed_steps)
        self.head_args = {"n_bins": n_bins, "hidden": hidden, "dropout": dropout,
                          "ce_weight": ce_weight, "epochs": epochs, "lr": lr,
                          "batch_size": batch_size, "weight_decay": weight_decay,
                          "progress": progress}
        self.needs = Needs(hidden=(layer,), pooling=(aggregate,), steps=True,
                           step_pooling=(aggregate,))
        self.observed_steps_mae: dict[int, float] = {}

    def _pick(self, steps, seed: int) -> np.ndarray:
        """At most steps_per_request steps of each request (t = 0 always), then a global cap."""
        rng = np.random.default_rng(seed)
        row = np.asarray(steps.row)
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]]) if len(row) else []
        bounds = list(starts) + [len(row)]
        picked = []
        for a, b in pairwise(bounds):
            idx = np.arange(a, b)
            if len(idx) > self.steps_per_request:
                first = idx[steps.t[idx] == steps.t[idx].min()][:1]
                rest = rng.choice(np.setdiff1d(idx, first), self.steps_per_request - 1,
                                  replace=False)
                idx = np.sort(np.r_[first, rest])
            picked.append(idx)
        pick = np.concatenate(picked) if picked else np.zeros(0, dtype=np.int64)
        if len(pick) > self.max_train_steps:
            pick = np.sort(rng.choice(pick, self.max_train_steps, replace=False))
        return pick

    def _steps_x(self, split) -> np.ndarray:
        return split.steps.hidden(self.layer, self.aggregate)

    def fit(self, train, val=None) -> None:
        steps = train.steps
        pick = self._pick(steps, self.seed)
        x, y = self._steps_x(train)[pick], steps.remaining[pick]
        self.n_train_steps = len(pick)
        xv = yv = None
        if val is not None and len(val.steps):
            vpick = self._pick(val.steps, self.seed + 1)
            xv, yv = self._steps_x(val)[vpick], val.steps.remaining[vpick]
        top = self.max_length or float(np.max(train.lengths))
        self.head = SoftBinRegressor(top, **self.head_args)
        self.head.fit(x, y, xv, yv, seed=self.seed, description="fit plp")
        if val is not None and len(val.steps):
            self.observed_steps_mae = self.mae_by_observed_steps(val)
            log.info("plp: val MAE of remaining length by observed steps %s",
                     {t: round(m, 2) for t, m in self.observed_steps_mae.items()})

    def predict(self, split) -> np.ndarray:
        return np.maximum(self.head.predict(split.hidden(self.layer, self.aggregate)), 1.0)

    def predict_remaining(self, split) -> np.ndarray:
        return np.maximum(self.head.predict(self._steps_x(split)), 1.0)

    def predict_distribution(self, split) -> LengthDistribution:
        return self.head.distribution(split.hidden(self.layer, self.aggregate))

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        return self.head.distribution(self._steps_x(split))

    def mae_by_observed_steps(self, split) -> dict[int, float]:
        """MAE of L - t at each t in `observed_steps`, over the requests still decoding at t
        (needs labels; t values the step stride skips are left out)."""
        steps = split.steps
        pred = self.predict_remaining(split)
        out = {}
        for t in self.observed_steps:
            sel = steps.t == t
            if sel.any():
                out[int(t)] = float(np.abs(pred[sel] - steps.remaining[sel]).mean())
        return out

    def num_parameters(self) -> int:
        return self.head.num_parameters()

    def report(self) -> dict:
        # The harness scores the test split by observed steps (metrics.dynamic); this is the
        # val-split reading that fit() logged, for comparison.
        return {"n_train_steps": int(getattr(self, "n_train_steps", 0)),
                "max_length": self.head.max_length if hasattr(self, "head") else None,
                "val_mae_by_observed_steps": {f"t={t}": m
                                              for t, m in self.observed_steps_mae.items()}}
