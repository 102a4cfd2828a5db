"""A world that grows in chunks: each chunk checked by its sha256, the samples of a wider cap cut
to the world's, and the samples a world wants counted by the generate stage's own rule."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenbench.configs import group_config
from lenbench.generation.protocol import GenResult, GenStats, SamplingConfig
from lenbench.generation.runner import generate_labels
from lenbench.scoring.fingerprints import labels_fingerprint
from lenbench.worldbuilding.grow import complete_fingerprint, cut_at_cap, wanted_samples
from lenbench.worlds.sample_store import KnownSample
from lenbench.worlds.shipped import (
    ShippedWorld,
    ShippedWorldError,
    file_sha256,
    sample_key,
    world_folder,
)


def test_a_sample_cut_at_a_smaller_cap():
    ended = KnownSample("p", (5, 6, 2), "stop")
    assert cut_at_cap(ended, 3) == ended  # its EOS is the 3rd token: within a 3-token cap
    assert cut_at_cap(ended, 2) == KnownSample("p", (5, 6), "length")
    looping = KnownSample("p", tuple(range(10)), "length")
    assert cut_at_cap(looping, 4) == KnownSample("p", (0, 1, 2, 3), "length")


def test_wanted_samples_follow_the_dense_split_rule():
    prompts = pd.DataFrame({"prompt_id": list("abcdef"),
                            "split": ["train", "test", "test", "train", "test", "test"]})
    fits = [True, True, False, True, True, True]  # c is over the prompt-token limit
    gen = group_config("generation", {"n_samples": 2, "dense_prompts": 2, "dense_n_samples": 4,
                                      "dense_split": "test"})
    got = wanted_samples(prompts, fits, gen)
    per_prompt = pd.Series([prompts.at[i, "prompt_id"] for i, _ in got]).value_counts().to_dict()
    assert per_prompt == {"a": 2, "b": 4, "d": 2, "e": 4, "f": 2}


def _chunk(folder, name, rows):
    df = pd.DataFrame({"prompt_id": [r[0] for r in rows], "sample_idx": [r[1] for r in rows],
                       "prompt_sha": ["x"] * len(rows), "text_sha256": ["t"] * len(rows),
                       "output_token_ids": [np.array([1, 2], dtype=np.uint16)] * len(rows),
                       "L": [2] * len(rows), "finish_reason": ["stop"] * len(rows)})
    df.to_parquet(folder / name, index=False)
    return {"sha256": file_sha256(folder / name), "bytes": (folder / name).stat().st_size}


def test_a_world_in_chunks_loads_whole_and_checks_each_chunk(tmp_path):
    folder = tmp_path / "w_v2"
    folder.mkdir()
    files = {"samples-000.parquet": _chunk(folder, "samples-000.parquet", [("a", 0), ("a", 1)]),
             "samples-001.parquet": _chunk(folder, "samples-001.parquet", [("b", 0)])}
    card = {"files": files, "sample_key": {}, "progress": {"complete": False}}
    (folder / "card.json").write_text(json.dumps(card))
    world = ShippedWorld.load(str(folder))
    assert len(world.samples) == 3 and not world.complete and world.fingerprint is None
    first_digest = world.digest
    # one chunk changed on disk: named in one line
    _chunk(folder, "samples-001.parquet", [("b", 0), ("b", 1)])
    with pytest.raises(ShippedWorldError, match="samples-001.parquet has sha256"):
        ShippedWorld.load(str(folder))
    # a grown world has another digest (so the generate stage gets another key)
    files["samples-001.parquet"] = _chunk(folder, "samples-001.parquet", [("b", 0), ("b", 1)])
    (folder / "card.json").write_text(json.dumps({**card, "files": files}))
    assert ShippedWorld.load(str(folder)).digest != first_digest


def test_a_version_names_its_folder(tmp_path, monkeypatch):
    import lenbench.worlds.shipped as shipped

    for name in ("w", "w_v2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "card.json").write_text("{}")
    monkeypatch.setattr(shipped, "WORLDS_DIR", tmp_path)
    assert world_folder("w@2") == tmp_path / "w_v2"
    assert world_folder("w@1") == tmp_path / "w"
    with pytest.raises(ShippedWorldError, match="no such world"):
        world_folder("w@3")


def test_eos_share_within_each_cap():
    from lenbench.worldbuilding.cap_curve import eos_shares

    labels = pd.DataFrame({"prompt_id": ["a"] * 4 + ["b"] * 4,
                           "L": [100, 300, 800, 1536, 50, 60, 1536, 1536],
                           "finish_reason": ["stop", "stop", "stop", "length",
                                             "stop", "stop", "length", "length"]})
    shares = eos_shares(labels, caps=(64, 384, 1024, 1536), n_boot=200)
    assert {c: s["eos_share"] for c, s in shares.items()} == \
        {64: 2 / 8, 384: 4 / 8, 1024: 5 / 8, 1536: 5 / 8}
    for s in shares.values():  # the interval over prompts holds the estimate
        assert s["ci95"][0] <= s["eos_share"] <= s["ci95"][1]


def test_the_loop_check_tells_a_loop_from_a_long_answer():
    from lenbench.worldbuilding.cap_curve import distinct_ngram_share, loop_check

    rng = np.random.default_rng(0)
    loop = [7, 8, 9, 10] * 100  # the same 4 tokens over and over
    prose = rng.integers(0, 5000, 400).tolist()
    assert distinct_ngram_share(loop, n=8, tail=256) < 0.05
    assert distinct_ngram_share(prose, n=8, tail=256) == 1.0
    assert distinct_ngram_share([1, 2, 3], n=8) == 1.0  # too short to repeat
    labels = pd.DataFrame({"output_token_ids": [loop, loop, prose, prose, prose[:100]],
                           "L": [400, 400, 400, 400, 100],
                           "finish_reason": ["length", "length", "length", "stop", "stop"]})
    check = loop_check(labels, n=8, tail=256)
    assert (check["cut"], check["long_ended"]) == (3, 1)  # the 100-token answer is too short
    assert check["cut_looping_share"] == 2 / 3
    assert check["long_ended_quartiles"] == [1.0, 1.0, 1.0]


class _CharTokenizer:
    def __call__(self, text: str) -> dict:
        return {"input_ids": [ord(c) for c in text]}


class _VariedLengths:
    """Lengths from the prompt and sample index, some past the cap (censored)."""

    def generate(self, requests, cfg, on_done=None):
        results = []
        for r in requests:
            n = (3 * len(r.prompt_ids) + r.seed[2]) % 11 + 1
            results.append(GenResult([7] * cfg.max_new_tokens, "length") if n > cfg.max_new_tokens
                           else GenResult([7] * (n - 1) + [0], "stop"))
        return results, GenStats()


def test_a_complete_worlds_fingerprint_is_the_generate_stages(tmp_path):
    """From the chunks' rows in any order, the fingerprint of the labels the generate stage
    makes of the same samples: its order, its censoring and length filters."""
    prompts = pd.DataFrame({"prompt_id": [f"{i:032x}" for i in range(1, 7)],
                            "split": ["train", "test", "test", "val", "test", "train"],
                            "text": ["ab", "abcdefgh", "c", "dddd", "ee", "f"]})
    gen = group_config("generation", {
        "n_samples": 2, "dense_prompts": 2, "dense_n_samples": 3, "dense_split": "test",
        "keep_censored": False, "max_length_exclusive": 6, "max_prompt_tokens": 5})

    def run(out, **kw):
        args = {"n_samples": 2, "shard_prompts": 2, "max_prompt_tokens": 5, "progress": False,
                "eos_ids": [0], "generator": _VariedLengths(), "dense_prompts": 2,
                "dense_n_samples": 3, "dense_split": "test", **kw}
        return generate_labels(prompts, None, _CharTokenizer(), out,
                               SamplingConfig(1.0, 1.0, 8), **args)[0]

    labels = run(tmp_path / "labels", keep_censored=False, max_length_exclusive=6)
    every = run(tmp_path / "every", keep_censored=True)
    assert every["censored"].any() and (every.loc[~every["censored"], "L"] >= 6).any()
    fits = [len(t) <= gen.max_prompt_tokens for t in prompts["text"]]
    wanted = [(prompts.at[i, "prompt_id"], s) for i, s in wanted_samples(prompts, fits, gen)]
    chunks = every.sample(frac=1, random_state=0)[["prompt_id", "sample_idx", "split", "L",
                                                   "finish_reason"]]
    assert complete_fingerprint(chunks, wanted, gen) == labels_fingerprint(labels)


def test_a_run_reading_a_world_keeps_its_samples_where_grow_looks():
    """The world's digest is in the generate stage's key, not in its sample store's."""
    stage = {"model": "m", "temperature": 0.7, "max_new_tokens": 1024, "n_samples": 2}
    assert sample_key({**stage, "shipped": "0f" * 32}) == sample_key(stage)


def test_worlds_doc_cites_the_committed_cap_curves():
    """The cap-curve table in docs/worlds.md is what the committed curves hold, and the
    preset's cap is where the doc says."""
    import re
    from pathlib import Path

    from lenbench.configs import CONF_DIR

    repo = Path(__file__).resolve().parents[1]
    folder = repo / "lenbench" / "worlds" / "smollm2_sharegpt_v2"
    doc = (repo / "docs" / "worlds.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in doc.splitlines()
            if line.startswith("| ended on EOS")}
    for name, label in (("cap-curve.json", "penalty 1.1"), ("cap-curve-no-penalty.json",
                                                           "no penalty")):
        curve = json.loads((folder / name).read_text())
        row = next(line for key, line in rows.items() if label in key)
        cited = [float(x) for x in re.findall(r"([\d.]+)%", row)]
        want = [round(100 * s["eos_share"], 1) for s in curve["eos_share_within"].values()]
        assert cited == want, (name, cited, want)
        assert f"{curve['samples']:,} samples" in row
    penalized = json.loads((folder / "cap-curve.json").read_text())
    assert penalized["complete"] and penalized["repetition_penalty"] == 1.1
    preset = (CONF_DIR / "experiment" / "real_smollm2.yaml").read_text()
    assert re.search(r"max_new_tokens: 768\b", preset) and "repetition_penalty: 1.1" in preset
    censored = 100 * (1 - penalized["eos_share_within"]["768"]["eos_share"])
    assert f"{censored:.1f}% of the dense samples are censored" in doc


def test_readme_and_worlds_doc_cite_the_complete_v2_card():
    """The v2 figures the README and docs/worlds.md cite (size, censored shares, fingerprints,
    tokens) are the card's and the shipped chunks'."""
    from pathlib import Path

    import pandas as pd

    repo = Path(__file__).resolve().parents[1]
    folder = repo / "lenbench" / "worlds" / "smollm2_sharegpt_v2"
    card = json.loads((folder / "card.json").read_text())
    readme = " ".join((repo / "README.md").read_text().split())
    assert card["progress"]["complete"] and "It is complete" in readme
    assert f"labels fingerprint `{card['labels_fingerprint'][:8]}`" in readme
    assert f"{100 * card['stats']['censored_share']:.1f}% of its samples are censored" in readme
    transfer = card["transfer"]
    assert f"{transfer['progress']['shipped_samples']} samples, " \
           f"{100 * transfer['stats']['censored_share']:.1f}% censored (labels " \
           f"`{transfer['labels_fingerprint'][:8]}`)" in readme
    world = pd.concat([pd.read_parquet(folder / f) for f in card["files"]
                       if f.startswith("samples-0")])
    tokens = pd.read_parquet(folder / "samples-transfer-000.parquet")["L"].sum()
    assert f"{world['L'].sum():,} generated tokens for the world and {tokens:,}" in readme
    assert (world.groupby("prompt_id").size() >= 8).sum() >= 200
    doc = " ".join((repo / "docs" / "worlds.md").read_text().split())
    assert (f"The build is complete: {100 * card['stats']['censored_share']:.1f}% of its samples "
            f"are censored at {card['generation']['max_new_tokens']} tokens") in doc
    assert f"and {100 * transfer['stats']['censored_share']:.1f}% of the transfer set's" in doc
    assert card["stats"]["censored_share"] <= 0.25
