"""The small-head trainer: its AdamW is torch's bit for bit, and so are the heads it trains."""

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from lenbench.heads.quantile_loss import pinball_loss, quantile_mlp, start_at_quantiles
from lenbench.heads.training import AdamW, mlp, train_head


def _data(n: int = 700, d: int = 12, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    y = (x[:, :3].sum(1) + 0.1 * torch.randn(n, generator=g)).float()
    return x, y


def _mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(pred.squeeze(-1), target)


def _reference_train(model, x, y, loss_fn, x_val, y_val, epochs, lr, weight_decay, batch_size,
                     seed, patience=5) -> dict:
    """The trainer as written with torch.optim.AdamW and x[idx] batches: the reference."""
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    best, best_state, bad, history = float("inf"), None, 0, []
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
        history.append({"epoch": epoch, "train_loss": total / max(len(x), 1)})
        if val_loss is not None and bad >= patience:
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return {"epochs_run": len(history), "best_val_loss": None if best_state is None else best,
            "final_train_loss": history[-1]["train_loss"] if history else None}


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("weight_decay", [0.0, 1e-4, 0.05])
def test_adamw_steps_are_torch_adamw_bit_for_bit(weight_decay: float) -> None:
    x, y = _data()
    heads = []
    for _ in range(2):
        torch.manual_seed(3)
        heads.append(mlp([12, 8, 4, 1]))
    ours = AdamW(heads[0].parameters(), lr=3e-3, weight_decay=weight_decay)
    ref = torch.optim.AdamW(heads[1].parameters(), lr=3e-3, weight_decay=weight_decay)
    for step in range(300):
        idx = torch.arange(step * 37, step * 37 + 64) % len(x)
        for head, opt in ((heads[0], ours), (heads[1], ref)):
            opt.zero_grad()
            _mse(head(x[idx]), y[idx]).backward()
            opt.step()
    assert _same_weights(heads[0], heads[1])


def test_adamw_skips_a_parameter_without_gradient_as_torch_does() -> None:
    """A parameter left out of some steps keeps its own step count (its bias correction)."""
    x, y = _data()
    heads = []
    for _ in range(2):
        torch.manual_seed(4)
        heads.append(mlp([12, 6, 1]))
    ours = AdamW(heads[0].parameters(), lr=1e-2, weight_decay=1e-3)
    ref = torch.optim.AdamW(heads[1].parameters(), lr=1e-2, weight_decay=1e-3)
    for step in range(60):
        for head, opt in ((heads[0], ours), (heads[1], ref)):
            opt.zero_grad()
            _mse(head(x[:50]), y[:50]).backward()
            if step % 3 == 0:  # the first layer's bias gets no gradient on these steps
                head[0].bias.grad = None
            opt.step()
    assert _same_weights(heads[0], heads[1])
    ours.zero_grad()
    assert all(p.grad is None for p in heads[0].parameters())


@pytest.mark.parametrize("kind", ["mse", "classes", "quantiles"])
def test_train_head_matches_the_reference_trainer_bit_for_bit(kind: str) -> None:
    x, y = _data(n=900)
    xv, yv = _data(n=150, seed=1)
    if kind == "mse":
        def build():
            return mlp([12, 8, 4, 1])
        loss_fn = _mse
    elif kind == "classes":
        y, yv = (y > 0).long() + (y > 1).long(), (yv > 0).long() + (yv > 1).long()

        def build():
            return mlp([12, 16, 3])
        loss_fn = F.cross_entropy
    else:
        levels = (0.1, 0.5, 0.9)

        def build():
            head = quantile_mlp([12, 8], len(levels))
            start_at_quantiles(head, y, levels)
            return head

        def loss_fn(pred, target):
            return pinball_loss(pred, target, levels)
    results, heads = [], []
    for trainer in (train_head, _reference_train):
        torch.manual_seed(7)
        head = build()
        kwargs = dict(epochs=12, lr=2e-3, weight_decay=1e-4, batch_size=64, seed=5)
        if trainer is train_head:
            kwargs["progress"] = False
        results.append(trainer(head, x, y, loss_fn, xv, yv, **kwargs))
        heads.append(head)
    assert results[0] == results[1]
    assert _same_weights(heads[0], heads[1])
    assert np.isfinite(results[0]["final_train_loss"])
