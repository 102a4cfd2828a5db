"""OUTLETS trained to convergence: with `train.patience` it scores its objective on the
validation rows after every epoch, stops once that has not improved for `patience` epochs, keeps
the best epoch's weights, and records the budget and where it stopped."""

from __future__ import annotations

import logging

import pytest
import torch
from helpers.worlds import draft_for, tiny_views, tiny_world

import lenbench.outlets.train as train_mod
from baselines.outlets import Outlets
from lenbench.outlets.batches import TrainConfig

SMALL = {"ttt_length": 3, "max_len": 12, "batch_tokens": 64, "warmup_steps": 1, "lr": 3e-3}


def _trainable(draft) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in draft.named_parameters() if p.requires_grad}


def test_stops_after_patience_epochs_and_keeps_the_best_weights(monkeypatch) -> None:
    torch.set_num_threads(1)
    target, seqs = tiny_world(n=24)
    draft = draft_for(target, seqs)
    losses = iter([5.0, 4.0, 4.5, 4.6, 4.7, 1.0])  # best at epoch 1; never reaches the 1.0
    snapshots = []

    def scripted(draft, *args, **kwargs) -> float:
        snapshots.append(_trainable(draft))
        return next(losses)

    monkeypatch.setattr(train_mod, "validation_loss", scripted)
    cfg = TrainConfig(**SMALL, epochs=10, patience=2)
    out = train_mod.train_draft(draft, target, seqs[:16], cfg, progress=False,
                                val_seqs=seqs[16:])
    assert out["stopped"] == "converged" and out["epochs_run"] == 4
    assert [h["val_loss"] for h in out["history"]] == [5.0, 4.0, 4.5, 4.6]
    assert out["validation"] == {"patience": 2, "rows": 8, "best_epoch": 1, "best_loss": 4.0}
    assert out["budget"]["epochs"] == 10
    final = _trainable(draft)
    assert not all(torch.equal(final[n], snapshots[-1][n]) for n in final)  # it moved on...
    assert all(torch.equal(final[n], snapshots[1][n]) for n in final)  # ...and went back


def test_a_loss_still_falling_uses_the_whole_budget(monkeypatch) -> None:
    target, seqs = tiny_world(n=24)
    draft = draft_for(target, seqs)
    losses = iter([3.0, 2.0, 1.0])
    monkeypatch.setattr(train_mod, "validation_loss", lambda *a, **k: next(losses))
    out = train_mod.train_draft(draft, target, seqs[:16], TrainConfig(**SMALL, epochs=3,
                                                                      patience=1),
                                progress=False, val_seqs=seqs[16:])
    assert out["stopped"] == "budget" and out["epochs_run"] == 3
    assert out["validation"]["best_epoch"] == 2


def test_validation_loss_is_the_objective_on_held_out_rows() -> None:
    torch.set_num_threads(1)
    target, seqs = tiny_world(n=24)
    draft = draft_for(target, seqs)
    cfg = TrainConfig(**SMALL, epochs=1)
    before = train_mod.validation_loss(draft, target, seqs[16:], cfg)
    again = train_mod.validation_loss(draft, target, seqs[16:], cfg)
    assert before == again and before > 0  # no gradient step, no state change
    train_mod.train_draft(draft, target, seqs, TrainConfig(**{**SMALL, "epochs": 6}),
                          progress=False)
    assert train_mod.validation_loss(draft, target, seqs[16:], cfg) < before


def test_patience_needs_validation_rows(caplog) -> None:
    target, seqs = tiny_world(n=24)
    caplog.set_level(logging.WARNING)
    out = train_mod.train_draft(draft_for(target, seqs), target, seqs,
                                TrainConfig(**SMALL, epochs=2, patience=1), progress=False)
    assert out["stopped"] == "budget" and "validation" not in out
    assert any("no validation rows" in m for m in caplog.messages)
    with pytest.raises(ValueError, match="patience"):
        TrainConfig(patience=-1)


def test_the_predictor_watches_its_validation_split(tmp_path) -> None:
    """Outlets.fit passes the harness's val split: each phase's record names its rows, and
    sd_only's head phase watches them too."""
    torch.set_num_threads(1)
    views = tiny_views(tmp_path, pattern=("train", "val", "test"))
    train, val = views["train"], views["val"]
    pred = Outlets(variant="sd_only", draft_vocab_size=48, progress=False,
                   train={**SMALL, "epochs": 3, "patience": 1})
    pred.fit(train, val)
    training = pred._report["training"]
    for phase in ("backbone", "length_head"):
        assert training[phase]["validation"]["rows"] == len(val)
        assert all("val_loss" in h for h in training[phase]["history"])
        assert training[phase]["stopped"] in ("converged", "budget")
    assert pred._report["train_config"]["patience"] == 1
