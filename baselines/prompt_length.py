"""Prompt length regression: output length as a linear function of prompt token count.

A text-free baseline that tells whether a predictor learned more than "long asks, long answers".
"""

from __future__ import annotations

import numpy as np

from lenbench import Needs, Predictor


class PromptLengthPredictor(Predictor):
    needs = Needs(text=True)

    def fit(self, train, val=None) -> None:
        x = train.prompt_lengths.astype(float)
        y = np.log1p(train.lengths.astype(float))  # fit in log space: lengths are heavy-tailed
        design = np.stack([np.ones_like(x), x], axis=1)
        self.coef, *_ = np.linalg.lstsq(design, y, rcond=None)

    def predict(self, split) -> np.ndarray:
        x = split.prompt_lengths.astype(float)
        return np.maximum(np.expm1(self.coef[0] + self.coef[1] * x), 1.0)

    def num_parameters(self) -> int:
        return 2
