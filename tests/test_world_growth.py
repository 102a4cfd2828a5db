"""Worlds that grow and worlds that ship.

Raising the prompt count or the samples per prompt must generate only the missing samples and
end with exactly the labels of a run made from scratch; a shipped world must give its labels
without generating anything, be checked by its checksum and by each prompt's text, and say so
clearly when it is damaged or does not fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from helpers.models import toy_prompt_table

from lenbench.generation.hf import HFGenerator
from lenbench.generation.protocol import SamplingConfig
from lenbench.generation.runner import generate_labels
from lenbench.models.chat import eos_token_ids
from lenbench.scoring.fingerprints import labels_fingerprint
from lenbench.worlds.pack import pack_world
from lenbench.worlds.sample_store import SampleStore
from lenbench.worlds.shipped import (
    SAMPLES_FILE,
    ShippedWorld,
    ShippedWorldError,
    compare_with_shipped,
)

SAMPLING = SamplingConfig(1.0, 1.0, 24)


class CountingFactory:
    """Builds the HF generator on demand and counts the requests it is asked for."""

    def __init__(self, toy):
        self.toy, self.requests = toy, 0

    def __call__(self):
        inner = HFGenerator(self.toy.model, eos_token_ids(self.toy.model, self.toy.tokenizer),
                            batch_size=8)
        outer = self

        class Counting:
            def generate(self, requests, sampling, on_done=None):
                outer.requests += len(requests)
                return inner.generate(requests, sampling, on_done=on_done)
        return Counting()


def never():
    raise AssertionError("nothing should be generated")


def _run(toy, prompts, out, factory, **kw):
    args = {"n_samples": 2, "seed": 0, "shard_prompts": 3, "keep_censored": True,
            "progress": False, "eos_ids": eos_token_ids(toy.model, toy.tokenizer),
            "generator_factory": factory, **kw}
    return generate_labels(prompts, None, toy.tokenizer, out, SAMPLING, **args)


def _tokens(labels: pd.DataFrame) -> dict:
    return {(p, s): list(t) for p, s, t in
            zip(labels["prompt_id"], labels["sample_idx"], labels["output_token_ids"])}


@pytest.fixture(scope="module")
def prompts() -> pd.DataFrame:
    return toy_prompt_table(10, seed=7)


@pytest.fixture(scope="module")
def scratch(toy_tiny, prompts, tmp_path_factory):
    """Every prompt, 2 samples, the first 3 prompts with 4: generated in one go."""
    out = tmp_path_factory.mktemp("scratch")
    return _run(toy_tiny, prompts, out / "stage", CountingFactory(toy_tiny),
                dense_prompts=3, dense_n_samples=4)


def test_dense_prompts_get_more_samples(scratch):
    labels, card = scratch
    per_prompt = labels.groupby("prompt_id", sort=False).size().tolist()
    assert per_prompt == [4, 4, 4] + [2] * 7
    assert card["dense_prompts"] == 3 and card["dense_n_samples"] == 4


def test_dense_prompts_of_one_split(toy_tiny, prompts, scratch, tmp_path):
    """`dense_split`: the first N prompts of that split get the denser sampling, others do not;
    each sample is the one the all-dense run made (a sample does not depend on its neighbours)."""
    labels, card = _run(toy_tiny, prompts, tmp_path / "split", CountingFactory(toy_tiny),
                        dense_prompts=2, dense_n_samples=4, dense_split="test")
    test_ids = [p for p in prompts["prompt_id"] if p in
                set(prompts.loc[prompts["split"] == "test", "prompt_id"])]
    assert len(test_ids) >= 3, "the fixture needs 3 test prompts"
    per_prompt = labels.groupby("prompt_id", sort=False).size()
    assert {p: n for p, n in per_prompt.items() if n == 4} == {p: 4 for p in test_ids[:2]}
    assert card["dense_split"] == "test"
    reference = _tokens(scratch[0])
    for key, tokens in _tokens(labels).items():
        if key in reference:
            assert tokens == reference[key]


def test_growing_generates_only_what_is_missing(toy_tiny, prompts, scratch, tmp_path):
    store = SampleStore(tmp_path / "store")
    first = CountingFactory(toy_tiny)
    _run(toy_tiny, prompts.iloc[:6], tmp_path / "small", first, n_samples=1, store=store)
    assert first.requests == 6 and len(store.load()) == 6
    grown = CountingFactory(toy_tiny)
    labels, card = _run(toy_tiny, prompts, tmp_path / "big", grown, known=store.load(),
                        store=store, dense_prompts=3, dense_n_samples=4)
    assert grown.requests == 3 * 4 + 7 * 2 - 6  # the 6 first samples were reused
    assert card["samples_reused"] == 6
    assert _tokens(labels) == _tokens(scratch[0])
    assert labels_fingerprint(labels) == labels_fingerprint(scratch[0])
    # a third run finds everything in the store and builds no generator at all
    again, _ = _run(toy_tiny, prompts, tmp_path / "again", never, known=store.load(),
                    dense_prompts=3, dense_n_samples=4)
    assert labels_fingerprint(again) == labels_fingerprint(scratch[0])


def test_stored_sample_of_another_rendering_is_not_reused(toy_tiny, prompts, tmp_path):
    store = SampleStore(tmp_path / "store")
    _run(toy_tiny, prompts.iloc[:2], tmp_path / "a", CountingFactory(toy_tiny), n_samples=1,
         store=store)
    known = {k: type(v)("0" * 16, v.output_ids, v.finish_reason)
             for k, v in store.load().items()}  # as if rendered by another template
    counter = CountingFactory(toy_tiny)
    _run(toy_tiny, prompts.iloc[:2], tmp_path / "b", counter, n_samples=1, known=known)
    assert counter.requests == 2


def _fake_stage(tmp: Path, labels: pd.DataFrame, prompts: pd.DataFrame, card: dict) -> Path:
    """A finished generate stage and its PromptSet, laid out as the cache lays them out."""
    ps = tmp / "cache" / "promptset" / "ps0"
    ps.mkdir(parents=True)
    prompts.assign(meta=[json.dumps({"id": f"conv-{i}"}) for i in range(len(prompts))]) \
        .to_parquet(ps / "prompts.parquet")
    (ps / "stage.json").write_text(json.dumps({"config": {"source": "toy"}}))
    (ps / "card.json").write_text(json.dumps({"source": {"format": "toy"}}))
    stage = tmp / "cache" / "generate" / "g0"
    stage.mkdir(parents=True)
    labels.to_parquet(stage / "labels.parquet")
    (stage / "stage.json").write_text(json.dumps({"parent": "ps0", "config": {}}))
    (stage / "card.json").write_text(json.dumps(
        {**card, "model_path": str(tmp / "no-model"), "sample_key": {"temperature": 1.0}}))
    return stage


@pytest.fixture(scope="module")
def shipped(scratch, prompts, tmp_path_factory) -> ShippedWorld:
    tmp = tmp_path_factory.mktemp("ship")
    stage = _fake_stage(tmp, scratch[0], prompts, scratch[1])
    card = pack_world(stage, tmp / "world", "tiny", threads=1)
    assert card["labels_fingerprint"] == labels_fingerprint(scratch[0])
    assert card["stats"]["samples_per_prompt"] == {"2": 7, "4": 3}
    return ShippedWorld.load(str(tmp / "world"))


def test_shipped_world_ships_no_prompt_text(shipped, prompts):
    columns = set(shipped.samples.columns)
    assert "text" not in columns and "prompt_token_ids" not in columns
    assert shipped.samples["record"].str.startswith("conv-").all()
    first = set(prompts["text"].iloc[:3])
    blob = (shipped.folder / SAMPLES_FILE).read_bytes()
    assert not any(t.encode() in blob for t in first)


def test_shipped_world_loads_without_generating(toy_tiny, prompts, shipped, scratch, tmp_path):
    labels, card = _run(toy_tiny, prompts, tmp_path / "stage", never,
                        known=shipped.known(prompts), dense_prompts=3, dense_n_samples=4)
    assert card["samples_reused"] == len(labels)
    assert labels_fingerprint(labels) == shipped.fingerprint
    assert _tokens(labels) == _tokens(scratch[0])
    report = compare_with_shipped(labels, shipped)
    assert report["matches"] and report["samples_identical"] == len(labels)


def test_shipped_world_checks_the_prompt_text(shipped, prompts):
    edited = prompts.copy()
    edited.loc[0, "text"] = edited.loc[0, "text"] + " (edited)"
    with pytest.raises(ShippedWorldError, match="other text"):
        shipped.known(edited)


def test_damaged_shipped_file_is_one_clear_error(shipped, tmp_path):
    folder = tmp_path / "world"
    folder.mkdir()
    (folder / "card.json").write_text((shipped.folder / "card.json").read_text())
    data = bytearray((shipped.folder / SAMPLES_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / SAMPLES_FILE).write_bytes(bytes(data))
    with pytest.raises(ShippedWorldError, match="sha256"):
        ShippedWorld.load(str(folder))
    with pytest.raises(ShippedWorldError, match="no such world"):
        ShippedWorld.load("no_such_world")


def test_other_settings_are_named(shipped):
    assert shipped.differences({"temperature": 1.0}) == []
    diffs = shipped.differences({"temperature": 0.5})
    assert diffs == ["temperature: run 0.5, world 1.0"]
