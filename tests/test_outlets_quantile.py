"""outlets_quantile: the OUTLETS length head with monotone quantile outputs and the pinball loss,
fitted on a tiny random target; shapes, ordering, the point head left as it was, causality."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.cli import REPO
from helpers.models import tiny_llama
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from baselines.outlets import Outlets, OutletsQuantile
from lenbench.contract.distributions import QUANTILE_LEVELS
from lenbench.contract.features import FeatureStore
from lenbench.contract.instantiate import instantiate_predictor
from lenbench.contract.needs import TargetModel
from lenbench.contract.views import SplitView
from lenbench.heads.quantile_loss import pinball_loss
from lenbench.outlets.batches import Sequence, TrainConfig, collate, target_forward
from lenbench.outlets.losses import length_loss
from lenbench.outlets.modeling import DraftConfig, DraftModel, shift_left
from lenbench.outlets.train import train_draft
from lenbench.outlets.vocab import build_draft_vocab
from lenbench.scoring.audit import audit_causality

V, H = 64, 32
QUICK = {"draft_vocab_size": 48, "max_length": 40, "progress": False, "batch_tokens": 512,
         "train": {"epochs": 4, "lr": 3e-3, "warmup_steps": 2, "batch_tokens": 256,
                   "ttt_length": 2}}


def tiny_world(folder: Path, n: int = 30, seed: int = 0) -> dict[str, SplitView]:
    """Train and test views over a random tiny target, with random prompts and responses whose
    length grows with the first prompt token (something the length head can pick up). The feature
    store holds only what the dynamic protocol needs: the step index and the entropy."""
    rng = np.random.default_rng(seed)
    prompts = [list(rng.integers(1, V, int(rng.integers(3, 7)))) for _ in range(n)]
    outputs = [list(rng.integers(1, V, 4 + p[0] // 4)) for p in prompts]
    L = np.array([len(o) for o in outputs])
    split = np.where(np.arange(n) % 3 == 2, "test", "train")
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "sample_idx": 0,
                           "split": split, "family": "", "text": [""] * n,
                           "prompt_token_ids": prompts, "output_token_ids": outputs, "L": L})
    np.save(folder / "steps_offsets.npy", np.concatenate([[0], np.cumsum(L)]))
    np.save(folder / "steps_index.npy",
            np.array([(i, t) for i in range(n) for t in range(L[i])], dtype=np.int32))
    tokens = np.concatenate([[0], np.cumsum([len(p) + k for p, k in zip(prompts, L)])])
    np.save(folder / "entropy_offsets.npy", tokens)
    np.save(folder / "entropy.npy", rng.uniform(0, 3, tokens[-1]).astype(np.float32))
    (folder / "meta.json").write_text(json.dumps(
        {"roles": [], "poolings": [], "step_roles": [], "step_poolings": [], "step_stride": 1}))
    store = FeatureStore(folder)
    target = TargetModel(tiny_llama(n_layers=8, hidden=H, vocab=V, seed=seed), None)
    return {s: SplitView(s, labels, np.flatnonzero(split == s), store, target)
            for s in ("train", "test")}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SplitView]:
    torch.set_num_threads(1)
    return tiny_world(tmp_path_factory.mktemp("outlets_quantile"))


@pytest.fixture(scope="module")
def fitted(world) -> OutletsQuantile:
    model = OutletsQuantile(**QUICK)
    model.fit(world["train"])
    return model


def test_the_preset_builds_the_quantile_head() -> None:
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=["predictor=outlets_quantile", "progress=false"])
    model = instantiate_predictor(OmegaConf.to_container(cfg.predictor, resolve=True))
    assert isinstance(model, OutletsQuantile) and model.variant == "outlets"
    assert model.choices["length_quantiles"] and model.train_cfg.length_weight == 0.1
    assert model.distributional and model.dynamic_distributional and model.dynamic
    assert not Outlets().distributional and not Outlets().choices["length_quantiles"]


def test_quantile_length_loss_is_the_masked_pinball_loss() -> None:
    pred = torch.randn(2, 7, len(QUANTILE_LEVELS)).sort(-1).values
    target, mask = torch.rand(2, 7) * 3, torch.rand(2, 7) > 0.4
    assert torch.isclose(length_loss(pred, target, mask),
                         pinball_loss(pred, target, QUANTILE_LEVELS, mask))
    # the point head keeps the squared error
    point = pred[..., 2]
    expected = ((point - target) ** 2 * mask).sum() / mask.sum()
    assert torch.isclose(length_loss(point, target, mask), expected)


def test_a_quantile_head_learns_ordered_quantiles_from_the_pinball_loss() -> None:
    torch.set_num_threads(1)
    target = tiny_llama(n_layers=8, hidden=H, vocab=V, seed=0)
    rng = np.random.default_rng(0)
    seqs = [Sequence(rng.integers(1, V, 5 + r).astype(np.int64), 5, r)
            for r in rng.integers(2, 30, 24)]
    d2t, t2d, _ = build_draft_vocab([s.ids[s.n:] for s in seqs], V, 48)
    cfg = DraftConfig.from_target(target.config, 48, length_quantiles=True)
    torch.manual_seed(0)
    draft = DraftModel(cfg, target.get_input_embeddings().weight, d2t, t2d)
    assert draft.length_levels == QUANTILE_LEVELS
    train = TrainConfig(epochs=60, lr=1e-2, warmup_steps=1, batch_tokens=10_000, sd_weight=0.0)
    batch = collate(seqs, list(range(len(seqs))), 2048, "cpu")

    def loss() -> float:
        with torch.no_grad():
            fused, _ = target_forward(target, batch)
            state = draft.first_step(fused, shift_left(batch.ids, 1), batch.valid,
                                     logits=False).state
            z = draft.length(state)
        assert z.shape == (*batch.ids.shape, len(QUANTILE_LEVELS))
        assert (z.diff(dim=-1) >= 0).all()
        return float(length_loss(z, batch.remaining_log(), batch.response_mask(0)))

    first = loss()
    train_draft(draft, target, seqs, train, progress=False)
    assert loss() < 0.7 * first


def test_distributions_have_a_row_per_row_and_step_and_the_median_is_the_point(
        world, fitted) -> None:
    test = world["test"]
    hidden = test.hide_labels()
    static = fitted.predict_distribution(test.static_view(fitted.needs))
    assert len(static) == len(test) and tuple(static.levels) == QUANTILE_LEVELS
    assert (np.diff(fitted._static(test.static_view(fitted.needs)), axis=1) >= 0).all()
    np.testing.assert_allclose(fitted.predict(test.static_view(fitted.needs)),
                               static.values[:, 2])
    dynamic = fitted.predict_remaining_distribution(hidden)
    steps = test.steps
    assert len(dynamic) == len(steps)
    raw = fitted._remaining(hidden)
    assert (np.diff(raw, axis=1) >= 0).all() and raw.min() >= 1
    assert (raw.max(1) <= np.maximum(40 - steps.t, 1)).all()  # clipped to the generation cap
    np.testing.assert_allclose(fitted.predict_remaining(hidden), dynamic.values[:, 2])
    # after prefill the static state is the dynamic state at t = 0 (prompt + y_1, position n-1)
    np.testing.assert_allclose(static.values, dynamic.values[steps.t == 0], rtol=1e-4)


def test_the_remaining_distribution_is_causal(world, fitted) -> None:
    hidden = world["test"].hide_labels()
    audit = audit_causality(fitted, hidden, n_rows=4)  # every quantile, static and dynamic
    assert audit["passed"] and audit["steps_compared"] > 0, audit
    assert {"predict_distribution", "predict_remaining_distribution"} <= set(audit["methods"])


def test_point_outlets_still_predicts_one_value_and_save_load_keeps_the_head_kind(
        world, fitted, tmp_path: Path) -> None:
    point = Outlets(**QUICK)
    point.fit(world["train"])
    test = world["test"]
    hidden = test.hide_labels()
    assert point.predict(test.static_view(point.needs)).shape == (len(test),)
    assert point.predict_remaining(hidden).shape == (len(test.steps),)
    fitted.save(tmp_path / "q.pt")
    again = OutletsQuantile(**QUICK)
    again.load(tmp_path / "q.pt", world["train"].target.model)
    np.testing.assert_allclose(again.predict_remaining_distribution(hidden).values,
                               fitted.predict_remaining_distribution(hidden).values, rtol=1e-6)
    with pytest.raises(ValueError, match="quantile length head"):
        Outlets(**QUICK).load(tmp_path / "q.pt", world["train"].target.model)
