"""The generate stage's shards as Ray tasks: the same labels as the local runner, even when a task
dies mid-shard and Ray retries it.

On a small local cluster (2 CPUs) the toy_tiny world's generate stage runs once locally and once
as Ray tasks (one per shard); the labels (fingerprint, token ids) must be the same. A second Ray
run kills one task's first attempt after its samples reached the sample store and before its
shard was written: the retry must end with the same labels and each sample stored exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest

N_PROMPTS = 10  # -> 4 shards of 3 prompts (3, 3, 3, 1): 4 Ray tasks
SETTINGS = ["model=toy_tiny", f"dataset.n_prompts={N_PROMPTS}", "generation.n_samples=2",
            "generation.max_new_tokens=16", "generation.shard_prompts=3", "progress=false",
            "threads=1"]


def _ray():
    """Ray, or a skip where it is not installed (the checks above need no Ray)."""
    return pytest.importorskip("ray", reason="generation.executor=ray needs ray (pip install "
                                             "lenbench[ray])")


def test_ray_not_installed_names_the_extra(monkeypatch):
    import sys

    from lenbench.generation import ray_executor

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray fails
    with pytest.raises(ray_executor.RaySetupError, match=r"pip install lenbench\[ray\]"):
        ray_executor.import_ray()


def test_executor_settings_are_checked(monkeypatch):
    import importlib.util

    from lenbench.generation.ray_executor import check_executor
    from lenbench.validate import config_problems

    assert config_problems({"generation": {"executor": "ray"}}) == []
    assert config_problems({"generation": {"executor": "dask"}}) == \
        ["generation.executor='dask': use one of ['local', 'ray']"]
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else find_spec(name, *a))
    assert config_problems({"generation": {"executor": "ray"}}) == \
        ["generation.executor=ray needs Ray: pip install lenbench[ray]"]

    with pytest.raises(ValueError, match="generation.executor='dask' is unknown"):
        check_executor("dask", None)
    with pytest.raises(ValueError, match="leave generation.worker null"):
        check_executor("ray", 1)


@pytest.mark.parametrize("address, why", [("127.0.0.1:1", "cannot connect"),
                                          ("headnode", "expected host:port")])
def test_a_bad_address_fails_fast_and_says_what_to_give(address, why):
    from lenbench.generation.ray_executor import RaySetupError, connect

    ray = _ray()
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")
    with pytest.raises(RaySetupError, match=rf"generation.ray_address='{address}': no Ray "
                                           rf"cluster there \({why}"):
        connect(address)


@pytest.fixture(scope="module")
def local_ray():
    """A local cluster of 2 CPUs for the module (the executor joins it, and leaves it up)."""
    ray = _ray()
    try:
        ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
                 log_to_driver=False)
    except Exception as exc:  # no room for a cluster here: not this code's failure
        pytest.skip(f"a local Ray cluster could not start: {exc}")
    yield
    ray.shutdown()


def _world(root: Path, session_cache: Path, *overrides: str):
    """prepare_world on a fresh cache that reuses the session's toy_tiny model."""
    from hydra import compose, initialize_config_dir

    from lenbench import pipeline
    from lenbench.cli import CONF_DIR, resolved_config, typed_config

    root.mkdir()
    (root / "toymodel").symlink_to(session_cache / "toymodel", target_is_directory=True)
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[*SETTINGS, f"paths.cache_dir={root}", *overrides])
    return pipeline.prepare_world(typed_config(resolved_config(cfg)), need_features=False,
                                  progress=False)


@pytest.fixture(scope="module")
def reference(toy_tiny_path, session_cache, tmp_path_factory):
    return _world(tmp_path_factory.mktemp("local") / "cache", session_cache)


def _same_labels(world, ref) -> None:
    assert world.fingerprints["labels"] == ref.fingerprints["labels"]
    assert world.keys["generate"] == ref.keys["generate"]  # the executor is not in the key
    ids = ["prompt_id", "sample_idx", "output_token_ids", "L", "finish_reason"]
    pd.testing.assert_frame_equal(world.labels[ids], ref.labels[ids])


def _stored_once(cache: Path) -> None:
    """Every generated sample is in the sample store exactly once."""
    parts = sorted((cache / "samples").glob("*/part-*.parquet"))
    stored = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    keys = list(zip(stored["prompt_id"], stored["sample_idx"]))
    assert len(keys) == len(set(keys)) == 2 * N_PROMPTS


def test_ray_executor_gives_the_local_labels(local_ray, reference, session_cache, tmp_path):
    world = _world(tmp_path / "cache", session_cache, "generation.executor=ray")
    _same_labels(world, reference)
    card = world.generation_card
    assert card["executor"] == "ray" and card["ray_tasks"] == 4
    assert reference.generation_card.get("executor") is None
    _stored_once(tmp_path / "cache")


def test_a_task_killed_mid_shard_is_retried_losing_and_repeating_nothing(
        local_ray, reference, session_cache, tmp_path, monkeypatch):
    from lenbench.generation.ray_executor import KILL_ENV

    marker = tmp_path / "killed"
    # two tasks (shards 0, 2 and 1, 3); task 1's first attempt dies once its first shard's
    # samples are in the store, before that shard's table is written
    monkeypatch.setenv(KILL_ENV, f"1:{marker}")
    world = _world(tmp_path / "cache", session_cache, "generation.executor=ray",
                   "generation.workers=2", "generation.ray_max_retries=2")
    assert marker.exists()  # the first attempt died (os._exit) in a Ray worker process
    assert int(marker.read_text()) != os.getpid()
    assert world.generation_card["ray_tasks"] == 2
    _same_labels(world, reference)
    _stored_once(tmp_path / "cache")


def test_a_killed_task_without_retries_fails_the_stage(local_ray, session_cache, tmp_path,
                                                       monkeypatch):
    from lenbench.generation.ray_executor import KILL_ENV

    monkeypatch.setenv(KILL_ENV, f"0:{tmp_path / 'killed'}")
    with pytest.raises(_ray().exceptions.RayError):
        _world(tmp_path / "cache", session_cache, "generation.executor=ray",
               "generation.ray_max_retries=0")
