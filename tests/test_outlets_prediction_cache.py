"""OUTLETS's prediction cache: variants scored on the same rows run the target over them once,
their predictions are those of an online pass bit for bit, and rows that differ (the causality
audit's edited copies) never read another row's features."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers.worlds import tiny_views, tiny_world

import lenbench.outlets.prediction_cache as cache_mod
import lenbench.outlets.train as train_mod
from baselines.outlets import Outlets
from lenbench.outlets.batches import Sequence
from lenbench.outlets.prediction_cache import STAGE, prediction_config
from lenbench.outlets.target_cache import CacheHome
from lenbench.scoring.audit import audit_causality
from lenbench.stages import Stage

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
    """How often the target runs for prediction (online batches)."""
    calls = {"online": 0}
    forward = train_mod.target_forward

    def online(*args, **kwargs):
        calls["online"] += 1
        return forward(*args, **kwargs)

    monkeypatch.setattr(train_mod, "target_forward", online)
    return calls


def test_variants_scored_on_the_same_rows_share_one_target_pass(tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    views = tiny_views(tmp_path)
    train, test = views["train"], views["test"]
    preds = [fitted(train, "lp_only"), fitted(train, "no_decoder", seed=1),
             fitted(train, "lp_only", seed=2)]
    online = fitted(train, "lp_only", prediction_cache_max_bytes=0)  # seed 0 again, uncached
    calls = counted(monkeypatch)
    static, dynamic = test.static_view(Outlets.needs), test.hide_labels()

    def scored(pred):
        return pred.predict(static), pred.predict_remaining(dynamic)

    first = scored(preds[0])  # runs the target and stores both passes on the way
    assert calls["online"] > 2 and len(prediction_folders(tmp_path)) == 2
    calls["online"] = 0
    later = [scored(p) for p in preds]  # every variant and seed reads them, the first one too
    assert calls["online"] == 0 and len(prediction_folders(tmp_path)) == 2
    reference = scored(online)  # the same draft, the target run per batch, nothing stored
    assert calls["online"] > 2 and len(prediction_folders(tmp_path)) == 2
    for stored, read, plain in zip(first, later[0], reference, strict=True):
        assert np.array_equal(stored, plain) and np.array_equal(read, plain)
    # the drafts differ, so what they read from the one pass differs too
    assert not np.array_equal(later[0][1], later[1][1])
    assert not np.array_equal(later[0][1], later[2][1])
    assert len(np.unique(first[1])) > len(first[1]) // 2
    modes = [[r["mode"] for r in p.report()["prediction_cache"]] for p in (*preds, online)]
    assert modes == [["built", "built", "read", "read"], ["read", "read"], ["read", "read"],
                     ["online", "online"]]


def test_the_key_moves_with_every_token_the_order_and_the_batching(tmp_path) -> None:
    target, seqs = tiny_world()
    home = CacheHome(tmp_path, "tiny-target")

    def key(rows=seqs, batch_tokens=48, where=home) -> str:
        return Stage(tmp_path, STAGE, prediction_config(target, where, rows, batch_tokens)).key

    edited = [Sequence(s.ids.copy(), s.n, s.L) for s in seqs]
    edited[3].ids[-1] = (edited[3].ids[-1] + 1) % 64  # the last token of one row
    same = [Sequence(s.ids.copy(), s.n, s.L) for s in seqs]
    keys = {"base": key(), "a token": key(rows=edited), "order": key(rows=seqs[::-1]),
            "batching": key(batch_tokens=64), "fewer rows": key(rows=seqs[1:]),
            "target": key(where=CacheHome(tmp_path, "another-target"))}
    assert len(set(keys.values())) == len(keys), keys
    assert key(rows=same) == keys["base"]


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


def test_a_pass_over_the_byte_bound_or_the_free_disk_runs_online(tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    views = tiny_views(tmp_path)
    test = views["test"].hide_labels()
    bounded = fitted(views["train"], "lp_only", prediction_cache_max_bytes=1000)
    expected = bounded.predict_remaining(test)
    pred = fitted(views["train"], "lp_only")  # trained before the disk fills
    monkeypatch.setattr(cache_mod.shutil, "disk_usage",
                        lambda path: SimpleNamespace(total=10**9, used=10**9, free=10**6))
    assert np.array_equal(pred.predict_remaining(test), expected)
    assert prediction_folders(tmp_path) == []
    assert [r["reason"] for r in (*bounded._passes, *pred._passes)] == \
        ["over prediction_cache_max_bytes (1000)", "disk space"]


def test_a_failed_pass_leaves_nothing_behind(tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    views = tiny_views(tmp_path)
    test = views["test"].hide_labels()
    pred = fitted(views["train"], "lp_only")
    first_step, batches = pred.draft.first_step, []

    def fails_on_the_second_batch(*args, **kwargs):
        batches.append(1)
        if len(batches) == 2:
            raise RuntimeError("out of memory")
        return first_step(*args, **kwargs)

    monkeypatch.setattr(pred.draft, "first_step", fails_on_the_second_batch)
    with pytest.raises(RuntimeError, match="out of memory"):
        pred.predict_remaining(test)
    assert prediction_folders(tmp_path) == []
    assert not list((tmp_path / "cache" / STAGE).glob("*.partial"))
    monkeypatch.undo()
    torch.set_num_threads(1)
    pred.predict_remaining(test)  # the next pass stores it whole
    assert [r["mode"] for r in pred._passes] == ["built"]
