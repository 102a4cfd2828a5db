"""OUTLETS's shared training cache and its prediction progress lines: variants fitted on the same
rows build the target cache once, its key moves with what its bytes depend on and with nothing
else, training from it is training from the target, and prediction logs where it stands."""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.models import tiny_llama
from helpers.worlds import draft_for, tiny_views, tiny_world

import lenbench.outlets.train as train_mod
from baselines.outlets import Outlets
from lenbench.contract.views import SplitView
from lenbench.outlets.batches import Sequence, TrainConfig
from lenbench.outlets.target_cache import (
    FREE_MARGIN,
    STAGE,
    CacheHome,
    TargetCache,
    cache_bytes,
    cache_config,
)
from lenbench.outlets.vocab import build_draft_vocab
from lenbench.runtime.progress import ProgressLog
from lenbench.stages import stable_hash

SMALL = {"ttt_length": 3, "max_len": 12, "batch_tokens": 64, "warmup_steps": 1}


def world(folder: Path, key: str = "tiny-target") -> tuple[SplitView, SplitView]:
    views = tiny_views(folder, key=key)
    return views["train"], views["test"]


def fit(train: SplitView, variant: str = "outlets", seed: int = 0, **settings) -> Outlets:
    options = {k: settings.pop(k) for k in ("attention", "batch_tokens") if k in settings}
    pred = Outlets(variant=variant, draft_vocab_size=48, progress=False,
                   train={**SMALL, "epochs": 2, "lr": 3e-3, **settings}, **options)
    pred.seed = seed
    pred.fit(train)
    return pred


def count_writes(monkeypatch) -> list[int]:
    writes: list[int] = []
    write = TargetCache.write
    monkeypatch.setattr(TargetCache, "write", staticmethod(
        lambda *a, **k: writes.append(1) or write(*a, **k)))
    return writes


def cache_folders(folder: Path) -> list[Path]:
    return sorted(p for p in (folder / "cache" / STAGE).iterdir() if p.is_dir())


def test_variants_fitted_on_the_same_rows_share_one_build(tmp_path, monkeypatch, caplog) -> None:
    torch.set_num_threads(1)
    train, _ = world(tmp_path)
    writes = count_writes(monkeypatch)
    caplog.set_level(logging.INFO, logger="lenbench.outlets.target_cache")
    # lp_only first: it needs no teacher, but stores it (it fits the budget) for the others
    preds = [fit(train, "lp_only", seed=0), fit(train, "sd_only", seed=1, lr=1e-3, epochs=1),
             fit(train, "no_decoder", seed=2, max_steps=3),
             fit(train, "outlets", seed=3, attention="llama")]
    records = [p._report["target_cache"] for p in preds]
    assert len(writes) == 1 and len(cache_folders(tmp_path)) == 1
    assert [r["reused"] for r in records] == [False, True, True, True]
    assert len({r["key"] for r in records}) == 1 and all(r["teacher"] for r in records)
    assert cache_folders(tmp_path)[0].name == records[0]["key"]
    assert sum("reused" in m for m in caplog.messages) == 3
    assert preds[1]._report["training"]["length_head"]["target_cache"]["shared"]  # sd_only's head


def test_a_run_the_shared_cache_cannot_serve_gets_its_own(tmp_path, monkeypatch) -> None:
    torch.set_num_threads(1)
    train, _ = world(tmp_path)
    writes = count_writes(monkeypatch)
    seqs = [Sequence(train.sequence_token_ids(i), int(train.prompt_lengths[i]), 0)
            for i in range(len(train))]
    _, t2d, _ = build_draft_vocab(train.response_token_ids, 64, 48)
    sizes = [cache_bytes(seqs, SMALL["max_len"], 32, int(t2d.sum()), teacher)
             for teacher in (False, True)]
    budget = sum(sizes) // 2
    # the teacher does not fit: lp_only builds a cache of the features alone ...
    first = fit(train, "lp_only", target_cache_max_bytes=budget)._report["target_cache"]
    again = fit(train, "lp_only", target_cache_max_bytes=budget)._report["target_cache"]
    assert not first["teacher"] and not first["reused"] and again["reused"]
    # ... which cannot serve the drafting variant (forced on), nor another truncation
    drafting = fit(train, "outlets", target_cache="on")._report["target_cache"]
    shorter = fit(train, "lp_only", max_len=9)._report["target_cache"]
    assert drafting["teacher"] and not drafting["reused"] and not shorter["reused"]
    assert len(writes) == len(cache_folders(tmp_path)) == 3
    assert len({first["key"], drafting["key"], shorter["key"]}) == 3


def test_auto_trains_online_where_the_disk_lacks_room_for_a_new_build(tmp_path,
                                                                      monkeypatch) -> None:
    torch.set_num_threads(1)
    train, _ = world(tmp_path)
    writes = count_writes(monkeypatch)
    usage = shutil.disk_usage
    full = SimpleNamespace(total=10**9, used=10**9, free=10**6)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)
    online = fit(train, "lp_only")._report["target_cache"]
    forced = fit(train, "lp_only", target_cache="on")._report["target_cache"]  # on: always
    assert (online["mode"], online["reason"]) == ("online", "disk space")
    assert forced["mode"] == "cached" and len(writes) == 1
    # a cache already built needs no room: a full disk still reads it
    monkeypatch.setattr(shutil, "disk_usage", usage)
    assert fit(train, "lp_only")._report["target_cache"]["reused"]
    monkeypatch.setattr(shutil, "disk_usage", lambda path: full)
    assert fit(train, "lp_only")._report["target_cache"]["reused"] and len(writes) == 1


def test_a_disk_with_room_for_the_features_alone_keeps_the_teacher_out(tmp_path,
                                                                        monkeypatch) -> None:
    torch.set_num_threads(1)
    train, _ = world(tmp_path)
    seqs = [Sequence(train.sequence_token_ids(i), int(train.prompt_lengths[i]), 0)
            for i in range(len(train))]
    _, t2d, _ = build_draft_vocab(train.response_token_ids, 64, 48)
    alone, with_teacher = (cache_bytes(seqs, SMALL["max_len"], 32, int(t2d.sum()), teacher)
                           for teacher in (False, True))
    free = FREE_MARGIN + (alone + with_teacher) // 2  # room for the features, not the teacher
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda path: SimpleNamespace(total=10**12, used=0, free=free))
    features = fit(train, "lp_only")._report["target_cache"]
    drafting = fit(train, "outlets")._report["target_cache"]
    assert (features["mode"], features["teacher"]) == ("cached", False)
    assert (drafting["mode"], drafting["reason"]) == ("online", "disk space")


def test_the_key_moves_with_what_the_bytes_depend_on_and_nothing_else(tmp_path) -> None:
    target, seqs = tiny_world()
    t2d = draft_for(target, seqs).t2d
    home = CacheHome(tmp_path, "tiny-target")

    def key(model=target, where=home, rows=seqs, vocab=t2d, **settings) -> str:
        cfg = dataclasses.replace(TrainConfig(**SMALL), **settings)
        return stable_hash(cache_config(model, where, rows, cfg, vocab))

    base = key()
    # optimiser, schedule, losses, K, the budget: training settings that change no byte
    assert base == key(lr=1.0, epochs=3, max_steps=5, warmup_steps=9, ttt_length=7, decay=0.5,
                       sd_weight=0.0, length_weight=0.0, sd_mask="eagle",
                       target_cache="on", target_cache_max_bytes=1)
    # every variant and draft choice trains on the same cache
    for variant, attention in (("outlets", "gated"), ("lp_only", "gated"), ("sd_only", "gated"),
                               ("no_decoder", "gated"), ("outlets", "llama")):
        pred = Outlets(variant=variant, attention=attention, train=SMALL, head_train={"lr": 1})
        assert key(**dataclasses.asdict(pred.train_cfg)) == base, variant
    edited = [Sequence(s.ids.copy(), s.n, s.L) for s in seqs]
    edited[5].ids[1] += 1
    other_vocab = t2d.clone()
    other_vocab[int(torch.nonzero(t2d)[0])] = False
    changed = {
        "rows": key(rows=edited), "fewer rows": key(rows=seqs[:-1]),
        "row order": key(rows=seqs[::-1]), "truncation": key(max_len=10),
        "batching": key(batch_tokens=32), "autocast": key(amp="off"),
        "target": key(where=CacheHome(tmp_path, "another-target")),
        "dtype": key(model=copy.deepcopy(target).double()),
        "fused layers": key(model=tiny_llama(n_layers=10, hidden=32, vocab=64)),
        "draft vocabulary": key(vocab=other_vocab), "no teacher": key(vocab=None)}
    assert base not in changed.values() and len(set(changed.values())) == len(changed), changed
    # a row past the truncation is not in the cache: changing it keeps the key
    tail = [Sequence(s.ids.copy(), s.n, s.L) for s in seqs]
    long = next(s for s in tail if len(s.ids) > SMALL["max_len"])
    long.ids[-1] += 1
    assert key(rows=tail) == base


def test_training_from_the_shared_cache_is_training_from_the_target(tmp_path) -> None:
    torch.set_num_threads(1)
    train, _ = world(tmp_path)
    settings = {"epochs": 4, "sd_mask": "predicted"}
    built, reused = fit(train, **settings), fit(train, **settings)
    online = fit(train, target_cache="off", **settings)
    assert online._report["target_cache"]["mode"] == "online"
    assert (built._report["target_cache"]["reused"], reused._report["target_cache"]["reused"]) \
        == (False, True)
    runs = [p._report["training"]["backbone"]["history"] for p in (online, built, reused)]
    assert runs[0][-1]["loss"] < 0.9 * runs[0][0]["loss"]  # it learns
    for a, b in zip(runs[0], runs[1]):
        for k in ("loss", "sd", "len_mse"):
            assert b[k] == pytest.approx(a[k], rel=1e-3), (k, a, b)
    assert [{k: v for k, v in e.items() if k != "seconds"} for e in runs[2]] == \
        [{k: v for k, v in e.items() if k != "seconds"} for e in runs[1]]


def test_prediction_logs_progress_lines(tmp_path, monkeypatch, caplog) -> None:
    torch.set_num_threads(1)
    train, test = world(tmp_path)
    pred = fit(train, "lp_only", max_steps=2, batch_tokens=48)  # several prediction batches
    # a line at every batch instead of every tenth (at most one a second) or 30 s
    made = []

    def every_batch(*args, **kwargs):
        made.append(ProgressLog(*args, **kwargs, every_s=0.0))
        return made[-1]

    monkeypatch.setattr(train_mod, "ProgressLog", every_batch)
    caplog.set_level(logging.INFO)
    pred.predict(test.static_view(Outlets.needs))
    static = list(caplog.messages)
    caplog.clear()
    steps = len(test.hide_labels().steps)
    pred.predict_remaining(test.hide_labels())
    for messages, head in ((static, f"lp_only static prediction: {len(test)} rows"),
                           (caplog.messages, f"lp_only dynamic prediction: {len(test)} rows, "
                                             f"{steps} steps")):
        assert head in messages
        lines = [re.match(r"lp_only predict: (\d+)/(\d+) rows \(\d+%\), [\d.]+ rows/s, "
                          r"[\d,]+ tokens/s, elapsed \d+m\d\ds", m) for m in messages]
        done = [(int(m[1]), int(m[2])) for m in lines if m]
        assert len(done) > 1 and done[-1] == (len(test), len(test))
        assert [d for d, _ in done] == sorted({d for d, _ in done})  # rows only go forward
    # long rows come first, so the time left is counted in tokens: every token is foreseen
    assert len(made) == 2 and all(0 < p.tokens == p.total_tokens for p in made)
