"""Quantile regression heads: the pinball loss and a monotone output layer.

A head that emits one value per quantile level tau is trained with the pinball (check) loss
rho_tau(u) = max(tau * u, (tau - 1) * u), u = y - q_tau, whose expectation is minimised by the
tau-quantile of y. Independent outputs can cross; `MonotoneQuantiles` parametrises them as a base
plus cumulative softplus increments, so q_1 < q_2 < ... holds by construction and no repair is
needed at prediction time. A quantile of a monotone transform is the transform of the quantile, so
a head fitted on log1p(length) gives length quantiles by expm1.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from lenbench.heads.training import mlp


def pinball_loss(pred: torch.Tensor, target: torch.Tensor, levels,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean pinball loss of quantiles pred [..., Q] at `levels` (Q) against target [...]:
    averaged over the levels, then over positions (only where `mask`, when given)."""
    if pred.shape[-1] != len(levels) or pred.shape[:-1] != target.shape:
        raise ValueError(f"pinball_loss: pred {tuple(pred.shape)} must be target "
                         f"{tuple(target.shape)} plus one axis of {len(levels)} levels")
    pred = pred.float()
    tau = torch.as_tensor(levels, dtype=pred.dtype, device=pred.device)
    u = target.float().unsqueeze(-1) - pred
    per_position = torch.maximum(tau * u, (tau - 1) * u).mean(-1)
    if mask is None:
        return per_position.mean()
    mask = mask.to(per_position.dtype)
    return (per_position * mask).sum() / mask.sum().clamp_min(1)


class MonotoneQuantiles(nn.Module):
    """[..., Q] unconstrained -> [..., Q] increasing: x_0, x_0 + softplus(x_1), ... ."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = torch.cumsum(F.softplus(x[..., 1:]), dim=-1)
        return torch.cat((x[..., :1], x[..., :1] + steps), dim=-1)


@torch.no_grad()
def start_at_quantiles(head: nn.Sequential, target: torch.Tensor, levels) -> None:
    """Set the bias of the head's last linear layer so that, before training, a zero input to it
    gives the marginal quantiles of `target` at `levels`: the pinball gradient is weak on the
    spread, and a head that starts at the constant predictor's spread needs no steps to find
    it. The monotone layer comes after the linear one (`quantile_mlp`)."""
    linear = [m for m in head if isinstance(m, nn.Linear)][-1]
    # numpy: torch.quantile refuses inputs over 2^24 values (a large train split's positions)
    q = torch.from_numpy(np.quantile(target.detach().double().cpu().numpy().reshape(-1),
                                     np.asarray(levels, dtype=np.float64)))
    gaps = q.diff().clamp_min(1e-3)
    bias = torch.cat((q[:1], torch.log(torch.expm1(gaps))))  # softplus^-1 of the gaps
    linear.bias.copy_(bias.to(linear.bias.dtype))


def quantile_mlp(sizes: list[int], n_levels: int) -> nn.Sequential:
    """`mlp(sizes + [n_levels])` followed by the monotone layer (ReLU between linear layers)."""
    return nn.Sequential(*mlp([*sizes, n_levels]), MonotoneQuantiles())
