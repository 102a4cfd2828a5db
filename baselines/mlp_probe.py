"""MLP probe on a frozen target hidden state (OUTLETS, arXiv 2609.01068, App. B.4).

Static: a head on the state after prefill (last prompt position) regresses log1p(L).
Dynamic: a second head on the state at each response step t regresses log1p(L - t).
Head shape H -> H/2 -> H/4 -> 1 with ReLU, the same as the OUTLETS length head.
Predictions are clipped to what the protocol allows: [1, max_length] for the total length and
[1, max_length - t] for the remaining length at step t (an unclipped log-space head can
extrapolate far past the generation cap on states unlike its training data).
"""

from __future__ import annotations

import numpy as np
import torch

from lenbench import Needs, Predictor
from lenbench.training import Standardizer, count_parameters, mlp, train_head


def _head(hidden: int) -> torch.nn.Module:
    return mlp([hidden, max(hidden // 2, 1), max(hidden // 4, 1), 1])


def _mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(pred.squeeze(-1), target)


class MLPProbe(Predictor):
    def __init__(self, layer: str = "mid", dynamic: bool = True, epochs: int = 40,
                 lr: float = 1e-3, batch_size: int = 256, weight_decay: float = 1e-4,
                 max_train_steps: int = 200_000, max_length: int | None = None,
                 progress: bool = True):
        self.layer = layer
        self.max_length = max_length
        self.is_dynamic = dynamic
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.weight_decay = weight_decay
        self.max_train_steps = max_train_steps
        self.progress = progress
        self.needs = Needs(hidden=(layer,), pooling=("last",), steps=dynamic)

    @property
    def dynamic(self) -> bool:
        return self.is_dynamic

    def _fit(self, x: np.ndarray, y: np.ndarray, xv, yv, name: str):
        scaler = Standardizer().fit(x)
        torch.manual_seed(self.seed)
        head = _head(x.shape[1])
        train_head(head, scaler(x), torch.from_numpy(np.log1p(y).astype(np.float32)), _mse,
                   None if xv is None else scaler(xv),
                   None if yv is None else torch.from_numpy(np.log1p(yv).astype(np.float32)),
                   epochs=self.epochs, lr=self.lr, weight_decay=self.weight_decay,
                   batch_size=self.batch_size, seed=self.seed, description=name,
                   progress=self.progress)
        return scaler, head

    def _subsample(self, n: int) -> np.ndarray:
        if n <= self.max_train_steps:
            return np.arange(n)
        rng = np.random.default_rng(self.seed)
        return np.sort(rng.choice(n, self.max_train_steps, replace=False))

    def fit(self, train, val=None) -> None:
        xv = None if val is None else val.hidden(self.layer)
        yv = None if val is None else val.lengths
        self.static = self._fit(train.hidden(self.layer), train.lengths, xv, yv, "fit static")
        if self.is_dynamic:
            steps = train.steps
            pick = self._subsample(len(steps))
            x = steps.hidden(self.layer)[pick]
            y = steps.remaining[pick]
            xv = yv = None
            if val is not None:
                vs = val.steps
                xv, yv = vs.hidden(self.layer), vs.remaining
            self.dynamic_head = self._fit(x, y, xv, yv, "fit dynamic")

    @staticmethod
    def _apply(model, x: np.ndarray, upper) -> np.ndarray:
        scaler, head = model
        with torch.no_grad():
            out = head(scaler(x)).squeeze(-1).double().numpy()
        return np.clip(np.expm1(out), 1.0, np.maximum(upper, 1.0))

    def predict(self, split) -> np.ndarray:
        upper = np.inf if self.max_length is None else self.max_length
        return self._apply(self.static, split.hidden(self.layer), upper)

    def predict_remaining(self, split) -> np.ndarray:
        steps = split.steps
        upper = np.inf if self.max_length is None else self.max_length - steps.t
        return self._apply(self.dynamic_head, steps.hidden(self.layer), upper)

    def num_parameters(self) -> int:
        heads = [self.static[1]] + ([self.dynamic_head[1]] if self.is_dynamic else [])
        return count_parameters(*heads)
