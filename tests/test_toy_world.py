"""The default run's world is shipped: `lenbench` with no override takes the toy model's shipped
weights and the toy world's shipped samples, trains nothing, generates nothing, and reaches the
labels fingerprint on the card (so every machine scores the same labels)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from lenbench.cli import CONF_DIR, resolved_config, typed_config
from lenbench.configs import RunConfig
from lenbench.configs.run import LenbenchConfig
from lenbench.models.shipped_toy import SHIPPED_TOY_DIR, read_card
from lenbench.pipeline import prepare_world
from lenbench.scoring.fingerprints import labels_fingerprint
from lenbench.worlds.shipped import CARD_FILE, SAMPLES_FILE, WORLDS_DIR, ShippedWorld

TOY_WORLD = WORLDS_DIR / "toyworld"
MAX_SHIPPED_BYTES = 15 * 2**20


def _default_config(cache: Path, *overrides: str) -> RunConfig:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"paths.cache_dir={cache}", *overrides])
    return typed_config(resolved_config(cfg))


class _Worked(Exception):
    """Raised by the stand-ins: reaching one means the run trained or generated."""


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise _Worked("the default run trained or generated")

    monkeypatch.setattr("lenbench.models.toy.build_toy_model", refuse)
    monkeypatch.setattr("lenbench.generation.stage_job.make_generator", refuse)


def test_the_default_run_loads_the_shipped_world_without_training_or_generating(
        nothing_built: None, tmp_path: Path) -> None:
    world = prepare_world(_default_config(tmp_path / "cache"), need_features=False,
                          progress=False)
    card = json.loads((TOY_WORLD / CARD_FILE).read_text())
    assert world.target_path == str(SHIPPED_TOY_DIR)
    assert world.fingerprints["labels"] == labels_fingerprint(world.labels)
    assert world.fingerprints["labels"] == card["labels_fingerprint"]
    assert len(world.labels) == card["stats"]["n_rows"]
    assert world.generation_card["samples_reused"] == card["n_samples_shipped"]
    assert world.generation_card["shipped_world"]["name"] == "toyworld"
    assert not (tmp_path / "cache" / "toymodel").exists()


def test_the_shipped_world_belongs_to_the_shipped_weights() -> None:
    world = ShippedWorld.load("toyworld")  # checks samples.parquet against the card's sha256
    assert read_card()["world"] == "toyworld"
    assert world.card["model"]["source"] == read_card()["source"]
    assert world.card["build"]["threads"] == LenbenchConfig.threads
    assert world.card["license"] and world.card["build"]["cpu"]["name"]
    assert (TOY_WORLD / SAMPLES_FILE).stat().st_size < MAX_SHIPPED_BYTES
    # every sample the world's generation made is shipped, censored ones included, so that a
    # run loading it never generates (and so never departs from the card on another CPU)
    assert len(world.samples) == world.card["n_samples_shipped"] >= world.card["stats"]["n_rows"]
    assert (world.samples["finish_reason"] == "length").sum() == \
        world.card["n_samples_shipped"] - world.card["stats"]["n_rows"]


def test_other_sampling_settings_generate_their_own_labels(nothing_built: None,
                                                           tmp_path: Path) -> None:
    cfg = _default_config(tmp_path / "cache", "generation.temperature=0.5",
                          "dataset.n_prompts=8")
    with pytest.raises(_Worked):
        prepare_world(cfg, need_features=False, progress=False)


def test_packing_ships_the_samples_the_labels_dropped(tmp_path: Path) -> None:
    """A world whose labels drop censored rows still ships those samples (from the sample
    store), so loading it generates nothing; samples of other prompts or beyond n_samples are
    left out, and the labels' own rows are not repeated."""
    import pandas as pd

    from lenbench.stages import stable_hash
    from lenbench.worlds.pack import dropped_samples
    from lenbench.worlds.sample_store import SampleStore

    prompts = pd.DataFrame({"prompt_id": ["a", "b"], "text": ["List 2 cats.", "Say hi."],
                            "split": ["train", "test"], "meta": ["{}", "{}"]})
    labels = pd.DataFrame({"prompt_id": ["a", "a", "b"], "sample_idx": [0, 1, 0],
                           "split": ["train", "train", "test"], "L": [3, 2, 2]})
    card = {"sample_key": {"temperature": 1.0}, "n_samples": 2}
    stage = tmp_path / "cache" / "generate" / "g0"
    stage.mkdir(parents=True)
    store = SampleStore(tmp_path / "cache" / "samples" / stable_hash(card["sample_key"]))
    row = {"prompt_sha": "0" * 16, "finish_reason": "stop", "output_token_ids": [5, 6]}
    store.add([{**row, "prompt_id": "a", "sample_idx": 0},          # in the labels
               {**row, "prompt_id": "b", "sample_idx": 1, "finish_reason": "length",
                "output_token_ids": [7] * 4},                       # dropped: censored
               {**row, "prompt_id": "b", "sample_idx": 2},          # beyond n_samples
               {**row, "prompt_id": "z", "sample_idx": 0}])         # another prompt set's
    extra = dropped_samples(stage, card, labels, prompts)
    assert list(zip(extra["prompt_id"], extra["sample_idx"])) == [("b", 1)]
    assert extra["L"].tolist() == [4] and extra["finish_reason"].tolist() == ["length"]
    assert extra["split"].tolist() == ["test"] and extra["text"].tolist() == ["Say hi."]
