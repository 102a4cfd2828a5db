"""OUTLETS's prediction cache: variants scored on the same rows run the target over them once,
their predictions are those of an online pass bit for bit, and rows that differ (the causality
audit's edited copies) never read another row's features."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from helpers.worlds import tiny_views

import lenbench.outlets.train as train_mod
from baselines.outlets import Outlets
from lenbench.outlets.prediction_cache import STAGE
from lenbench.outlets.target_cache import TargetCache
from lenbench.scoring.audit import audit_causality

SMALL = {"ttt_length": 3, "max_len": 12, "batch_tokens": 64, "warmup_steps": 1, "epochs": 1,
         "max_steps": 3, "lr": 3e-3}


def fitted(train, variant: str, seed: int = 0, **options) -> Outlets:
    pred = Outlets(variant=variant, draft_vocab_size=48, max_length=None, progress=False,
                   batch_tokens=48, train=SMALL, **options)  # several prediction batches
    pred.seed = seed
    pred.fit(train)
    with torch.no_grad():  # a few steps leave z near 0 (every estimate clipped to 1): spread it
        pred.draft.length_head[-1].weight.mul_(30.0)
        pred.draft.length_head[-1].bias.add_(2.5)
    return pred


def prediction_folders(folder: Path) -> list[Path]:
    stage = folder / "cache" / STAGE
    return sorted(p for p in stage.iterdir() if p.is_dir()) if stage.exists() else []


def counted(monkeypatch) -> dict[str, int]:
    """How often the target runs for prediction: online batches and prediction-cache builds."""
    calls = {"online": 0, "builds": 0}
    forward, write = train_mod.target_forward, TargetCache.write

    def online(*args, **kwargs):
        calls["online"] += 1
        return forward(*args, **kwargs)

    def build(*args, **kwargs):
        calls["builds"] += 1
        return write(*args, **kwargs)

    monkeypatch.setattr(train_mod, "target_forward", online)
    monkeypatch.setattr(TargetCache, "write", staticmethod(build))
    return calls


def test_variants_scored_on_the_same_rows_share_one_target_pass(tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    views = tiny_views(tmp_path)
    train, test = views["train"], views["test"]
    preds = [fitted(train, "lp_only"), fitted(train, "no_decoder", seed=1),
             fitted(train, "lp_only", seed=2)]
    online = fitted(train, "lp_only", state_cache_max_bytes=0)  # lp_only seed 0 again, uncached
    calls = counted(monkeypatch)
    static, dynamic = test.static_view(Outlets.needs), test.hide_labels()
    scored = [(p.predict(static), p.predict_remaining(dynamic)) for p in preds]
    # one build per kind of row set (the static rows, the dynamic rows), no online target pass
    assert calls == {"online": 0, "builds": 2}
    assert len(prediction_folders(tmp_path)) == 2
    # the same rows predicted online: the same values, bit for bit, from a target pass per batch
    reference = (online.predict(static), online.predict_remaining(dynamic))
    assert calls["online"] > 2 and calls["builds"] == 2
    for cached, plain in zip(scored[0], reference, strict=True):
        assert np.array_equal(cached, plain)
    # the drafts differ, so what they read from the one pass differs too
    assert not np.array_equal(scored[0][1], scored[1][1])
    assert not np.array_equal(scored[0][1], scored[2][1])
    assert len(np.unique(scored[0][1])) > len(scored[0][1]) // 2


def test_the_audit_reads_no_features_of_the_rows_it_edits(tmp_path) -> None:
    torch.set_num_threads(1)
    views = tiny_views(tmp_path)
    pred = fitted(views["train"], "outlets")
    test = views["test"].hide_labels()
    pred.predict_remaining(test)  # the scored rows' cache exists before the audit runs
    before = prediction_folders(tmp_path)
    result = audit_causality(pred, test, n_rows=8, audit_seed=0)
    assert result["passed"] and result["max_abs_change"] < 1e-3, result
    assert set(before) < set(prediction_folders(tmp_path))  # the edited rows got their own pass
    # a draft that looks one token ahead is still caught with every row set cached
    peek = Outlets(draft_vocab_size=48, max_length=None, progress=False, batch_tokens=48)
    peek.draft, peek.train_cfg = pred.draft, pred.train_cfg

    def one_ahead(split, seqs, positions):
        return Outlets._predict_log(peek, split, seqs, [p + 1 for p in positions])

    peek._predict_log = one_ahead
    assert audit_causality(peek, test, audit_seed=0)["passed"] is False


def test_a_pass_over_the_byte_bound_runs_online(tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    views = tiny_views(tmp_path)
    pred = fitted(views["train"], "lp_only", state_cache_max_bytes=1000)
    calls = counted(monkeypatch)
    pred.predict_remaining(views["test"].hide_labels())
    assert calls["builds"] == 0 and calls["online"] > 0
    assert prediction_folders(tmp_path) == []
