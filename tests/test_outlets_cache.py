"""OUTLETS's target cache: training from the target's features and teacher computed once must be
training from the target itself, up to 16-bit storage, and the files must not outlive training."""

from __future__ import annotations

import copy
import tempfile
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers.worlds import draft_for, tiny_world

import lenbench.outlets.target_cache as cache_mod
from baselines.outlets import Outlets
from lenbench.outlets.batches import TrainConfig, collate, make_batches, target_forward
from lenbench.outlets.target_cache import TargetCache, open_target_cache
from lenbench.outlets.train import batch_loss, train_draft, uses_sd

# max_len 12 truncates the longer tiny_world sequences (up to 18 tokens); 64 tokens per batch
# gives several right-padded batches
SMALL = {"ttt_length": 3, "max_len": 12, "batch_tokens": 64}


@pytest.mark.parametrize("variant,sd_mask", [("outlets", "predicted"), ("outlets", "eagle"),
                                             ("lp_only", "predicted"),
                                             ("no_decoder", "predicted")])
def test_cached_loss_and_gradients_equal_the_online_ones(variant: str, sd_mask: str) -> None:
    torch.set_num_threads(1)
    target, seqs = tiny_world()
    draft = draft_for(target, seqs, decoder=variant != "no_decoder")
    cfg = TrainConfig(**SMALL, sd_mask=sd_mask,
                      sd_weight=0.0 if variant in ("lp_only", "no_decoder") else 1.0)
    cache, record = open_target_cache(target, seqs, cfg, draft.t2d, uses_sd(draft, cfg))
    assert record["mode"] == "cached" and cache.has_teacher == (variant == "outlets")
    params = [p for p in draft.parameters() if p.requires_grad]
    # batches other than the ones the cache was built from: rows must not depend on batching
    for index in make_batches(seqs, 40, cfg.max_len):
        batch = collate(seqs, index, cfg.max_len, "cpu")
        online, parts = batch_loss(draft, target, batch, cfg)
        cached, cached_parts = batch_loss(draft, target, batch, cfg,
                                          inputs=cache.inputs(index, batch, cache.has_teacher))
        assert parts.keys() == cached_parts.keys() == ({"sd", "len_mse"} if cache.has_teacher
                                                       else {"len_mse"})
        torch.testing.assert_close(cached, online, rtol=1e-3, atol=1e-5)
        for k in parts:
            assert cached_parts[k] == pytest.approx(parts[k], rel=1e-3)
        grads = [torch.autograd.grad(x, params, allow_unused=True) for x in (online, cached)]
        for g, h in zip(*grads):
            assert (g is None) == (h is None)
            if g is not None:
                torch.testing.assert_close(h, g, rtol=2e-2, atol=1e-4)
    cache.close()


def test_cached_features_and_teacher_are_the_targets_at_every_real_position() -> None:
    target, seqs = tiny_world()
    draft = draft_for(target, seqs)
    cfg = TrainConfig(**SMALL)
    cache, _ = open_target_cache(target, seqs, cfg, draft.t2d, True)
    assert all(isinstance(a, np.memmap) for a in cache.arrays.values())  # streamed from disk
    index = list(range(len(seqs)))
    batch = collate(seqs, index, cfg.max_len, "cpu")
    fused, teacher = cache.inputs(index, batch, True)
    want, logits = target_forward(target, batch)
    real = batch.valid
    torch.testing.assert_close(fused[real], want[real], rtol=1e-3, atol=1e-3)
    assert (fused[~real] == 0).all()
    probs = torch.softmax(logits, -1)[..., draft.t2d]
    torch.testing.assert_close(teacher.p[real], probs[real] / probs[real].sum(-1, keepdim=True),
                               rtol=2e-3, atol=1e-4)
    assert torch.equal(teacher.top[real], logits.argmax(-1)[real])
    assert torch.equal(teacher.in_draft[real], draft.t2d[logits.argmax(-1)][real])
    assert teacher.in_draft[real].any() and not teacher.in_draft[~real].any()
    cache.close()


def test_cached_training_follows_the_online_training() -> None:
    torch.set_num_threads(1)
    target, seqs = tiny_world()
    online = draft_for(target, seqs)
    cached = copy.deepcopy(online)
    base = dict(SMALL, epochs=6, lr=3e-3, warmup_steps=2)
    runs = [train_draft(d, target, seqs, TrainConfig(**base, target_cache=mode), progress=False)
            for d, mode in ((online, "off"), (cached, "on"))]
    assert [r["target_cache"]["mode"] for r in runs] == ["online", "cached"]
    a, b = (r["history"] for r in runs)
    assert len(a) == len(b) == 6 and a[-1]["loss"] < 0.8 * a[0]["loss"]  # it learns
    for x, y in zip(a, b):
        for k in ("loss", "sd", "len_mse"):
            assert y[k] == pytest.approx(x[k], rel=1e-3), (k, x, y)
    for name, w in online.state_dict().items():
        torch.testing.assert_close(cached.state_dict()[name], w, rtol=0, atol=5e-4)


def test_auto_caches_under_the_byte_budget_and_removes_the_files(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    target, seqs = tiny_world()
    cfg = dict(SMALL, epochs=1)
    records = {}
    for budget in (0, 10**9):
        draft = draft_for(target, seqs)
        run = train_draft(draft, target, seqs, TrainConfig(**cfg, target_cache_max_bytes=budget),
                          progress=False)
        records[budget] = run["target_cache"]
    assert records[0]["mode"] == "online" and records[0]["estimated_bytes"] > 0
    big = records[10**9]
    tokens = sum(min(len(s.ids), 12) for s in seqs)
    assert big["mode"] == "cached" and big["tokens"] == tokens
    assert big["estimated_bytes"] == tokens * (3 * 32 * 2 + 2 * 48 + 1 + 4)  # H=32, V_d=48
    assert big["estimated_bytes"] < big["bytes"] < big["estimated_bytes"] + 4 * 256  # headers
    assert list(tmp_path.iterdir()) == []  # the cache is gone once training ends
    with pytest.raises(ValueError, match="target_cache"):
        TrainConfig(target_cache="yes")
    # a YAML file's bare on / off arrives as a boolean
    assert [TrainConfig(target_cache=v).target_cache for v in (True, False)] == ["on", "off"]


def test_a_cache_serves_only_runs_it_holds_every_row_of() -> None:
    target, seqs = tiny_world()
    draft = draft_for(target, seqs)
    features_only, _ = open_target_cache(target, seqs, TrainConfig(**SMALL), draft.t2d, False)
    assert features_only.serves(len(seqs), 12, teacher=False)
    assert features_only.serves(len(seqs), 8, teacher=False)  # shorter truncation: a prefix
    assert not features_only.serves(len(seqs), 12, teacher=True)
    assert not features_only.serves(len(seqs), 2048, teacher=False)  # rows were cut at 12
    assert not features_only.serves(len(seqs) - 1, 12, teacher=False)
    features_only.close()


def test_features_that_overflow_fp16_are_refused(monkeypatch) -> None:
    target, seqs = tiny_world()
    real = cache_mod.target_forward

    def huge(model, batch, **kwargs):
        fused, logits = real(model, batch, **kwargs)
        return fused * 1e6, logits

    monkeypatch.setattr(cache_mod, "target_forward", huge)
    with pytest.raises(FloatingPointError, match="target_cache=off"):
        TargetCache.build(target, seqs, 12, draft_for(target, seqs).t2d, True, 64)


class ToySplit:
    """The parts of a data split that Outlets.fit reads."""

    def __init__(self, target, seqs):
        self.target = SimpleNamespace(model=target)
        self.seqs = seqs
        self.prompt_lengths = np.array([s.n for s in seqs])
        self.response_token_ids = [s.ids[s.n:] for s in seqs]

    def __len__(self) -> int:
        return len(self.seqs)

    def sequence_token_ids(self, i: int) -> np.ndarray:
        return self.seqs[i].ids


def test_sd_only_runs_the_target_once_for_both_phases(monkeypatch) -> None:
    torch.set_num_threads(1)
    target, seqs = tiny_world()
    builds = []
    build = TargetCache.build.__func__
    monkeypatch.setattr(TargetCache, "build",
                        classmethod(lambda cls, *a, **k: builds.append(1) or build(cls, *a, **k)))
    pred = Outlets(variant="sd_only", draft_vocab_size=48, progress=False,
                   train=dict(SMALL, epochs=2, lr=3e-3, warmup_steps=1))
    pred.fit(ToySplit(target, seqs))
    report = pred._report
    assert len(builds) == 1
    assert report["target_cache"]["mode"] == "cached" and report["target_cache"]["teacher"]
    head = report["training"]["length_head"]["target_cache"]
    assert head["mode"] == "cached" and head["shared"]
