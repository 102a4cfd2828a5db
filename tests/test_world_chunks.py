"""A world that grows in chunks: each chunk checked by its sha256, the samples of a wider cap cut
to the world's, and the samples a world wants counted by the generate stage's own rule."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenbench.worldbuilding.grow import cut_at_cap, wanted_samples
from lenbench.worlds.sample_store import KnownSample
from lenbench.worlds.shipped import ShippedWorld, ShippedWorldError, file_sha256, world_folder


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
    gen = {"n_samples": 2, "dense_prompts": 2, "dense_n_samples": 4, "dense_split": "test"}
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
