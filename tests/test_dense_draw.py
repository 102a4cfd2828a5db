"""Dense prompts drawn by hash: which prompts are drawn, and growing a world by a draw adds
samples without changing any it had."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers.models import toy_prompt_table
from test_world_growth import CountingFactory, _run, _tokens

from lenbench.configs import group_config
from lenbench.generation.dense_draw import draw_rank, drawn_prompts
from lenbench.generation.label_counts import label_counts
from lenbench.worldbuilding.grow import wanted_samples
from lenbench.worlds.sample_store import SampleStore


def test_the_draw_is_fixed_by_the_ids_alone_and_a_larger_draw_extends_a_smaller():
    ids = [f"prompt-{i}" for i in range(50)]
    ten = drawn_prompts(ids, 10)
    assert ten == drawn_prompts(list(reversed(ids)), 10)  # source order does not matter
    assert ten == sorted(ten, key=draw_rank) and len(set(ten)) == 10
    assert drawn_prompts(ids, 25)[:10] == ten
    assert ten != ids[:10]  # not the first in source order
    assert drawn_prompts(ids, 80) == sorted(ids, key=draw_rank)
    with pytest.raises(ValueError, match="dense_drawn"):
        drawn_prompts(ids, -1)


def test_wanted_samples_add_the_drawn_prompts_of_the_dense_split_that_fit():
    n = 40
    prompts = pd.DataFrame({"prompt_id": [f"p{i:02d}" for i in range(n)],
                            "split": ["test" if i % 2 else "train" for i in range(n)]})
    fits = [i != 3 for i in range(n)]  # p03, a test prompt, is over the prompt-token limit
    gen = group_config("generation", {"n_samples": 2, "dense_prompts": 2, "dense_n_samples": 8,
                                      "dense_split": "test", "dense_drawn": 5})
    per_prompt = pd.Series([prompts.at[i, "prompt_id"] for i, _ in
                            wanted_samples(prompts, fits, gen)]).value_counts()
    eligible = [p for i, p in enumerate(prompts["prompt_id"]) if i % 2 and fits[i]]
    first, drawn = eligible[:2], drawn_prompts(eligible, 5)
    dense = set(first) | set(drawn)
    assert {p for p, k in per_prompt.items() if k == 8} == dense
    assert len(dense) >= 5 and "p03" not in per_prompt
    assert set(per_prompt[per_prompt == 2].index) == set(prompts["prompt_id"]) - dense - {"p03"}


def test_label_counts_use_the_recorded_count_of_dense_prompts():
    gen = {"sampling": {"temperature": 0.7}, "n_prompts": 100, "n_samples": 2,
           "dense_prompts": 10, "dense_n_samples": 8, "dense_prompt_count": 30}
    assert label_counts(gen)[2] == 70 * 2 + 30 * 8
    del gen["dense_prompt_count"]  # a card from before the draw: the first 10 alone
    assert label_counts(gen)[2] == 90 * 2 + 10 * 8


def test_growing_by_a_draw_adds_samples_and_keeps_every_earlier_one(toy_tiny, tmp_path):
    prompts = toy_prompt_table(12, seed=3)
    store = SampleStore(tmp_path / "store")
    before, _ = _run(toy_tiny, prompts, tmp_path / "before", CountingFactory(toy_tiny),
                     store=store, dense_prompts=1, dense_n_samples=4)
    grown_factory = CountingFactory(toy_tiny)
    after, card = _run(toy_tiny, prompts, tmp_path / "after", grown_factory, known=store.load(),
                       store=store, dense_prompts=1, dense_n_samples=4, dense_drawn=4)
    drawn = set(drawn_prompts(prompts["prompt_id"], 4))
    first = prompts["prompt_id"].iloc[0]
    new_dense = drawn - {first}
    assert grown_factory.requests == 2 * len(new_dense)  # samples 2 and 3 of each, no more
    old, new = _tokens(before), _tokens(after)
    assert all(new[key] == tokens for key, tokens in old.items())  # none replaced
    per_prompt = after.groupby("prompt_id").size()
    assert set(per_prompt[per_prompt == 4].index) == drawn | {first}
    assert card["dense_drawn"] == 4 and card["dense_prompt_count"] == len(drawn | {first})
