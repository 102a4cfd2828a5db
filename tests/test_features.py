"""Features: EAGLE-3 layer roles, poolings and step states against a direct forward of the model.

Every stored array is compared with what a single-sequence, unpadded forward of the same model
gives (at fp16 storage precision), so batching, padding, offsets and pooling are all checked.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.models import tiny_llama

from lenbench.configs.run import FeaturesConfig
from lenbench.contract.features import FeatureStore, role_layers
from lenbench.features.extract import extract_features

VOCAB = 64
# (prompt length n, response length L) per row: mixed, so rows of one batch need padding
SHAPES = [(5, 7), (1, 3), (12, 1), (8, 10), (3, 4), (9, 2), (2, 9)]


def test_role_layers_follow_eagle3():
    assert role_layers(8) == {"low": 2, "mid": 4, "high": 5, "last": 8}
    assert role_layers(32) == {"low": 2, "mid": 16, "high": 29, "last": 32}
    assert role_layers(7) == {"low": 2, "mid": 3, "high": 4, "last": 7}  # the smallest that works
    for n in (4, 5, 6):  # low/mid/high collide
        with pytest.raises(ValueError, match="distinct.*at least 7"):
            role_layers(n)


@pytest.fixture(scope="module")
def model():
    model = tiny_llama(n_layers=8, hidden=32, vocab=VOCAB, seed=3)
    with torch.no_grad():  # peaked, position-dependent next-token distributions: entropies vary,
        model.lm_head.weight.mul_(40.0)  # so entropy pooling is far from mean pooling
    return model


@pytest.fixture(scope="module")
def labels() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [{"prompt_token_ids": rng.integers(1, VOCAB, n).tolist(),
             "output_token_ids": rng.integers(1, VOCAB, L).tolist(), "L": L} for n, L in SHAPES]
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def direct(model, labels):
    """Per row: hidden states [layers+1, T, H] and logits [T, V] of an unbatched forward."""
    out = []
    with torch.no_grad():
        for _, row in labels.iterrows():
            ids = torch.tensor([list(row["prompt_token_ids"]) + list(row["output_token_ids"])])
            res = model(input_ids=ids, output_hidden_states=True)
            out.append((torch.stack(res.hidden_states)[:, 0].double().numpy(),
                        res.logits[0].double().numpy()))
    return out


def _extract(model, labels, folder, **kw) -> FeatureStore:
    cfg = FeaturesConfig(**{"roles": ["low", "mid", "high", "last"],
                            "poolings": ["last", "mean", "entropy"],
                            "step_roles": ["mid", "high"], "step_stride": 1,
                            "batch_tokens": 40, **kw})  # small batches: several, padded
    folder.mkdir()
    meta = extract_features(labels, model, folder, cfg, progress=False)
    assert json.loads((folder / "meta.json").read_text()) == meta
    return FeatureStore(folder)


@pytest.fixture(scope="module")
def store(model, labels, tmp_path_factory) -> FeatureStore:
    return _extract(model, labels, tmp_path_factory.mktemp("feat") / "f")


def _close(stored, want):
    """fp16 storage: relative error ~5e-4, plus a little for batched vs unbatched forwards."""
    np.testing.assert_allclose(np.asarray(stored, dtype=np.float64), want, rtol=2e-3, atol=2e-3)


def _entropy(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -(np.exp(logp) * logp).sum(-1)


def test_meta(store):
    assert store.meta["layers"] == {"low": 2, "mid": 4, "high": 5, "last": 8}
    assert store.meta["n_rows"] == len(SHAPES)
    assert store.meta["n_steps"] == sum(L for _, L in SHAPES)
    assert store.static("mid", "last").dtype == np.float16


@pytest.mark.parametrize("role,layer", [("low", 2), ("mid", 4), ("high", 5), ("last", 8)])
def test_static_poolings_equal_direct_forward(store, direct, role, layer):
    last, mean, ent = (store.static(role, p) for p in ("last", "mean", "entropy"))
    assert last.shape == (len(SHAPES), 32)
    for i, ((n, _), (hs, logits)) in enumerate(zip(SHAPES, direct)):
        h = hs[layer, :n]  # prompt positions only: the response must not leak into static states
        _close(last[i], h[n - 1])
        _close(mean[i], h.mean(0))
        e = _entropy(logits[:n])
        w = np.exp(e - e.max())
        w /= w.sum()
        _close(ent[i], w @ h)
    # the poolings and layers really differ (so a mix-up would fail above)
    assert np.abs(np.asarray(ent, np.float64) - np.asarray(mean, np.float64)).max() > 0.01
    assert not np.allclose(store.static("low", "last"), store.static("high", "last"), atol=1e-2)


def test_entropy_per_token(store, direct):
    for i, ((n, L), (_, logits)) in enumerate(zip(SHAPES, direct)):
        ent = store.entropy(i)
        assert ent.shape == (n + L,)
        np.testing.assert_allclose(ent, _entropy(logits), rtol=1e-4, atol=1e-4)


def test_step_states_are_hidden_at_n_minus_1_plus_t(store, direct):
    index = np.asarray(store.step_index())
    offsets = store.step_offsets
    for role, layer in (("mid", 4), ("high", 5)):
        steps = store.steps(role)
        assert steps.shape == (sum(L for _, L in SHAPES), 32)
        for i, ((n, L), (hs, _)) in enumerate(zip(SHAPES, direct)):
            lo, hi = offsets[i], offsets[i + 1]
            assert hi - lo == L
            assert (index[lo:hi, 0] == i).all()
            assert index[lo:hi, 1].tolist() == list(range(L))
            for t in range(L):  # t = 0 is the state after prefill (= the static 'last' state)
                _close(steps[lo + t], hs[layer, n - 1 + t])
    # step roles not asked for are not stored, with a message naming the config field
    with pytest.raises(KeyError, match="features.step_roles"):
        store.steps("low")


def test_step_stride(model, labels, direct, tmp_path):
    store = _extract(model, labels, tmp_path / "s2", step_roles=("mid",), step_stride=2,
                     roles=("mid",), poolings=("last",))
    index = np.asarray(store.step_index())
    counts = np.diff(store.step_offsets)
    assert counts.tolist() == [-(-L // 2) for _, L in SHAPES]  # ceil(L / 2)
    steps = store.steps("mid")
    for i, ((n, L), (hs, _)) in enumerate(zip(SHAPES, direct)):
        lo, hi = store.step_offsets[i], store.step_offsets[i + 1]
        assert index[lo:hi, 1].tolist() == list(range(0, L, 2))
        for k, t in enumerate(range(0, L, 2)):
            _close(steps[lo + k], hs[4, n - 1 + t])
    with pytest.raises(KeyError, match="features.roles"):
        store.static("low", "last")


@pytest.mark.parametrize("field,kw", [
    ("features.roles", {"roles": ("mid", "middle")}),
    ("features.step_roles", {"step_roles": ("hs4",)}),
    ("features.poolings", {"poolings": ("max",)}),
    ("features.step_stride", {"step_stride": 0}),
])
def test_bad_config_names_the_field(model, labels, tmp_path, field, kw):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        _extract(model, labels, tmp_path / "bad", **kw)


def test_running_entropy_pool_equals_direct_softmax_pool():
    from lenbench.features.extract import running_entropy_pool

    rng = np.random.default_rng(0)
    h = rng.normal(size=(2, 9, 5)).astype(np.float32)
    ent = rng.uniform(0, 6, size=(2, 9)).astype(np.float32)
    ent[1, 6:] = 30.0  # padding: huge, so any leak into the pools of row 1 would show
    ends = np.array([[0, 0], [0, 3], [0, 8], [1, 2], [1, 5]])
    got = running_entropy_pool(*map(torch.from_numpy, (h, ent, ends))).numpy()
    for k, (b, e) in enumerate(ends):
        w = np.exp(ent[b, : e + 1] - ent[b, : e + 1].max())
        np.testing.assert_allclose(got[k], (w / w.sum()) @ h[b, : e + 1], rtol=1e-5, atol=1e-6)


def test_features_config_adds_what_predictors_need_and_nothing_else():
    from lenbench.contract.needs import Needs
    from lenbench.features.extract import features_config

    base = FeaturesConfig(roles=["mid"], poolings=["last"], step_roles=["mid"], step_stride=1)
    assert features_config(base, [Needs(hidden=("mid",))]) == base
    grown = features_config(base, [Needs(hidden=("last",), pooling=("entropy",), steps=True,
                                         step_pooling=("entropy",))])
    assert grown.roles == ["mid", "last"] and grown.poolings == ["last", "entropy"]
    assert grown.step_roles == ["mid", "last"]
    assert grown.step_poolings == ["last", "entropy"]
    assert base.roles == ["mid"]  # the configured features are left as they were


# --- memory-bounded entropy: tiles of the logits, softcapping, only the needed hidden states ---

def _torch_entropy(logits: torch.Tensor) -> np.ndarray:
    return _entropy(logits.double().numpy())


@pytest.mark.parametrize("softcap", [None, 10.0])
@pytest.mark.parametrize("bias", [False, True])
def test_tiled_entropy_equals_full_vocabulary_entropy(softcap, bias):
    from lenbench.features.extract import next_token_entropy

    torch.manual_seed(0)
    head = torch.nn.Linear(16, 70, bias=bias)
    with torch.no_grad():
        head.weight.mul_(8.0)  # peaked: entropies far from log(70), softcapping bites
    hidden = torch.randn(11, 16)
    logits = head(hidden).detach()
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    want = _torch_entropy(logits)
    assert want.std() > 0.1
    with torch.no_grad():
        # tiles smaller than both dimensions, neither dividing them; and one tile for everything
        for tile in ((3, 16), (4, 7), (1, 70), (64, 512)):
            got = next_token_entropy(hidden, head, softcap, tile=tile)
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_entropy_in_small_tiles_through_extract(model, labels, direct, tmp_path, monkeypatch):
    """Tiles of 5 positions x 24 vocabulary entries: every row spans several position tiles and
    the 64-entry vocabulary three blocks, the last one partial."""
    from lenbench.features import extract

    monkeypatch.setattr(extract, "ENTROPY_TILE", {"cpu": (5, 24), "accelerator": (5, 24)})
    store = _extract(model, labels, tmp_path / "t", roles=("mid",), poolings=("entropy",),
                     step_roles=("mid",))
    for i, ((n, _L), (hs, logits)) in enumerate(zip(SHAPES, direct)):
        e = _entropy(logits)
        np.testing.assert_allclose(store.entropy(i), e, rtol=1e-4, atol=1e-4)
        w = np.exp(e[:n] - e[:n].max())
        _close(store.static("mid", "entropy")[i], (w / w.sum()) @ hs[4, :n])


def test_step_entropy_pools_equal_direct_forward(model, labels, direct, tmp_path):
    store = _extract(model, labels, tmp_path / "pe", roles=("mid",), poolings=("last",),
                     step_roles=("mid", "last"), step_poolings=("last", "entropy"), step_stride=2)
    for role, layer in (("mid", 4), ("last", 8)):
        last, pooled = store.steps(role, "last"), store.steps(role, "entropy")
        for i, ((n, L), (hs, logits)) in enumerate(zip(SHAPES, direct)):
            e = _entropy(logits)
            lo = store.step_offsets[i]
            for k, t in enumerate(range(0, L, 2)):
                end = n + t  # positions 0..n-1+t
                w = np.exp(e[:end] - e[:end].max())
                _close(pooled[lo + k], (w / w.sum()) @ hs[layer, :end])
                _close(last[lo + k], hs[layer, n - 1 + t])


def test_forward_computes_no_logits_and_keeps_only_needed_states(model, labels, tmp_path,
                                                                 monkeypatch):
    """The [B, T, V] logits and unneeded layers' states are what made the stage slow and big."""
    seen = []
    forward = model.forward

    def spy(*args, **kwargs):
        out = forward(*args, **kwargs)
        seen.append((tuple(out.logits.shape),
                     [i for i, h in enumerate(out.hidden_states) if h is not None]))
        return out

    monkeypatch.setattr(model, "forward", spy)
    _extract(model, labels, tmp_path / "spy", roles=("low",), poolings=("last",),
             step_roles=("mid",))
    assert seen
    for logits_shape, kept in seen:
        assert logits_shape[1] == 0
        assert kept == [2, 4, 8]  # low, mid, and the final state the entropy reads


def tiny_gemma3(softcap: float | None):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=8, max_position_embeddings=512, sliding_window=4,
                           final_logit_softcapping=softcap, tie_word_embeddings=False,
                           pad_token_id=0, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(5)
    model = Gemma3ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(200.0)  # logits far beyond the cap: softcapping changes them
    return model


def test_final_logit_softcapping_gemma3(labels, tmp_path):
    model = tiny_gemma3(softcap=3.0)
    store = _extract(model, labels, tmp_path / "g", roles=("mid",), poolings=("entropy",),
                     step_roles=("mid",))
    capped_vs_raw = []
    with torch.no_grad():
        for i, row in labels.iterrows():
            ids = torch.tensor([list(row["prompt_token_ids"]) + list(row["output_token_ids"])])
            res = model(input_ids=ids, output_hidden_states=True)
            want = _torch_entropy(res.logits[0])
            np.testing.assert_allclose(store.entropy(i), want, rtol=1e-4, atol=1e-4)
            raw = model.lm_head(res.hidden_states[-1][0])  # the head's logits before capping
            capped_vs_raw.append(np.abs(want - _torch_entropy(raw)).max())
            n = len(row["prompt_token_ids"])
            w = np.exp(want[:n] - want[:n].max())
            _close(store.static("mid", "entropy")[i],
                   (w / w.sum()) @ res.hidden_states[4][0, :n].double().numpy())
    assert max(capped_vs_raw) > 0.1  # without the softcap the entropies would differ


def test_progress_lines_for_plain_logs(model, labels, tmp_path, caplog):
    with caplog.at_level("INFO", logger="lenbench.features.extract"):
        _extract(model, labels, tmp_path / "log", roles=("mid",), poolings=("last",))
    lines = [r.getMessage() for r in caplog.records]
    assert any("7 rows" in m and "batches" in m for m in lines)
    last = lines[-1]
    assert last.startswith(f"features: {len(SHAPES)}/{len(SHAPES)} rows (100%)")
    assert "tokens/s" in last and "elapsed 0m0" in last and "left" not in last


@pytest.mark.parametrize("stride", [1, 3])
def test_step_index_without_a_forward_is_the_stages(model, labels, tmp_path, stride):
    """The steps a run without target states scores are the ones this stage writes."""
    from lenbench.contract.step_index import StepIndexStore

    store = _extract(model, labels, tmp_path / "s", step_stride=stride)
    alone = StepIndexStore.from_lengths(labels["L"].to_numpy(), stride)
    np.testing.assert_array_equal(alone.step_offsets, store.step_offsets)
    np.testing.assert_array_equal(alone.step_index(), store.step_index())
    assert alone.meta["n_steps"] == store.meta["n_steps"]
