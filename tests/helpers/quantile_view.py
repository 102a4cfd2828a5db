"""A distributional predictor seen through one quantile, so the causality audit (which reads
`predict_remaining`) can check its distributions."""

from __future__ import annotations

import numpy as np

from lenbench import Predictor


class AtLevel(Predictor):
    """A fitted predictor's distributions read at one quantile level, for the audit."""

    def __init__(self, inner: Predictor, level: float):
        self.inner, self.level, self.needs = inner, level, inner.needs

    def fit(self, train, val=None) -> None:
        raise AssertionError("AtLevel wraps a fitted predictor")

    def predict(self, split) -> np.ndarray:
        return self.inner.predict_distribution(split).quantile([self.level])[:, 0]

    def predict_remaining(self, split) -> np.ndarray:
        return self.inner.predict_remaining_distribution(split).quantile([self.level])[:, 0]
