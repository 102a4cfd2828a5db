"""Split-conformal length distributions around any point predictor.

A point predictor says nothing about its own uncertainty. This wrapper fits the wrapped predictor
on train, measures how wrong it is on the validation split, and turns those errors into calibrated
quantiles, so its 50% and 80% intervals reach their nominal coverage on exchangeable test rows
whatever the wrapped predictor is.

Conformity score: the log-space residual ``s = log L - log L̂`` (with ``L̂ >= 1``). Lengths are
heavy-tailed and errors grow with length, so a residual in log space gives intervals that scale
with the prediction (a multiplicative band), where an absolute residual would give every request
the same width. The quantile at level q is ``L̂ · exp(s_(k))``, with the finite-sample rank
``k = ceil((n + 1) q)`` for q >= 0.5 and ``k = floor((n + 1) q)`` below, so each tail of a
central interval misses at most its share: the split-conformal guarantee, coverage >= nominal, for
rows exchangeable with the validation rows (rows, not prompts: samples of a prompt are scored as
rows, as the metrics do).

Censored validation rows (cut at the cap: the true length is at least the recorded one) have a
score that is only a lower bound. Taken at face value they would pull the upper quantiles down,
and the intervals would miss true lengths beyond them. Instead the score distribution is the
Kaplan-Meier estimate: each censored score's weight moves to the scores above it (Efron's
redistribution to the right), which is exact when a row's score does not depend on how far its
prediction sits below the cap. A level that the remaining weight never reaches (more of the top
is censored than the level leaves out) has no finite offset: its quantile is put at the largest
validation length, the cap, where the harness reads it as "the cap or beyond".

By default the wrapped predictor is fitted *without* the validation split (``base_sees_val``), so
the calibration rows are untouched by its training (early stopping on them would make its errors
there optimistic). The point prediction is the wrapped predictor's. A dynamic wrapped predictor
is calibrated the same way on the validation split's steps (remaining length ``L - t``), each
request weighing the same whatever its number of steps.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np

from lenbench import Predictor
from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.contract.instantiate import instantiate_predictor

log = logging.getLogger(__name__)


def conformal_offsets(scores: np.ndarray, levels, weights: np.ndarray | None = None,
                      n_units: int | None = None, censored: np.ndarray | None = None
                      ) -> np.ndarray:
    """Per level, the conformal quantile of `scores`: the inverted-CDF quantile at the
    finite-sample level ceil((n + 1) q) / n (q >= 0.5) or floor((n + 1) q) / n (q < 0.5), where
    n is `n_units` (the number of exchangeable units; the number of scores by default).
    `weights` (summing over a unit to 1/n) let a unit hold several scores. `censored` scores are
    lower bounds: the CDF is then the Kaplan-Meier estimate, and a level it never reaches gets
    +inf."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    if scores.size == 0:
        raise ValueError("conformal: no calibration scores")
    n = scores.size if n_units is None else int(n_units)
    w = np.full(scores.size, 1.0 / scores.size) if weights is None else \
        np.asarray(weights, dtype=np.float64) / np.sum(weights)
    cens = np.zeros(scores.size, bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    order = np.lexsort((cens, scores))  # by score; at a tie the exact score comes first
    s, cum = scores[order], np.cumsum(_kaplan_meier_mass(w[order], cens[order]))
    out = []
    for q in levels:
        k = math.ceil((n + 1) * q - 1e-9) if q >= 0.5 else math.floor((n + 1) * q + 1e-9)
        target = min(max(k, 1), n) / n
        i = int(np.searchsorted(cum, target - 1e-12, side="left"))
        out.append(s[min(i, s.size - 1)] if i < s.size or not cens.any() else np.inf)
    return np.asarray(out)


def _kaplan_meier_mass(w: np.ndarray, cens: np.ndarray) -> np.ndarray:
    """The probability mass the Kaplan-Meier estimate puts on each of the sorted scores (weights
    `w`): an exact score takes its share of the survival left, w_i / (weight at or above it), a
    censored one none. Without censoring that is w itself."""
    at_risk = np.cumsum(w[::-1])[::-1]
    hazard = np.where(cens, 0.0, w / np.maximum(at_risk, 1e-300))
    survival = np.concatenate([[1.0], np.cumprod(1.0 - hazard)[:-1]])
    return survival * hazard


class ConformalPredictor(Predictor):
    """Calibrated quantiles (at `levels`) around a wrapped point predictor, `base`: a predictor
    config with `_target_` (instantiated the way the harness builds predictors) or a Predictor."""

    def __init__(self, base: Any, levels=QUANTILE_LEVELS, base_sees_val: bool = False,
                 dynamic: bool = True):
        if isinstance(base, Predictor):
            self.base = base
        elif isinstance(base, dict) and "_target_" in base:
            self.base = instantiate_predictor(dict(base))
        else:
            raise TypeError("conformal.base must be a predictor config with `_target_` (e.g. "
                            "the contents of conf/predictor/mlp_probe.yaml) or a Predictor, got "
                            f"{type(base).__name__}")
        self.levels = tuple(float(q) for q in levels)
        if not self.levels or any(b <= a for a, b in zip(self.levels, self.levels[1:])) \
                or self.levels[0] <= 0 or self.levels[-1] >= 1:
            raise ValueError(f"conformal.levels must increase strictly within (0, 1): "
                             f"{list(self.levels)}")
        self.base_sees_val = bool(base_sees_val)
        self.calibrate_dynamic = bool(dynamic)
        self.needs = self.base.needs
        self.offsets: np.ndarray | None = None
        self.remaining_offsets: np.ndarray | None = None
        self.n_calibration = 0
        self.n_censored = 0
        self.top = math.inf  # the largest validation length: where an unbounded quantile goes

    # the wrapped predictor decides what is dynamic; the wrapper adds only distributions
    @property
    def dynamic(self) -> bool:
        return self.base.dynamic

    @property
    def dynamic_distributional(self) -> bool:
        return self.base.dynamic and self.calibrate_dynamic

    @property
    def reads_next_token(self) -> bool:  # type: ignore[override]
        return bool(self.base.reads_next_token)

    def fit(self, train, val=None) -> None:
        if val is None or len(val) == 0:
            raise ValueError("conformal calibrates its quantiles on the validation split, and "
                             "this run has none: give the dataset a validation share (e.g. "
                             "dataset.split.val=0.1)")
        self.base.seed = self.seed
        self.base.fit(train, val if self.base_sees_val else None)
        true = val.lengths.astype(np.float64)
        censored = val.censored
        pred = self._point(self.base.predict(val.static_view(self.base.needs)))
        self.offsets = conformal_offsets(np.log(np.maximum(true, 1.0)) - np.log(pred),
                                         self.levels, censored=censored)
        self.n_calibration, self.n_censored = len(val), int(censored.sum())
        self.top = float(true.max())
        if np.isinf(self.offsets).any():
            log.warning("conformal: %d of %d validation rows are censored, more than the levels "
                        "%s leave above them: those quantiles are put at the cap",
                        self.n_censored, len(val), [q for q, o in zip(self.levels, self.offsets)
                                                    if np.isinf(o)])
        if len(val) < 1 / min(self.levels[0], 1 - self.levels[-1]) - 1:
            log.warning("conformal: %d validation rows are too few for levels %s: the outer "
                        "quantiles are the extreme residuals", len(val), list(self.levels))
        if self.dynamic_distributional:
            steps = val.steps
            rem = self._point(self.base.predict_remaining(val.hide_labels()))
            per_request = np.bincount(steps.row, minlength=len(val))
            self.remaining_offsets = conformal_offsets(
                np.log(np.maximum(steps.remaining, 1.0)) - np.log(rem), self.levels,
                weights=1.0 / per_request[steps.row], n_units=int((per_request > 0).sum()),
                censored=censored[steps.row])

    @staticmethod
    def _point(values) -> np.ndarray:
        return np.maximum(np.asarray(values, dtype=np.float64).reshape(-1), 1.0)

    def predict(self, split) -> np.ndarray:
        return self.base.predict(split)

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return self.base.predict_variants(split)

    def predict_remaining(self, split) -> np.ndarray:
        return self.base.predict_remaining(split)

    def _quantiles(self, point: np.ndarray, offsets: np.ndarray,
                   top: np.ndarray) -> LengthDistribution:
        """`point` times exp(offset) per level; an unbounded level at the cap (`top`, per row),
        or at the row's highest bounded quantile when that lies above it."""
        with np.errstate(over="ignore"):
            values = point[:, None] * np.exp(offsets)[None, :]
        bounded = np.where(np.isinf(values), -np.inf, values).max(axis=1)
        values = np.where(np.isinf(values), np.maximum(top, bounded)[:, None], values)
        return LengthDistribution.from_quantiles(self.levels, values)

    def predict_distribution(self, split) -> LengthDistribution:
        pred = self._point(self.base.predict(split))
        return self._quantiles(pred, self.offsets, np.full(pred.size, self.top))

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        if self.remaining_offsets is None:
            raise NotImplementedError("conformal: the wrapped predictor is not dynamic, or "
                                      "dynamic calibration is off (conformal.dynamic=false)")
        rem = self._point(self.base.predict_remaining(split))
        # the cap less the tokens generated so far: t is what the dynamic view walks
        return self._quantiles(rem, self.remaining_offsets,
                               np.maximum(self.top - split.steps.t, 1.0))

    def num_parameters(self) -> int | None:
        return self.base.num_parameters()

    def report(self) -> dict[str, Any]:
        out = dict(self.base.report())
        out["conformal"] = {
            "levels": list(self.levels), "n_calibration": self.n_calibration,
            "n_calibration_censored": self.n_censored,
            "log_offsets": None if self.offsets is None else self.offsets.tolist(),
            "remaining_log_offsets": None if self.remaining_offsets is None
            else self.remaining_offsets.tolist()}
        return out
