"""The generate stage's one call over every shard left: the backend's stats reach the card
whenever the backend reports them, and shard files of another layout are refused at the merge."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lenbench.generation.protocol import GenResult, GenStats, SamplingConfig
from lenbench.generation.runner import generate_labels


class _Tokenizer:
    """Token ids from character codes, no chat template (`render_prompt` calls it as is)."""

    def __call__(self, text: str) -> dict:
        return {"input_ids": [ord(c) for c in text]}


class _ResultsAfterTheCall:
    """Reports each result only once the whole call is done, and the call's stats with the
    results (as vLLM's offline engine does); it has no `live_stats`."""

    stats = GenStats(decode_steps=5, decoded_slots=9, real_tokens=9, kv_columns=20, kv_real=12)

    def generate(self, requests, cfg, on_done=None):
        results = [GenResult([len(r.prompt_ids) % 7 + 1, 0], "stop") for r in requests]
        for i, result in enumerate(results):
            on_done(i, result)
        return results, GenStats(**vars(self.stats))


def _prompts() -> pd.DataFrame:
    return pd.DataFrame({"prompt_id": [f"{i:032x}" for i in range(1, 4)],
                         "split": ["train", "test", "test"], "text": ["ab", "cde", "f"]})


def _run(out, shard_prompts: int):
    return generate_labels(_prompts(), None, _Tokenizer(), out, SamplingConfig(1.0, 1.0, 8),
                           n_samples=2, shard_prompts=shard_prompts, progress=False,
                           eos_ids=[0], generator=_ResultsAfterTheCall())


def test_stats_reported_with_the_results_reach_the_card(tmp_path):
    _, card = _run(tmp_path / "stage", shard_prompts=1)
    assert card["decode_steps"] == 5
    assert card["kv_fill"] == pytest.approx(12 / 20)
    on_disk = GenStats()
    for path in sorted((tmp_path / "stage").glob("shard-*.json")):
        on_disk.add(GenStats(**json.loads(path.read_text())))
    assert on_disk == _ResultsAfterTheCall.stats


def test_shards_of_another_size_are_refused(tmp_path):
    _run(tmp_path / "stage", shard_prompts=2)  # shards 0 (prompts 1, 2) and 1 (prompt 3)
    with pytest.raises(ValueError, match="another shard size"):
        _run(tmp_path / "stage", shard_prompts=1)  # would read shards 0 and 1 as prompts 1, 2
