"""The soft-label distribution head shared by EGTP and PLP (ForeLen, arXiv 2602.11812).

Length is split into K uniform bins over [0, max_length) and a top class K for lengths at or
beyond max_length (answers the cap cut, when max_length is the cap: a lower bound, not a length in
the last bin), with centre max_length; a sample in class i gets the soft label p_j ∝ exp(-|j - i|),
so near misses cost less than far ones. The head predicts a softmax over the K + 1 classes, read
out as the expectation of their centres (and, whole, as a histogram with the top class's mass in
a one-token bin at max_length, where clipping to the cap keeps it), and is trained with
lambda * CE(p, p_hat) + (1 - lambda) * MSE(y, y_hat). The MSE is on lengths divided by max_length
([I]: raw-token MSE would swamp the CE term). Both predictors fit this head the same way, so it
lives here once.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from lenbench.contract.distributions import LengthDistribution
from lenbench.heads.training import Standardizer, count_parameters, train_head


def soft_labels(bins: torch.Tensor, n_bins: int) -> torch.Tensor:
    """[N] true bin indices -> [N, K] soft labels p_j ∝ exp(-|j - i|) (rows sum to one)."""
    j = torch.arange(n_bins, device=bins.device)
    return torch.softmax(-(j[None, :] - bins[:, None]).abs().float(), dim=-1)


def head(in_dim: int, n_bins: int, hidden: int = 512, dropout: float = 0.1) -> nn.Module:
    """Linear(H, hidden)-ReLU-Dropout-Linear(hidden, K); hidden=0 gives a single Linear(H, K)."""
    if hidden <= 0:
        return nn.Linear(in_dim, n_bins)
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(hidden, n_bins))


class SoftBinRegressor:
    """Standardised features -> soft-label head; lengths in tokens in and out."""

    def __init__(self, max_length: float, n_bins: int = 20, hidden: int = 512,
                 dropout: float = 0.1, ce_weight: float = 0.95, epochs: int = 40,
                 lr: float = 1e-3, batch_size: int = 256, weight_decay: float = 1e-4,
                 progress: bool = True):
        if n_bins < 2 or max_length <= 0:
            raise ValueError("the soft-label head needs n_bins >= 2 and max_length > 0")
        self.max_length, self.n_bins = float(max_length), n_bins
        self.hidden, self.dropout, self.ce_weight = hidden, dropout, ce_weight
        self.epochs, self.lr, self.batch_size = epochs, lr, batch_size
        self.weight_decay, self.progress = weight_decay, progress
        # class centres in units of max_length, so the MSE term is on normalised lengths
        self.centres = torch.cat([torch.arange(n_bins, dtype=torch.float32).add(0.5).div(n_bins),
                                  torch.ones(1)])

    def _normalise(self, lengths: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.clip(lengths / self.max_length, 0.0, 1.0).astype(np.float32))

    def loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """lambda * soft-label CE + (1 - lambda) * MSE on y = length / max_length (clipped to 1:
        the top class)."""
        inside = (y * self.n_bins).long().clamp(0, self.n_bins - 1)
        bins = torch.where(y >= 1.0, self.n_bins, inside)
        logp = torch.log_softmax(logits, -1)
        ce = -(soft_labels(bins, self.n_bins + 1) * logp).sum(-1).mean()
        mse = ((logp.exp() @ self.centres) - y).pow(2).mean()
        return self.ce_weight * ce + (1 - self.ce_weight) * mse

    def fit(self, x: np.ndarray, lengths: np.ndarray, x_val: np.ndarray | None = None,
            val_lengths: np.ndarray | None = None, seed: int = 0,
            description: str = "fit") -> dict:
        self.scaler = Standardizer().fit(x)
        torch.manual_seed(seed)
        self.model = head(x.shape[1], self.n_bins + 1, self.hidden, self.dropout)
        has_val = x_val is not None and val_lengths is not None and len(x_val) > 0
        return train_head(
            self.model, self.scaler(x), self._normalise(lengths), self.loss,
            self.scaler(x_val) if has_val else None,
            self._normalise(val_lengths) if has_val else None,
            epochs=self.epochs, lr=self.lr, weight_decay=self.weight_decay,
            batch_size=self.batch_size, seed=seed, description=description,
            progress=self.progress)

    def probs(self, x: np.ndarray) -> np.ndarray:
        """[N, K + 1] predicted distribution over the bins and the top class."""
        self.model.eval()
        with torch.no_grad():
            return torch.softmax(self.model(self.scaler(x)), -1).double().numpy()

    def distribution(self, x: np.ndarray) -> LengthDistribution:
        """The distribution as a histogram over [0, max_length] in tokens, the top class's mass in
        a one-token bin at max_length."""
        edges = np.linspace(0.0, self.max_length, self.n_bins + 1)
        probs = self.probs(x)
        return LengthDistribution.from_histogram(edges, probs[:, :-1], tail=probs[:, -1])

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Expected length in tokens: sum_j p_hat_j * c_j."""
        return self.probs(x) @ (self.centres.double().numpy() * self.max_length)

    def predict_argmax(self, x: np.ndarray) -> np.ndarray:
        """The centre of the most probable class (a variant, for comparison with hard bins)."""
        return (self.centres.double().numpy() * self.max_length)[self.probs(x).argmax(1)]

    def num_parameters(self) -> int:
        return count_parameters(self.model)
