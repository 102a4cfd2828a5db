"""Small-head training shared by feature-based predictors: standardise, fit with early stopping.

Probes and classifiers differ in their output layer and loss, not in how a few-layer MLP is fitted
to frozen features, so that part lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np
import torch
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from torch import nn


def mlp(sizes: list[int]) -> nn.Sequential:
    """Linear layers with ReLU between them (none after the last)."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Standardizer:
    """Per-feature z-scoring fitted on train (hidden states have a few huge dimensions)."""

    def fit(self, x: np.ndarray) -> Standardizer:
        self.mean = x.mean(0, dtype=np.float64).astype(np.float32)
        self.std = x.std(0, dtype=np.float64).astype(np.float32) + 1e-6
        return self

    def __call__(self, x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(((x - self.mean) / self.std).astype(np.float32))


class AdamW:
    """torch.optim.AdamW (default betas and eps, no amsgrad) on dense real parameters, as a
    plain loop of foreach operations.

    Each step performs, parameter by parameter, the same element-wise operations with the same
    scalars as `torch.optim.AdamW` (decoupled weight decay, moment updates, bias-corrected
    step), so the parameters after any number of steps are bit for bit those of
    `torch.optim.AdamW` (tests/test_heads_training.py). On the CPU the foreach operations loop
    over the tensors in C++, and the step skips the generic optimizer's bookkeeping (hooks,
    profiling scopes, device grouping): a small head's step costs a fraction of it. A parameter
    without a gradient is skipped and keeps its own step count, as there.
    """

    def __init__(self, params, lr: float = 1e-3, weight_decay: float = 1e-2,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = list(params)
        self.lr, self.weight_decay, self.eps = float(lr), float(weight_decay), float(eps)
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format)
                        for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format)
                           for p in self.params]
        self.steps = [0] * len(self.params)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        live = [i for i, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params = [self.params[i] for i in live]
        grads = [self.params[i].grad for i in live]
        exp_avg = [self.exp_avg[i] for i in live]
        exp_avg_sq = [self.exp_avg_sq[i] for i in live]
        for i in live:
            self.steps[i] += 1
        lr, beta1, beta2 = self.lr, self.beta1, self.beta2
        if self.weight_decay != 0:
            torch._foreach_mul_(params, 1 - lr * self.weight_decay)
        torch._foreach_lerp_(exp_avg, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sq, beta2)
        torch._foreach_addcmul_(exp_avg_sq, grads, grads, 1 - beta2)
        # the scalars as torch computes them from each parameter's step count (a float)
        counts = [float(self.steps[i]) for i in live]
        step_size = [-(lr / (1 - beta1 ** n)) for n in counts]
        correction2_sqrt = [(1 - beta2 ** n) ** 0.5 for n in counts]
        denom = torch._foreach_sqrt(exp_avg_sq)
        torch._foreach_div_(denom, correction2_sqrt)
        torch._foreach_add_(denom, self.eps)
        torch._foreach_addcdiv_(params, exp_avg, denom, step_size)


def train_head(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    x_val: torch.Tensor | None = None,
    y_val: torch.Tensor | None = None,
    epochs: int = 30,
    lr: float = 1e-3,
    weight_decay: float = 1e-4,
    batch_size: int = 256,
    seed: int = 0,
    patience: int = 5,
    description: str = "fit",
    progress: bool = True,
) -> dict:
    """AdamW on minibatches; keep the weights of the best validation epoch (or the last)."""
    gen = torch.Generator().manual_seed(seed)
    opt = AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, bad, history = float("inf"), None, 0, []
    with Progress(TextColumn(f"[bold]{description}"), BarColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                  disable=not progress) as bar:
        task = bar.add_task(description, total=epochs, info="")
        for epoch in range(epochs):
            model.train()
            order = torch.randperm(len(x), generator=gen)
            total = 0.0
            for start in range(0, len(x), batch_size):
                idx = order[start: start + batch_size]
                # index_select: the rows x[idx] gathers, without advanced indexing's overhead
                loss = loss_fn(model(x.index_select(0, idx)), y.index_select(0, idx))
                opt.zero_grad()
                loss.backward()
                opt.step()
                total += loss.item() * len(idx)
            train_loss = total / max(len(x), 1)
            val_loss = None
            if x_val is not None and len(x_val):
                model.eval()
                with torch.no_grad():
                    val_loss = float(loss_fn(model(x_val), y_val))
                if val_loss < best - 1e-6:
                    best, bad = val_loss, 0
                    best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                else:
                    bad += 1
            history.append({"epoch": epoch, "train_loss": train_loss, "val_loss": val_loss})
            bar.update(task, advance=1, info=f"loss {train_loss:.4f}" +
                       (f" val {val_loss:.4f}" if val_loss is not None else ""))
            if val_loss is not None and bad >= patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return {"epochs_run": len(history), "best_val_loss": None if best_state is None else best,
            "final_train_loss": history[-1]["train_loss"] if history else None}


def count_parameters(*modules: nn.Module) -> int:
    return sum(p.numel() for m in modules for p in m.parameters() if p.requires_grad)
