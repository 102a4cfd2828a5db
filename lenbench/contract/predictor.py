"""The Predictor contract: the one class a user subclasses to add a baseline.

A predictor declares what it needs (`Needs`, in `needs.py`), learns from the train split, and
predicts total output tokens for every row of a split. The harness, not the predictor, loads
data, extracts and caches features, seeds, times and scores. Dynamic predictors also implement
`predict_remaining`; distributional ones `predict_distribution` (and
`predict_remaining_distribution`).
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

import numpy as np

from lenbench.contract.needs import Needs

if TYPE_CHECKING:
    from lenbench.contract.distributions import LengthDistribution
    from lenbench.contract.views import SplitView, StaticView


class Predictor(abc.ABC):
    """Base class of every length predictor (abstract: `fit` and `predict` must be defined).

    Subclasses set `needs`, implement `fit` and `predict`, and, if they predict remaining length
    during decoding, `predict_remaining`. Constructor arguments come from the predictor's YAML
    file (Hydra `_target_`), so keep them plain values. `self.seed` is set by the harness before
    `fit`; use it for every random choice.

    What each method sees (lenbench/contract/views.py states the contract in full): `fit` gets the
    train and val SplitViews, labels included; `predict` and `predict_variants` get the scored
    split's StaticView (the prompt side, y_1 and the features declared in `needs`; nothing of
    the response); `predict_remaining` gets its dynamic view (the response walked step by step,
    labels hidden), and the harness audits every scored method: fresh copies of the fitted
    predictor must reproduce its outputs when what the protocol hides is changed (the estimate
    at step t reads nothing after y_{t+1}; lenbench/scoring/audit.py).
    """

    needs: Needs = Needs()
    seed: int = 0
    # True when the dynamic estimate at step t reads token y_{t+1} (an EAGLE-3 draft's input):
    # one token more than a probe on the target's state at n-1+t, so the table marks its rows
    reads_next_token: bool = False

    @abc.abstractmethod
    def fit(self, train: SplitView, val: SplitView | None = None) -> None:
        """Learn from the train split (labels in `train.lengths`)."""

    @abc.abstractmethod
    def predict(self, split: StaticView | SplitView) -> np.ndarray:
        """Predicted total output tokens, one per row of `split` (the static view)."""

    def predict_remaining(self, split: SplitView) -> np.ndarray:
        """Predicted remaining tokens at each step of `split.steps` (dynamic predictors only;
        causal: the value at step t may read the response up to y_{t+1}, no further)."""
        raise NotImplementedError

    def predict_distribution(self, split: StaticView | SplitView) -> LengthDistribution:
        """Optional: the predicted distribution of total output tokens, one per row of `split`
        (the static view), as quantiles or a histogram (lenbench/contract/distributions.py).
        Scored by pinball loss, interval coverage and width, and CRPS beside the point estimate."""
        raise NotImplementedError

    def predict_remaining_distribution(self, split: SplitView) -> LengthDistribution:
        """Optional: the predicted distribution of remaining tokens at each step of
        `split.steps` (same causality rule as `predict_remaining`)."""
        raise NotImplementedError

    def predict_variants(self, split: StaticView | SplitView) -> dict[str, np.ndarray]:
        """Other decodings of the same model (e.g. bin centre vs expectation), scored alongside."""
        return {}

    @property
    def dynamic(self) -> bool:
        """True when the subclass overrides `predict_remaining`."""
        return type(self).predict_remaining is not Predictor.predict_remaining

    @property
    def distributional(self) -> bool:
        """True when the subclass overrides `predict_distribution`."""
        return type(self).predict_distribution is not Predictor.predict_distribution

    @property
    def dynamic_distributional(self) -> bool:
        """True when the subclass overrides `predict_remaining_distribution`."""
        return (type(self).predict_remaining_distribution
                is not Predictor.predict_remaining_distribution)

    def earlier_fit_seconds(self) -> float:
        """Seconds of this fit spent by earlier runs whose saved state `fit` resumed or reused
        (a fit that keeps its state after every epoch): the harness adds them to the time it
        measured, so the fit time it reports is the whole fit's cost. 0 for a fit run whole."""
        return 0.0

    def num_parameters(self) -> int | None:
        """Trainable parameter count, reported in the results (None when not meaningful)."""
        return None

    def report(self) -> dict[str, Any]:
        """Extra figures this predictor measured about itself, stored as the result's `report`.

        The harness calls it once, after `predict` (and `predict_remaining`), so it may describe
        the scored split: counts of unparseable answers, acceptance rates, calibration factors,
        its own overheads. Values must be JSON-serialisable (numbers, strings, lists, nested
        dicts; numpy scalars and arrays are converted). The leaderboard's "Predictor details"
        lists the scalar and short-list entries, nested keys dotted (`a.b`); a `speculative`
        dict (`tau`, `alpha`, `acc`, `expected_acceptance`, and the same under `random_init`)
        gets its own table, and `row_labels` ({"predict": "raw", "<variant>": "..."}) names the
        main and variant rows of the leaderboard table. Never put test labels or per-row
        predictions here.
        """
        return {}
