"""MLP probe on a frozen target hidden state (OUTLETS, arXiv 2609.01068, App. B.4).

Static: a head on the state after prefill (last prompt position) regresses log1p(L).
Dynamic: a second head on the state at each response step t regresses log1p(L - t).
Head shape H -> H/2 -> H/4 -> 1 with ReLU, the same as the OUTLETS length head.
Predictions are clipped to what the protocol allows: [1, max_length] for the total length and
[1, max_length - t] for the remaining length at step t (an unclipped log-space head can
extrapolate far past the generation cap on states unlike its training data).

`MLPQuantileProbe` swaps the output layer for one value per quantile level, monotone by
construction and trained with the pinball loss on the same log1p target: quantiles of log1p(L)
are log1p of quantiles of L, so expm1 of the outputs is the length distribution. Its point
prediction is the median (the MAE-optimal point), not a separate MSE head.
"""

from __future__ import annotations

import numpy as np
import torch

from lenbench import Needs, Predictor
from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.heads.quantile_loss import pinball_loss, quantile_mlp, start_at_quantiles
from lenbench.heads.training import Standardizer, count_parameters, mlp, train_head


def _widths(hidden: int) -> list[int]:
    return [hidden, max(hidden // 2, 1), max(hidden // 4, 1)]


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

    def _new_head(self, hidden: int, target: torch.Tensor) -> torch.nn.Module:
        return mlp([*_widths(hidden), 1])

    def _loss(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return _mse(pred, target)

    def _fit(self, x: np.ndarray, y: np.ndarray, xv, yv, name: str):
        scaler = Standardizer().fit(x)
        torch.manual_seed(self.seed)
        target = torch.from_numpy(np.log1p(y).astype(np.float32))
        head = self._new_head(x.shape[1], target)
        train_head(head, scaler(x), target, self._loss,
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
        """expm1 of the head's output, clipped row by row to [1, upper] (any output width)."""
        scaler, head = model
        with torch.no_grad():
            out = head(scaler(x)).double().numpy()
        upper = np.maximum(np.broadcast_to(np.asarray(upper, dtype=np.float64), (len(x),)), 1.0)
        return np.clip(np.expm1(out), 1.0, upper[:, None])

    def _static_upper(self):
        return np.inf if self.max_length is None else self.max_length

    def _remaining_upper(self, steps):
        return np.inf if self.max_length is None else self.max_length - steps.t

    def predict(self, split) -> np.ndarray:
        return self._apply(self.static, split.hidden(self.layer), self._static_upper())[:, 0]

    def predict_remaining(self, split) -> np.ndarray:
        steps = split.steps
        return self._apply(self.dynamic_head, steps.hidden(self.layer),
                           self._remaining_upper(steps))[:, 0]

    def num_parameters(self) -> int:
        heads = [self.static[1]] + ([self.dynamic_head[1]] if self.is_dynamic else [])
        return count_parameters(*heads)


class MLPQuantileProbe(MLPProbe):
    """The probe with quantile heads (pinball loss on log1p length, monotone outputs): the
    static head gives total-length quantiles, the dynamic head remaining-length quantiles."""

    def __init__(self, *args, levels: tuple[float, ...] = QUANTILE_LEVELS, **kwargs):
        super().__init__(*args, **kwargs)
        self.levels = tuple(float(q) for q in levels)
        if not self.levels or any(b <= a for a, b in zip(self.levels, self.levels[1:])) \
                or self.levels[0] <= 0 or self.levels[-1] >= 1:
            raise ValueError(f"mlp_quantile.levels must increase strictly within (0, 1): "
                             f"{list(self.levels)}")

    @property
    def dynamic_distributional(self) -> bool:
        return self.is_dynamic

    def _new_head(self, hidden: int, target: torch.Tensor) -> torch.nn.Module:
        head = quantile_mlp(_widths(hidden), len(self.levels))
        start_at_quantiles(head, target, self.levels)
        return head

    def _loss(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return pinball_loss(pred, target, self.levels)

    def _static_quantiles(self, split) -> np.ndarray:
        return self._apply(self.static, split.hidden(self.layer), self._static_upper())

    def _remaining_quantiles(self, split) -> np.ndarray:
        if not self.is_dynamic:
            raise NotImplementedError("mlp_quantile was built with dynamic=false")
        steps = split.steps
        return self._apply(self.dynamic_head, steps.hidden(self.layer),
                           self._remaining_upper(steps))

    def _median(self, values: np.ndarray) -> np.ndarray:
        """The 0.5 quantile, linear between the levels around it (as LengthDistribution reads
        quantiles), without a per-row loop."""
        levels = np.asarray(self.levels)
        j = int(np.clip(np.searchsorted(levels, 0.5) - 1, 0, max(len(levels) - 2, 0)))
        if len(levels) == 1:
            return values[:, 0]
        w = float(np.clip((0.5 - levels[j]) / (levels[j + 1] - levels[j]), 0.0, 1.0))
        return (1 - w) * values[:, j] + w * values[:, j + 1]

    def predict_distribution(self, split) -> LengthDistribution:
        return LengthDistribution.from_quantiles(self.levels, self._static_quantiles(split))

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        return LengthDistribution.from_quantiles(self.levels, self._remaining_quantiles(split))

    def predict(self, split) -> np.ndarray:
        return self._median(self._static_quantiles(split))

    def predict_remaining(self, split) -> np.ndarray:
        return self._median(self._remaining_quantiles(split))
