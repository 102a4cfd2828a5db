"""A fit under the harness's cache folder keeps its state after every epoch: an interrupted fit
resumes where it stopped and ends where an uninterrupted one does, and a finished fit is
loaded, not trained again (lenbench/outlets/checkpoint.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.worlds import draft_for, tiny_world

import lenbench.outlets.train as train_module
from lenbench.outlets.batches import TrainConfig
from lenbench.outlets.checkpoint import TrainCheckpoint, earlier_seconds
from lenbench.outlets.target_cache import CacheHome
from lenbench.outlets.train import train_draft

CFG = TrainConfig(epochs=4, lr=3e-3, warmup_steps=1, batch_tokens=64, ttt_length=2,
                  patience=2, target_cache="on")


class Interrupted(Exception):
    pass


def fit(home: CacheHome, cfg: TrainConfig = CFG, seed: int = 0):
    torch.set_num_threads(1)
    target, seqs = tiny_world()
    draft = draft_for(target, seqs)
    record = train_draft(draft, target, seqs[:18], cfg, seed, progress=False, home=home,
                         val_seqs=seqs[18:])
    return draft, record


def same_weights(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def test_an_interrupted_fit_resumes_and_ends_as_an_uninterrupted_one(tmp_path: Path,
                                                                      monkeypatch) -> None:
    whole, whole_record = fit(CacheHome(tmp_path / "whole", "tiny"))
    assert whole_record["checkpoint"]["resumed_after_epoch"] is None
    home = CacheHome(tmp_path / "cut", "tiny")
    save = TrainCheckpoint.save_epoch

    def save_then_die(self, state):  # killed right after keeping epoch 1
        save(self, state)
        if state["history"][-1]["epoch"] == 1:
            raise Interrupted

    monkeypatch.setattr(TrainCheckpoint, "save_epoch", save_then_die)
    with pytest.raises(Interrupted):
        fit(home)
    monkeypatch.undo()
    resumed, record = fit(home)
    assert record["checkpoint"]["resumed_after_epoch"] == 1 and not record["checkpoint"]["reused"]
    assert [e["epoch"] for e in record["history"]] == [e["epoch"] for e in whole_record["history"]]
    assert [e["val_loss"] for e in record["history"]] == \
        [e["val_loss"] for e in whole_record["history"]]
    assert record["validation"] == whole_record["validation"]
    assert same_weights(resumed, whole)
    assert earlier_seconds(record) == sum(e["seconds"] for e in record["history"][:2]) > 0


def test_a_finished_fit_is_loaded_and_a_changed_one_trains(tmp_path: Path, monkeypatch) -> None:
    home = CacheHome(tmp_path, "tiny")
    first, record = fit(home)

    def no_training(*args, **kwargs):
        raise Interrupted("trained again")

    monkeypatch.setattr(train_module, "batch_loss", no_training)
    again, reused = fit(home)
    assert same_weights(again, first)
    assert reused["checkpoint"]["reused"] and reused["history"] == record["history"]
    assert earlier_seconds(reused) == sum(e["seconds"] for e in record["history"])
    for changed in ({"cfg": TrainConfig(**{**CFG.to_dict(), "lr": 1e-3})}, {"seed": 1},
                    {"home": CacheHome(tmp_path, "another-target")}):
        with pytest.raises(Interrupted, match="trained again"):
            fit(**{"home": home, **changed})
