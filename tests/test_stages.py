"""Stages: keys from config and parent, atomic completion, resumable partial folders, locks."""

from __future__ import annotations

import json

import pytest
from filelock import Timeout

from lenbench.stages import COMPLETE_MARKER, Stage, atomic_write_bytes, stable_hash


def test_key_depends_on_config_and_parent_only(tmp_path):
    base = Stage(tmp_path, "generate", {"a": 1, "b": [1, 2]}, parent="p1")
    assert Stage(tmp_path, "generate", {"b": [1, 2], "a": 1}, parent="p1").key == base.key
    assert Stage(tmp_path / "elsewhere", "generate", {"a": 1, "b": [1, 2]}, "p1").key == base.key
    others = [Stage(tmp_path, "generate", {"a": 2, "b": [1, 2]}, parent="p1"),
              Stage(tmp_path, "generate", {"a": 1, "b": [2, 1]}, parent="p1"),
              Stage(tmp_path, "generate", {"a": 1, "b": [1, 2], "c": None}, parent="p1"),
              Stage(tmp_path, "generate", {"a": 1, "b": [1, 2]}, parent="p2"),
              Stage(tmp_path, "generate", {"a": 1, "b": [1, 2]}, parent=None),
              Stage(tmp_path, "features", {"a": 1, "b": [1, 2]}, parent="p1")]
    keys = {s.key for s in others}
    assert len(keys) == len(others) and base.key not in keys
    assert base.path == tmp_path / "generate" / base.key
    assert base.partial == tmp_path / "generate" / f"{base.key}.partial"
    assert stable_hash({"x": 1, "y": 2}) == stable_hash({"y": 2, "x": 1})
    assert len(base.key) == 12


def test_completed_stage_is_done_and_in_place(tmp_path):
    stage = Stage(tmp_path, "promptset", {"n": 3}, parent="up")
    assert not stage.done
    with stage.building() as tmp:
        assert tmp == stage.partial and tmp.is_dir()
        (tmp / "data.txt").write_text("hello")
        assert not stage.done  # nothing is complete while the body runs
    assert stage.done
    assert (stage.path / "data.txt").read_text() == "hello"
    assert not stage.partial.exists()
    meta = json.loads((stage.path / COMPLETE_MARKER).read_text())
    assert meta == {"stage": "promptset", "key": stage.key, "parent": "up", "config": {"n": 3}}
    # a fresh handle on the same config sees it done (this is how a rerun skips the stage)
    assert Stage(tmp_path, "promptset", {"n": 3}, parent="up").done
    assert not Stage(tmp_path, "promptset", {"n": 4}, parent="up").done


def test_failed_body_leaves_nothing_complete(tmp_path):
    stage = Stage(tmp_path, "features", {"n": 1})
    with pytest.raises(RuntimeError, match="boom"), stage.building() as tmp:
        (tmp / "half.npy").write_bytes(b"partial")
        raise RuntimeError("boom")
    assert not stage.done
    assert not stage.path.exists()
    assert (stage.partial / "half.npy").exists()  # left for inspection, never mistaken for done
    assert not (stage.partial / COMPLETE_MARKER).exists()
    # a non-resumable rebuild discards the leftovers first
    with stage.building() as tmp:
        assert list(tmp.iterdir()) == []
        (tmp / "full.npy").write_bytes(b"full")
    assert stage.done
    assert sorted(p.name for p in stage.path.iterdir()) == sorted([COMPLETE_MARKER, "full.npy"])


def test_resume_keeps_the_partial_folder(tmp_path):
    stage = Stage(tmp_path, "generate", {"n": 1})
    with pytest.raises(KeyboardInterrupt), stage.building(resume=True) as tmp:
        (tmp / "shard-00000.parquet").write_bytes(b"shard0")
        raise KeyboardInterrupt
    assert not stage.done
    with stage.building(resume=True) as tmp:
        assert (tmp / "shard-00000.parquet").read_bytes() == b"shard0"
        (tmp / "shard-00001.parquet").write_bytes(b"shard1")
    assert stage.done
    assert (stage.path / "shard-00000.parquet").read_bytes() == b"shard0"
    assert (stage.path / "shard-00001.parquet").read_bytes() == b"shard1"


def test_lock_excludes_a_second_builder(tmp_path):
    stage = Stage(tmp_path, "generate", {"n": 1})
    other = Stage(tmp_path, "generate", {"n": 1})
    with stage.lock(), pytest.raises(Timeout), other.lock(timeout=0.05):
        pass
    with other.lock(timeout=0.05):  # free again
        pass


def test_atomic_write_bytes(tmp_path):
    path = tmp_path / "x.json"
    atomic_write_bytes(path, b"one")
    atomic_write_bytes(path, b"two")
    assert path.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]  # no temp file left behind
