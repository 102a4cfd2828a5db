"""A fit under the harness's cache folder keeps its state after every epoch: an interrupted fit
resumes where it stopped and ends where an uninterrupted one does, and a finished fit is
loaded, not trained again (lenbench/outlets/checkpoint.py)."""

from __future__ import annotations

import sys
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
    spent = [e["seconds"] + e["val_seconds"] for e in record["history"]]
    assert earlier_seconds(record) == pytest.approx(sum(spent[:2])) and spent[0] > 0


def test_a_finished_fit_is_loaded_and_a_changed_one_trains(tmp_path: Path, monkeypatch) -> None:
    home = CacheHome(tmp_path, "tiny")
    first, record = fit(home)

    def no_training(*args, **kwargs):
        raise Interrupted("trained again")

    monkeypatch.setattr(train_module, "batch_loss", no_training)
    again, reused = fit(home)
    assert same_weights(again, first)
    assert reused["checkpoint"]["reused"] and reused["history"] == record["history"]
    assert earlier_seconds(reused) == pytest.approx(
        sum(e["seconds"] + e["val_seconds"] for e in record["history"]))
    for changed in ({"cfg": TrainConfig(**{**CFG.to_dict(), "lr": 1e-3})}, {"seed": 1},
                    {"home": CacheHome(tmp_path, "another-target")}):
        with pytest.raises(Interrupted, match="trained again"):
            fit(**{"home": home, **changed})


def test_early_stopping_survives_a_cut_before_and_after_it_stops(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """The validation loss is best at epoch 1 and worse after: with patience 2 the fit stops
    after epoch 3 and keeps epoch 1's weights, however it was cut."""
    real = train_module.validation_loss
    worse = {0: 1.0, 1: 0.0, 2: 0.5, 3: 0.6}

    def shaped(*args, **kwargs):  # the real pass, then a shape set by the caller's epoch
        return real(*args, **kwargs) + 10 * worse.get(sys._getframe(1).f_locals["epoch"], 1.0)

    monkeypatch.setattr(train_module, "validation_loss", shaped)
    cfg = TrainConfig(**{**CFG.to_dict(), "epochs": 6})
    whole, whole_record = fit(CacheHome(tmp_path / "whole", "tiny"), cfg)
    assert whole_record["stopped"] == "converged" and whole_record["epochs_run"] == 4
    assert whole_record["validation"]["best_epoch"] == 1
    save = TrainCheckpoint.save_epoch
    for cut in (2, 3):  # while watching, and after the stop but before the fit was kept
        home = CacheHome(tmp_path / f"cut{cut}", "tiny")

        def save_then_die(self, state, cut=cut):
            save(self, state)
            if state["history"][-1]["epoch"] == cut:
                raise Interrupted

        monkeypatch.setattr(TrainCheckpoint, "save_epoch", save_then_die)
        with pytest.raises(Interrupted):
            fit(home, cfg)
        monkeypatch.setattr(TrainCheckpoint, "save_epoch", save)
        resumed, record = fit(home, cfg)
        assert record["checkpoint"]["resumed_after_epoch"] == cut
        assert record["validation"] == whole_record["validation"], cut
        assert same_weights(resumed, whole), cut


def test_the_head_phase_resumes_on_the_trained_backbone(tmp_path: Path, monkeypatch) -> None:
    """sd_only: a backbone phase, then the length head alone; its key holds the weights it
    starts from, so a cut head phase resumes on the same backbone."""
    torch.set_num_threads(1)
    target, seqs = tiny_world()
    head_cfg = TrainConfig(**{**CFG.to_dict(), "sd_weight": 0.0, "patience": 0, "epochs": 3})

    def two_phases(home: CacheHome):
        draft = draft_for(target, seqs)
        train_draft(draft, target, seqs, CFG, progress=False, home=home)
        record = train_draft(draft, target, seqs, head_cfg, train_backbone=False,
                             progress=False, home=home)
        return draft, record

    whole, _ = two_phases(CacheHome(tmp_path / "whole", "tiny"))
    home = CacheHome(tmp_path / "cut", "tiny")
    save = TrainCheckpoint.save_epoch

    calls = []

    def cut_the_head_phase(self, state):  # the second fit's key is the head phase's
        save(self, state)
        calls.append(self.key)
        if len(set(calls)) == 2 and state["history"][-1]["epoch"] == 0:
            raise Interrupted

    monkeypatch.setattr(TrainCheckpoint, "save_epoch", cut_the_head_phase)
    with pytest.raises(Interrupted):
        two_phases(home)
    monkeypatch.setattr(TrainCheckpoint, "save_epoch", save)
    resumed, record = two_phases(home)
    assert record["checkpoint"]["resumed_after_epoch"] == 0
    assert same_weights(resumed, whole)


def test_kept_weights_load_around_the_shared_embedding_and_refuse_another_draft() -> None:
    target, seqs = tiny_world()
    draft, other = draft_for(target, seqs), draft_for(target, seqs)
    with torch.no_grad():
        for p in draft.fc.parameters():
            p.add_(1.0)
    kept = draft.trained_state()
    assert "embed_tokens.weight" not in kept
    other.load_trained_state(kept)
    assert same_weights(draft, other)
    assert other.embed_tokens.weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    with pytest.raises(ValueError, match="do not fit"):
        other.load_trained_state({**kept, "extra.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="do not fit"):
        other.load_trained_state({k: v for k, v in kept.items() if not k.startswith("fc.")})
    wider = {k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) if k == "fc.weight" else v
             for k, v in kept.items()}
    with pytest.raises(ValueError, match="(?s)do not fit.*size mismatch"):
        other.load_trained_state(wider)


def test_a_checkpoint_of_another_draft_names_the_folders_to_delete(tmp_path: Path) -> None:
    target, seqs = tiny_world()
    ckpt = TrainCheckpoint.for_fit(CacheHome(tmp_path, "tiny"), draft=draft_for(target, seqs),
                                   seqs=seqs, cfg=CFG, seed=0, train_backbone=True,
                                   cache_record={}, val_seqs=None, val_cached=False)
    with pytest.raises(ValueError, match=f"delete {ckpt.stage.path} and {ckpt.stage.partial}"):
        ckpt.put_back(draft_for(target, seqs), {"extra.weight": torch.zeros(1)})
