"""Rescoring a result's scheduling block from its stored test predictions: the same draws, today's
score, no predictor run."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.leaderboard import GOLDEN, schedule

from lenbench.configs import preset_config
from lenbench.models.shipped_toy import read_card
from lenbench.rescore_scheduling import (
    check_loads_without_generating,
    main,
    rescore_result,
    shipped_world_of,
    stored_world_config,
    world_prompt_lengths,
)
from lenbench.results import PROTOCOL_VERSION, load_results
from lenbench.sim import SimConfig
from lenbench.sim.record import rescore_scheduling, scheduling_record
from lenbench.worlds.shipped import ShippedWorld

# The toy preset's load, arrivals and guard on a smaller cluster, as an older result recorded
# it: the short-request score, no sweep over aging weights.
OLD_SIM = {"enabled": True, "n_prefill": 1, "n_decode": 2, "max_num_seqs": 8, "n_requests": 300,
           "load_factor": 0.85, "arrival_cv": 2.0, "starvation": "aging", "aging_alpha": 1.0,
           "seeds": [0, 1, 2], "short_threshold": "q50", "long_threshold": "q90",
           "score_metric": "e2e_mean_short"}


def _rows(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(3.5, 0.8, n).round() + 1
    true = np.minimum(raw, 80).astype(np.int64)
    pred = true * np.exp(rng.normal(0, 0.4, n))
    return true, pred, rng.integers(5, 40, n), raw >= 80


def test_rescoring_reproduces_a_fresh_run_on_the_same_draws() -> None:
    """The rescored block is what a run under today's score writes for the same predictions:
    the same draws (the baseline's figures per seed are the old record's), the all-requests
    score, the capped class, and the sweep over aging weights."""
    true, pred, prompt, cut = _rows()
    old = schedule(true, pred, prompt, "p", OLD_SIM)
    new = rescore_scheduling(old, "p", true, pred, prompt, cut, score_alphas=[0, 1])
    fresh = scheduling_record(true, pred, prompt, "p", SimConfig.from_dict(
        {**OLD_SIM, "score_metric": "e2e_mean_all", "score_alphas": [0, 1]}), censored=cut)
    assert new["score_metric"] == "e2e_mean_all" and new["config"]["score_alphas"] == [0.0, 1.0]
    assert new["headline"] == fresh["headline"]
    assert new["by_alpha"]["entries"] == fresh["by_alpha"]["entries"]
    assert new["class_shares"]["capped"] == pytest.approx(cut.mean())
    old_base = next(h for h in old["headline"] if h["row"] == "baseline")["per_seed"]
    new_base = next(h for h in new["headline"] if h["row"] == "baseline")["per_seed"]
    assert new_base["e2e_mean_all"] == old_base["e2e_mean_all"]  # the same draws


def test_rescoring_refuses_what_it_cannot_recompute() -> None:
    true, pred, prompt, cut = _rows(n=120)
    old = schedule(true, pred, prompt, "p", dict(OLD_SIM, n_requests=100, seeds=[0]))
    with pytest.raises(ValueError, match="scheduling.config.compare"):
        rescore_scheduling({**old, "config": {**old["config"], "compare": True}}, "p", true,
                           pred, prompt, cut)
    result = {"predictor": {"name": "p"}, "scheduling": old, "protocol_version": 3,
              "predictions": {"true": true.tolist(), "pred": pred.tolist()}}
    with pytest.raises(ValueError, match="predictions.prompt_len"):
        rescore_result(result)
    # static figures of an earlier protocol than the last static change would pass for current
    with pytest.raises(ValueError, match="protocol_version: 2"):
        rescore_result({**result, "protocol_version": 2}, prompt)


def test_command_rescores_files_in_place(tmp_path: Path) -> None:
    """`python -m lenbench.rescore_scheduling DIR` rewrites each predictor result that stores
    its prompt lengths; --dry-run writes nothing; the leaderboard loader still reads the file."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    path = next((results / "toyworld/toy/mlp_probe").glob("*.json"))
    r = json.loads(path.read_text(encoding="utf-8"))
    true, pred, prompt, cut = _rows(n=len(r["predictions"]["true"]) or 300)
    r["predictions"] = {"true": true.tolist(), "pred": pred.tolist(),
                        "censored": cut.tolist(), "prompt_len": prompt.tolist()}
    r["scheduling"] = schedule(true, pred, prompt, "mlp_probe", OLD_SIM)
    r["protocol_version"] = 3  # scored under the short-request score
    path.write_text(json.dumps(r), encoding="utf-8")
    assert main([str(results), "--dry-run", "--out", str(tmp_path / "old-vs-new.md")]) == 0
    assert json.loads(path.read_text(encoding="utf-8"))["scheduling"]["score_metric"] == \
        "e2e_mean_short"
    printed = (tmp_path / "old-vs-new.md").read_text(encoding="utf-8")
    assert f"| {path.as_posix()} | score on | e2e_mean_short | e2e_mean_all |" in printed
    old_score = next(h for h in r["scheduling"]["headline"] if h["row"] == "mlp_probe")["score"]
    assert f"| {path.as_posix()} | Score [95% CI] | {100 * old_score:.1f}% [" in printed
    assert main([str(results)]) == 0
    done = json.loads(path.read_text(encoding="utf-8"))
    assert done["scheduling"]["score_metric"] == "e2e_mean_all"
    assert done["protocol_version"] == PROTOCOL_VERSION
    assert done["scheduling"]["rescored"]["from_protocol"] == 3
    preset = preset_config("sim", "default")
    assert done["scheduling"]["by_alpha"]["alphas"] == [float(a) for a in preset.score_alphas]
    # today's protocol settings replace the record's: plain SJF at the sweep's rule load
    assert done["scheduling"]["starvation"] == "none"
    sweep = done["scheduling"]["sweep"]
    assert sweep["loads"] == [float(x) for x in preset.sweep_loads]
    assert done["scheduling"]["load_factor"] == pytest.approx(
        sweep["headline_load"] or preset.sweep_loads[-1])
    assert done["scheduling"]["config"]["n_requests"] == OLD_SIM["n_requests"]  # its cluster
    assert "rescored" in done["scheduling"] and done["predictions"]["prompt_len"] == \
        prompt.tolist()
    ok, _ = load_results(results)
    assert any(x.predictor.name == "mlp_probe" and (x.scheduling or {}).get("by_alpha")
               for x in ok)


def test_prompt_lengths_come_from_the_cached_labels(tmp_path: Path) -> None:
    """An older result's prompt lengths are read from the generate stage it names, test rows in
    order, and checked against its rows; a world neither cached nor shipped is refused, never
    generated."""
    labels = pd.DataFrame({"prompt_id": ["a", "a", "b", "c", "c"],
                           "split": ["test", "test", "train", "test", "test"],
                           "L": [5, 7, 9, 3, 4],
                           "prompt_token_ids": [[1, 2], [1, 2], [3], [4, 5, 6], [4, 5, 6]]})
    stage = tmp_path / "generate" / "abc123"
    stage.mkdir(parents=True)
    labels.to_parquet(stage / "labels.parquet")
    result = {"config": {"generation": {}}, "stage_keys": {"generate": "abc123"},
              "predictions": {"prompt_id": ["a", "a", "c", "c"], "true": [5, 7, 3, 4]}}
    lengths = world_prompt_lengths(result, str(tmp_path))
    assert lengths.tolist() == [2, 2, 3, 3]
    other = {**result, "predictions": {"prompt_id": ["a", "a", "c", "c"], "true": [5, 7, 3, 9]}}
    with pytest.raises(ValueError, match="predictions.true"):
        world_prompt_lengths(other, str(tmp_path))
    with pytest.raises(ValueError, match="stage_keys.generate"):
        world_prompt_lengths({**result, "stage_keys": {"generate": "elsewhere"}}, str(tmp_path))


def _toy_result() -> dict:
    """A result of the default toy run as its file records it: generation.shipped left null (the
    run took the toy world through its model's card), the world's labels fingerprint."""
    world = ShippedWorld.load("toyworld")
    settings = world.card["sample_key"]
    generation = {"backend": settings["backend"], "temperature": settings["temperature"],
                  "top_p": settings["top_p"], "max_new_tokens": settings["max_new_tokens"],
                  "seed": settings["seed"], "shipped": None, "regenerate": False}
    return {"config": {"model": {"source": "toy", "toy": read_card()["toy_config"],
                                 "retrain": False, "dtype": "float32"},
                       "generation": generation, "device": "cpu"},
            "model": {"key": settings["model"]},
            "fingerprints": {"labels": world.fingerprint}}


def test_a_shipped_world_is_found_by_the_results_labels_fingerprint() -> None:
    """A result that did not name its shipped world (the toy world, taken through the model's
    card) reads it by its labels fingerprint, and only when loading it generates nothing."""
    result = _toy_result()
    assert shipped_world_of(result) == "toyworld"
    other_labels = {**result, "fingerprints": {"labels": "0123456789abcdef"}}
    assert shipped_world_of(other_labels) is None
    named = {**other_labels, "config": {**result["config"], "generation": {
        **result["config"]["generation"], "shipped": "smollm2_sharegpt"}}}
    assert shipped_world_of(named) == "smollm2_sharegpt"
    cfg = stored_world_config(result)
    check_loads_without_generating(result, cfg, "toyworld")
    retrained = replace(cfg, model=replace(cfg.model, toy={**cfg.model.toy, "seed": 1}))
    with pytest.raises(ValueError, match="model.toy"):  # other weights: would be trained here
        check_loads_without_generating(result, retrained, "toyworld")
    hotter = replace(cfg, generation=replace(cfg.generation, temperature=0.5))
    with pytest.raises(ValueError, match="generation: .*temperature"):  # would be sampled here
        check_loads_without_generating(result, hotter, "toyworld")
