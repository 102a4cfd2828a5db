"""Sharded generation across processes: N workers fill one stage, merged as one process would.

Worker i of N generates the shards k with k % N == i; whoever finds every shard on disk merges
them in shard order. Two real processes on the toy_tiny model must end with exactly the labels of
a one-process run, each shard generated once; through the pipeline, `generation.worker=i` runs
only generate, and the run that follows reads the merged stage without loading the model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers.cli import FIXTURES, REPO
from helpers.models import toy_prompt_table

from lenbench.generation.protocol import SamplingConfig
from lenbench.generation.runner import ShardsPending, generate_labels

N_PROMPTS = 10  # -> 4 shards of 3 prompts (3, 3, 3, 1)
MAX_NEW = 32


def _prompt_table(n: int = N_PROMPTS) -> pd.DataFrame:
    return toy_prompt_table(n, seed=321)


def _gen(toy, prompts, out_dir, **kw):
    sys.path.insert(0, str(FIXTURES))
    from generate_worker_job import ARGS

    return generate_labels(prompts, toy.model, toy.tokenizer, out_dir,
                           SamplingConfig(1.0, 1.0, MAX_NEW), **{**ARGS, **kw})


def test_two_worker_processes_merge_to_the_one_process_labels(toy_tiny, toy_tiny_path, tmp_path):
    prompts = _prompt_table()
    prompts_file = tmp_path / "prompts.parquet"
    prompts.to_parquet(prompts_file)
    shards = tmp_path / "shards"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO),
                                                        os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(FIXTURES / "generate_worker_job.py"),
                               toy_tiny_path, str(prompts_file), str(shards), str(i), "2",
                               str(tmp_path / f"worker{i}.json")],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()[-3000:]
    reports = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in range(2)]
    # each worker generated exactly its own shards (0, 2 and 1, 3): 3+3 and 3+1 prompts x 2, in
    # one call that keeps the decoder's slots full across its shards
    assert reports[0]["generated_requests"] == [12]
    assert reports[1]["generated_requests"] == [8]
    assert sorted(shards.glob("shard-*.parquet")) == [shards / f"shard-{k:05d}.parquet"
                                                      for k in range(4)]

    reference, _ = _gen(toy_tiny, prompts, tmp_path / "one")  # one process, all shards
    # at least the last worker to finish saw every shard and merged them
    complete = [r for r in reports if r["complete"]]
    assert complete
    for r in complete:
        merged = pd.read_parquet(tmp_path / f"worker{r['worker']}.parquet")
        pd.testing.assert_frame_equal(merged, reference)
    # and any later run merges from disk, generating nothing
    labels, card = _gen(toy_tiny, prompts, shards,
                        generator_factory=lambda: pytest.fail("every shard is on disk"))
    pd.testing.assert_frame_equal(labels, reference)
    assert card["rows_resumed"] == 2 * N_PROMPTS


def test_worker_with_missing_shards_reports_them(toy_tiny, tmp_path):
    prompts = _prompt_table()
    with pytest.raises(ShardsPending) as info:
        _gen(toy_tiny, prompts, tmp_path / "w", worker=1, num_workers=3)
    assert info.value.missing == [0, 2, 3] and info.value.n_shards == 4
    assert sorted(p.name for p in (tmp_path / "w").glob("shard-*.parquet")) == \
        ["shard-00001.parquet"]
    with pytest.raises(ValueError, match=r"generation.worker=3 must be in \[0, 3\)"):
        _gen(toy_tiny, prompts, tmp_path / "w", worker=3, num_workers=3)


def test_max_length_exclusive_drops_rows_at_the_limit(toy_tiny, tmp_path):
    prompts = _prompt_table()
    kept, _ = _gen(toy_tiny, prompts, tmp_path / "all")
    stops = kept[kept["finish_reason"] == "stop"]
    limit = int(sorted(stops["L"])[len(stops) // 2])
    assert (stops["L"] == limit).any()  # a stop row exactly at the limit is dropped too
    labels, card = _gen(toy_tiny, prompts, tmp_path / "all", max_length_exclusive=limit)
    want = kept[kept["L"] < limit].reset_index(drop=True)
    pd.testing.assert_frame_equal(labels, want)
    assert card["n_dropped_length"] == int((kept["L"] >= limit).sum())


# ------------------------------------------------------------------------------------------------
# through the pipeline and the CLI's worker mode


def _cfg(cache: Path, *overrides: str):
    from hydra import compose, initialize_config_dir

    from lenbench.cli import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=[
            "model=toy_tiny", "dataset.n_prompts=10", "generation.n_samples=2",
            "generation.max_new_tokens=16", "generation.shard_prompts=3", "progress=false",
            "threads=1", f"paths.cache_dir={cache}", *overrides])


def _typed(cfg):
    """The composed config as the CLI hands it to the pipeline."""
    from lenbench.cli import resolved_config, typed_config

    return typed_config(resolved_config(cfg))


def _cache_with_toy_model(root: Path, session_cache: Path) -> Path:
    """A fresh cache folder that reuses the session's toy_tiny model (no retraining)."""
    root.mkdir()
    (root / "toymodel").symlink_to(session_cache / "toymodel", target_is_directory=True)
    return root


def test_pipeline_workers_then_sweep_equal_one_process(toy_tiny_path, session_cache, tmp_path,
                                                       monkeypatch):
    from lenbench import cli, pipeline

    workers_cache = _cache_with_toy_model(tmp_path / "workers", session_cache)
    for i in (0, 1):
        cfg = _cfg(workers_cache, "generation.workers=2", f"generation.worker={i}")
        assert cli.run(cfg) == []  # a worker only generates: no predictor, no result
        stages = [p for p in (workers_cache / "generate").iterdir() if p.is_dir()]
        if i == 0:  # shards 0 and 2 written, the stage not complete yet
            assert [p.name.endswith(".partial") for p in stages] == [True]
            assert sorted(p.name for p in (stages[0] / "shards").glob("*.parquet")) == \
                ["shard-00000.parquet", "shard-00002.parquet"]
        else:  # the second worker found every shard and completed the stage
            assert [p.name.endswith(".partial") for p in stages] == [False]

    # the sweep that follows reads the merged labels without loading the target model
    monkeypatch.setattr(pipeline, "load_target",
                        lambda *a, **k: pytest.fail("labels are cached: no model load"))
    world = pipeline.prepare_world(_typed(_cfg(workers_cache)), need_features=False,
                                   progress=False)
    monkeypatch.undo()
    one_cache = _cache_with_toy_model(tmp_path / "one", session_cache)
    ref = pipeline.prepare_world(_typed(_cfg(one_cache)), need_features=False, progress=False)
    pd.testing.assert_frame_equal(world.labels, ref.labels)
    assert world.keys["generate"] == ref.keys["generate"]  # workers are not in the cache key
    assert world.generation_card["num_workers"] == 2 and ref.generation_card["num_workers"] == 1


def test_eos_ids_without_weights_match_the_loaded_model(toy_tiny, toy_tiny_path):
    """The pipeline reads EOS ids from the saved configs (no weights): same ids as the model."""
    from lenbench.models.chat import eos_token_ids, pretrained_eos_ids

    assert pretrained_eos_ids(toy_tiny_path, toy_tiny.tokenizer) == \
        eos_token_ids(toy_tiny.model, toy_tiny.tokenizer)


def test_pipeline_dispatches_openai_backend_without_loading_weights(
        toy_tiny_path, session_cache, tmp_path, monkeypatch):
    """generation=openai through the generate stage: the toy server's greedy labels equal the hf
    backend's, and the pipeline loads only the tokenizer (no weights) to get them."""
    from helpers.servers import ToyServer, free_port

    from lenbench import pipeline

    greedy = ["generation.temperature=0.0", "generation.n_samples=1",
              "generation.keep_censored=true"]
    hf = pipeline.prepare_world(_typed(_cfg(
        _cache_with_toy_model(tmp_path / "hf", session_cache), *greedy)),
        need_features=False, progress=False)
    server = ToyServer(toy_tiny_path, free_port())
    try:
        monkeypatch.setattr(pipeline, "load_target",
                            lambda *a, **k: pytest.fail("the openai backend loads no weights"))
        cfg = _cfg(_cache_with_toy_model(tmp_path / "oa", session_cache), *greedy,
                   "generation=openai", f"generation.base_url={server.url}",
                   "generation.concurrency=2")
        oa = pipeline.prepare_world(_typed(cfg), need_features=False, progress=False)
    finally:
        server.stop()
    cols = ["prompt_id", "sample_idx", "prompt_token_ids", "output_token_ids", "L",
            "finish_reason", "censored"]
    a, b = (w.labels[cols].map(lambda v: list(v) if hasattr(v, "tolist") else v)
            for w in (oa, hf))
    pd.testing.assert_frame_equal(a, b)
    assert oa.generation_card["backend"] == "openai" and hf.generation_card["backend"] == "hf"
    assert oa.keys["generate"] != hf.keys["generate"]  # a different backend: its own labels
