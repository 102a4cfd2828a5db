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
from conftest import tiny_llama

from lenbench.features.extract import FeatureConfig, FeatureStore, extract_features, role_layers

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
    cfg = FeatureConfig(**{"roles": ("low", "mid", "high", "last"),
                           "poolings": ("last", "mean", "entropy"),
                           "step_roles": ("mid", "high"), "step_stride": 1,
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
    h = rng.normal(size=(9, 5)).astype(np.float32)
    ent = rng.uniform(0, 6, size=9).astype(np.float32)
    ends = np.array([0, 3, 8])
    got = running_entropy_pool(h, ent, ends)
    for k, e in enumerate(ends):
        w = np.exp(ent[: e + 1] - ent[: e + 1].max())
        np.testing.assert_allclose(got[k], (w / w.sum()) @ h[: e + 1], rtol=1e-5, atol=1e-6)


def test_features_config_adds_what_predictors_need_and_nothing_else():
    from lenbench.pipeline import features_config
    from lenbench.predictor import Needs

    base = {"roles": ["mid"], "poolings": ["last"], "step_roles": ["mid"], "step_stride": 1}
    assert features_config(base, [Needs(hidden=("mid",))]) == {**base, "step_poolings": ["last"]}
    grown = features_config(base, [Needs(hidden=("last",), pooling=("entropy",), steps=True,
                                         step_pooling=("entropy",))])
    assert grown["roles"] == ["mid", "last"] and grown["poolings"] == ["last", "entropy"]
    assert grown["step_roles"] == ["mid", "last"]
    assert grown["step_poolings"] == ["last", "entropy"]
