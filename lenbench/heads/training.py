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
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
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
                loss = loss_fn(model(x[idx]), y[idx])
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
