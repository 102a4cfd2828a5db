"""A world ships its transfer set beside its own prompts: `grow --transfer` adds the experiment's
transfer set (dataset@transfer, answered with the same settings) as chunks of its own, with its
own account in the card, and leaves the world's figures as they were."""

from __future__ import annotations

import pytest

from lenbench.pipeline import prepare_world
from lenbench.transfer import transfer_run_config
from lenbench.worldbuilding.cap_curve import compose
from lenbench.worldbuilding.grow import grow
from lenbench.worlds.shipped import ShippedWorld


@pytest.fixture()
def overrides(session_cache, toy_tiny_path) -> list[str]:
    return [f"paths.cache_dir={session_cache}", "dataset.n_prompts=10",
            "generation.max_new_tokens=12", "generation.keep_censored=true",
            "generation.shard_prompts=5", "progress=false",
            "threads=1", "dataset@transfer=toyworld", "transfer.n_prompts=6", "transfer.seed=7"]


def test_grow_ships_the_transfer_set_beside_the_world(overrides, tmp_path):
    cfg = compose("smoke", overrides)
    world = prepare_world(cfg, need_features=False, progress=False)
    away = prepare_world(transfer_run_config(cfg), need_features=False, progress=False)
    out = tmp_path / "world"

    with pytest.raises(SystemExit, match="grow the world first"):
        grow("smoke", out, "w", overrides=overrides, transfer=True)
    own = grow("smoke", out, "w", overrides=overrides)
    assert own["progress"]["complete"] and "transfer" not in own
    assert own["labels_fingerprint"] == world.fingerprints["labels"]

    card = grow("smoke", out, "w", overrides=overrides, transfer=True)
    block = card["transfer"]
    assert block["progress"]["complete"]
    assert block["labels_fingerprint"] == away.fingerprints["labels"]
    assert block["dataset"]["settings"]["name"] == "toyworld"
    assert block["dataset"]["n_prompts"] == away.labels["prompt_id"].nunique()
    transfer_files = [f for f in card["files"] if f.startswith("samples-transfer-")]
    assert transfer_files == ["samples-transfer-000.parquet"]
    # the world's own account is untouched by the transfer chunk
    for key in ("stats", "progress", "labels_fingerprint", "dataset", "sample_key"):
        assert card[key] == own[key], key
    # growing either again adds nothing and keeps the other's account
    assert grow("smoke", out, "w", overrides=overrides)["transfer"] == block
    again = grow("smoke", out, "w", overrides=overrides, transfer=True)
    assert sorted(again["files"]) == sorted(card["files"])

    # one folder answers both prompt sets, looked up by prompt id
    shipped = ShippedWorld.load(str(out))
    for labels in (world.labels, away.labels):
        prompts = labels.drop_duplicates("prompt_id")[["prompt_id", "text"]]
        known = shipped.known(prompts)
        assert {(p, int(s)) for p, s in zip(labels["prompt_id"], labels["sample_idx"])} \
            <= set(known)


def test_an_experiment_without_a_transfer_set_says_so(session_cache, toy_tiny_path, tmp_path):
    with pytest.raises(SystemExit, match="names no transfer set"):
        grow("smoke", tmp_path / "w", "w", overrides=[f"paths.cache_dir={session_cache}"],
             transfer=True)
