"""OUTLETS through the harness: shapes, persistence, the recorded report, every ablation config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from baselines.outlets import Outlets
from lenbench.contract.instantiate import instantiate_predictor

CONF = Path(__file__).resolve().parent.parent / "conf" / "predictor"
QUICK = ["predictor.train.epochs=8", "predictor.train.warmup_steps=2",
         "predictor.train.batch_tokens=256",
         "predictor.train.max_steps=80", "predictor.spec_prompts=3",
         "predictor.spec_max_new_tokens=12", "predictor.overhead_batches=[1,4]",
         "predictor.overhead_context=16", "predictor.draft_vocab_size=48"]


def load(name: str) -> dict:
    """A predictor YAML with its defaults list applied (what Hydra composes)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(str(CONF.parent), version_base="1.3"):
        cfg = compose("config", overrides=[f"predictor={name}", "progress=false"])
    return OmegaConf.to_container(cfg.predictor, resolve=True)


@pytest.mark.parametrize("name,variant,attention,gate", [
    ("outlets", "outlets", "gated", "elementwise"), ("lp_only", "lp_only", "gated", "elementwise"),
    ("sd_only", "sd_only", "gated", "elementwise"),
    ("outlets_no_decoder", "no_decoder", "gated", "elementwise"),
    ("outlets_llama_attn", "outlets", "llama", "elementwise"),
    ("outlets_headwise", "outlets", "gated", "headwise"),
    ("paper/outlets", "outlets", "gated", "elementwise")])
def test_each_ablation_config_builds_its_variant(name, variant, attention, gate) -> None:
    pred = instantiate_predictor(load(name))
    assert isinstance(pred, Outlets)
    assert (pred.variant, pred.choices["attention"], pred.choices["gate"]) == \
        (variant, attention, gate)
    assert pred.train_cfg.sd_weight == (0.0 if variant in ("lp_only", "no_decoder") else 1.0)
    assert pred.train_cfg.length_weight == (0.0 if variant == "sd_only" else 0.1)
    assert (pred.head_cfg is not None) == (variant == "sd_only")
    assert pred.train_cfg.target_cache == "auto"
    assert pred.train_cfg.target_cache_max_bytes == 4_000_000_000


def test_paper_preset_has_the_papers_optimiser() -> None:
    t = instantiate_predictor(load("paper/outlets")).train_cfg
    assert (t.lr, t.weight_decay, t.betas, t.warmup_steps, t.clip, t.max_len) == \
        (1e-5, 0.02, (0.9, 0.95), 2000, 1.0, 2048)


def test_bad_choices_are_rejected_by_name() -> None:
    with pytest.raises(ValueError, match="variant"):
        Outlets(variant="nope")
    with pytest.raises(ValueError, match="gate"):
        Outlets(gate="rowwise")
    with pytest.raises(ValueError, match="unknown keys"):
        Outlets(train={"learning_rate": 1.0})


def test_outlets_through_the_harness(e2e, tmp_path: Path) -> None:
    from helpers.worlds import run_predictor

    result = run_predictor(e2e, tmp_path, "outlets", *QUICK)
    m = result["metrics"]
    assert result["predictor"]["dynamic"] and np.isfinite(m["dynamic"]["mae"])
    report = result["report"]
    assert report["variant"] == "outlets"
    assert report["draft_config"]["attention"] == "gated"
    assert report["inferred_choices"]["fusion_layers"].startswith("hs[2]")
    # the tiny world's training split fits the cache: the target ran once, not every epoch
    cache = report["target_cache"]
    assert cache["mode"] == "cached" and cache["bytes"] >= cache["estimated_bytes"] > 0
    assert report["training"]["backbone"]["target_cache"]["mode"] == "cached"
    spec = report["speculative"]
    assert spec["n_prompts"] == 3 and len(spec["alpha"]) == 5 and len(spec["acc"]) == 5
    # eight epochs on the tiny world already draft far better than the same draft untrained
    assert spec["acc"][0] > spec["random_init"]["acc"][0] + 0.1
    overhead = report["overhead"]
    assert overhead["batch_1"]["backbone_ms"] > 0 and overhead["batch_4"]["length_head_ms"] > 0
    counts = report["parameters"]
    assert result["timings"]["n_parameters"] == counts["backbone"] + counts["length_head"]


def test_predictions_have_the_right_shapes_and_survive_save_and_load(e2e, tmp_path: Path) -> None:
    """Fit on the session's tiny world directly, then a reloaded copy predicts the same."""
    from helpers.cli import E2E_UPSTREAM, REPO
    from hydra import compose, initialize_config_dir

    from lenbench.configs import RunConfig
    from lenbench.evaluate import views
    from lenbench.pipeline import prepare_world

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*E2E_UPSTREAM, *e2e.paths(), "predictor=outlets",
                                           *QUICK])
    container = OmegaConf.to_container(cfg, resolve=True)
    pred = instantiate_predictor(container["predictor"])
    world = prepare_world(RunConfig.from_composed(container), need_features=True,
                          progress=False, needs=[pred.needs])
    train, val, test = views(world, world.target())
    pred.fit(train, val)
    hidden = test.hide_labels()
    static, dynamic = pred.predict(hidden), pred.predict_remaining(hidden)
    assert static.shape == (len(test),) and (static >= 1).all() and static.std() > 0
    assert dynamic.shape == (len(test.steps),) and (dynamic >= 1).all() and dynamic.std() > 0
    assert np.isfinite(static).all() and np.isfinite(dynamic).all()
    pred.save(tmp_path / "outlets.pt")
    again = Outlets(**{k: v for k, v in container["predictor"].items()
                       if k not in ("_target_", "name")})
    again.load(tmp_path / "outlets.pt", world.target().model)
    assert "embed_tokens.weight" not in again.draft.trained_state()
    np.testing.assert_allclose(again.predict(hidden), static, rtol=1e-6)
    np.testing.assert_allclose(again.predict_remaining(hidden), dynamic, rtol=1e-6)
