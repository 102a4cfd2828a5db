"""EGTP: entropy-guided token pooling + soft-label head (ForeLen, arXiv 2602.11812).

The prompt's hidden states are pooled with weights softmax(per-token next-token entropy), so the
tokens where the model is uncertain dominate. The features stage computes that pool
(pooling="entropy"); this class only fits the shared soft-label head (baselines/soft_bins.py) on
it. Pooling "last" / "mean" and the layer role are ablations by config. Max pooling, which the
paper also ablates, is not extracted by lenbench and is therefore not offered.
"""

from __future__ import annotations

import numpy as np

from baselines.soft_bins import SoftBinRegressor
from lenbench import Needs, Predictor
from lenbench.contract.distributions import LengthDistribution


class EGTP(Predictor):
    def __init__(self, layer: str = "last", pooling: str = "entropy",
                 max_length: float | None = None, n_bins: int = 20, hidden: int = 512,
                 dropout: float = 0.1, ce_weight: float = 0.95, epochs: int = 40,
                 lr: float = 1e-3, batch_size: int = 256, weight_decay: float = 1e-4,
                 progress: bool = True):
        self.layer, self.pooling, self.max_length = layer, pooling, max_length
        self.head_args = {"n_bins": n_bins, "hidden": hidden, "dropout": dropout,
                          "ce_weight": ce_weight, "epochs": epochs, "lr": lr,
                          "batch_size": batch_size, "weight_decay": weight_decay,
                          "progress": progress}
        self.needs = Needs(hidden=(layer,), pooling=(pooling,))

    def _x(self, split) -> np.ndarray:
        return split.hidden(self.layer, self.pooling)

    def fit(self, train, val=None) -> None:
        # max_length=None: the longest train label ([I] the spec's L_max default)
        top = self.max_length or float(np.max(train.lengths))
        self.head = SoftBinRegressor(top, **self.head_args)
        self.head.fit(self._x(train), train.lengths,
                      None if val is None else self._x(val),
                      None if val is None else val.lengths,
                      seed=self.seed, description="fit egtp")

    def predict(self, split) -> np.ndarray:
        return np.maximum(self.head.predict(self._x(split)), 1.0)

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return {"argmax_bin": self.head.predict_argmax(self._x(split))}

    def predict_distribution(self, split) -> LengthDistribution:
        """The soft-label head's bin distribution (mean = predict where that is >= 1)."""
        return self.head.distribution(self._x(split))

    def num_parameters(self) -> int:
        return self.head.num_parameters()
