"""The constant predictor: every request gets the train split's median length.

The floor any useful predictor must beat; under SJF it reduces to FCFS.
"""

from __future__ import annotations

import numpy as np

from lenbench import Predictor


class ConstantPredictor(Predictor):
    def __init__(self, statistic: str = "median"):
        if statistic not in ("median", "mean"):
            raise ValueError(f"constant.statistic must be 'median' or 'mean', not {statistic!r}")
        self.statistic = statistic

    def fit(self, train, val=None) -> None:
        lengths = train.lengths.astype(float)
        self.value = float(np.median(lengths) if self.statistic == "median" else lengths.mean())

    def predict(self, split) -> np.ndarray:
        return np.full(len(split), self.value)

    def num_parameters(self) -> int:
        return 1
