"""50-bin length classifier on a frozen target hidden state.

Uniform bins over [0, max_length) and one class more for lengths at or beyond max_length (the
answers the cap cut, when max_length is the cap: they are a lower bound, not a length in the
last bin); cross-entropy; decoded by the argmax class's centre (the paper's reading; the top
class's is max_length) and, as a variant, by the expectation of the centres under the softmax.
The softmax itself is the predicted distribution: a histogram over the same bins, uniform within
each, with the top class's mass in a one-token bin at max_length, where clipping to the cap keeps
it (`LengthDistribution.from_histogram(..., tail=)`).
"""

from __future__ import annotations

import numpy as np
import torch

from lenbench import Needs, Predictor
from lenbench.contract.distributions import LengthDistribution
from lenbench.heads.training import Standardizer, count_parameters, mlp, train_head


class BinClassifier(Predictor):
    def __init__(self, max_length: int = 256, n_bins: int = 50, layer: str = "mid",
                 hidden: int = 128, epochs: int = 40, lr: float = 1e-3, batch_size: int = 256,
                 weight_decay: float = 1e-4, progress: bool = True):
        if n_bins < 2 or max_length <= 0:
            raise ValueError("bin_classifier needs n_bins >= 2 and max_length > 0")
        self.max_length, self.n_bins, self.layer = max_length, n_bins, layer
        self.hidden, self.epochs, self.lr = hidden, epochs, lr
        self.batch_size, self.weight_decay, self.progress = batch_size, weight_decay, progress
        self.width = max_length / n_bins
        self.centres = np.r_[(np.arange(n_bins) + 0.5) * self.width, float(max_length)]
        self.edges = np.linspace(0.0, float(max_length), n_bins + 1)
        self.needs = Needs(hidden=(layer,), pooling=("last",))

    def _bins(self, lengths: np.ndarray) -> torch.Tensor:
        """The class of each length: its bin, or the top class at or beyond max_length."""
        bins = np.where(lengths >= self.max_length, self.n_bins,
                        np.clip(lengths // self.width, 0, self.n_bins - 1))
        return torch.from_numpy(bins.astype(np.int64))

    def fit(self, train, val=None) -> None:
        x = train.hidden(self.layer)
        self.scaler = Standardizer().fit(x)
        torch.manual_seed(self.seed)
        self.head = mlp([x.shape[1], self.hidden, self.n_bins + 1])
        xv = None if val is None else self.scaler(val.hidden(self.layer))
        yv = None if val is None else self._bins(val.lengths)
        train_head(self.head, self.scaler(x), self._bins(train.lengths),
                   torch.nn.functional.cross_entropy, xv, yv, epochs=self.epochs, lr=self.lr,
                   weight_decay=self.weight_decay, batch_size=self.batch_size, seed=self.seed,
                   description="fit bins", progress=self.progress)

    def _probs(self, split) -> np.ndarray:
        with torch.no_grad():
            return torch.softmax(self.head(self.scaler(split.hidden(self.layer))), -1).numpy()

    def predict(self, split) -> np.ndarray:
        return self.centres[self._probs(split).argmax(1)]

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return {"expectation": self._probs(split) @ self.centres}

    def predict_distribution(self, split) -> LengthDistribution:
        """The softmax over the bins, the top class's mass at max_length."""
        probs = self._probs(split)
        return LengthDistribution.from_histogram(self.edges, probs[:, :-1], tail=probs[:, -1])

    def num_parameters(self) -> int:
        return count_parameters(self.head)
