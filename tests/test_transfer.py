"""Transfer scores: predictors fitted on one world, scored on a second prompt set answered by the
same model (`dataset@transfer=PRESET`, lenbench/transfer.py, docs/protocol.md "Transfer scores").

In-process tests check the scored rows and the numbers on small synthetic worlds and the config
checks; one end-to-end run scores the smoke world's predictors on a JSONL of the toy world's list
prompts, the OUTLETS cross-domain setting in miniature.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.cli import E2E_UPSTREAM, run_lenbench
from helpers.leaderboard import board_text
from helpers.worlds import CFG, STRIDE
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from lenbench import Predictor
from lenbench.cli import CONF_DIR, typed_config
from lenbench.configs import RunConfig
from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.contract.step_index import StepIndexStore
from lenbench.leaderboard import build_leaderboard
from lenbench.pipeline import World
from lenbench.results import json_safe, validate_result
from lenbench.scoring.metrics import censored_error
from lenbench.transfer import check_transfer, score_transfer, transfer_noise_floor
from lenbench.validate import ConfigError

# ---------------------------------------------------------------------------------------------
# synthetic worlds


def _world(prompts: list[tuple[str, str, list[int]]], name: str) -> World:
    """A World from (prompt id, split, lengths of its samples)."""
    rows = [{"prompt_id": pid, "sample_idx": s, "split": split, "family": "", "text": pid,
             "prompt_token_ids": [1, 2], "output_token_ids": [], "L": L,
             "finish_reason": "stop", "censored": False}
            for pid, split, lengths in prompts for s, L in enumerate(lengths)]
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    counts = labels["split"].value_counts()
    steps = StepIndexStore.from_lengths(labels["L"].to_numpy(), STRIDE)
    return World(labels=labels, features=steps, generation_card={},
                 target_path="", dataset={"name": name, "key": f"{name}-key",
                                          "n_train": int(counts.get("train", 0)),
                                          "n_val": int(counts.get("val", 0))},
                 model={"name": "m", "key": "m"}, keys={"promptset": f"{name}-ps"},
                 fingerprints={"labels": f"{name}-fp", "features": None})


class Median(Predictor):
    """The train median; remaining length: that median less the tokens generated, at least 1."""

    def fit(self, train, val=None) -> None:
        self.value = float(np.median(train.lengths))

    def predict(self, split) -> np.ndarray:
        return np.full(len(split), self.value)

    def predict_remaining(self, split) -> np.ndarray:
        return np.maximum(self.value - split.steps.t, 1.0)


HOME = _world([(f"p{i}", ("train", "val", "test")[i % 3], [10 + 7 * i, 12 + 7 * i])
               for i in range(30)], "home")
# p0 (train) and p1 (val) were fitted on; p2 is in the world's test split; q* are new
AWAY = _world([("p0", "test", [500, 520]), ("p1", "train", [400, 410]), ("p2", "val", [30, 90]),
               *[(f"q{i}", ("train", "val", "test")[i % 3], [40 + 11 * i, 60 + 9 * i])
                 for i in range(12)]], "away")


def _fitted() -> Median:
    from lenbench.evaluate import views

    predictor = Median()
    train, val, _ = views(HOME)
    predictor.fit(train, val)
    return predictor


def test_every_split_is_scored_less_the_prompts_the_world_fitted_on():
    block = score_transfer(_fitted(), "median", HOME, AWAY, CFG, seed=0)
    scored = AWAY.labels[~AWAY.labels["prompt_id"].isin(["p0", "p1"])]
    assert block["scored_on"]["n_prompts_left_out"] == 2
    assert block["scored_on"]["n_scored"] == len(scored) == 2 + 24
    assert block["predictions"]["prompt_id"] == scored["prompt_id"].tolist()
    median = float(np.median(HOME.labels.loc[HOME.labels["split"] == "train", "L"]))
    static = block["metrics"]["static"]
    assert static["mae"] == pytest.approx(np.abs(scored["L"].to_numpy() - median).mean())
    lo, hi = static["mae_ci"]
    assert lo < static["mae"] < hi
    # both sets are named, with their keys and fingerprints
    assert block["trained_on"]["name"] == "home" and block["scored_on"]["name"] == "away"
    assert block["trained_on"]["fingerprints"]["labels"] == "home-fp"
    assert block["scored_on"]["keys"]["promptset"] == "away-ps"
    assert block["scored_on"]["splits"] == "all"


def test_a_dynamic_predictor_gets_a_transfer_dynamic_mae():
    block = score_transfer(_fitted(), "median", HOME, AWAY, CFG, seed=0)
    dynamic = block["metrics"]["dynamic"]
    assert dynamic is not None and np.isfinite(dynamic["mae"])
    errors = block["predictions"]["dynamic_error"]
    assert len(errors) == block["scored_on"]["n_scored"]
    assert dynamic["mae"] == pytest.approx(np.mean([e for e in errors if e is not None]))


def test_the_noise_floor_is_bounded_on_the_transfer_rows():
    block = transfer_noise_floor(HOME, AWAY, CFG)
    bounds = block["metrics"]["noise_floor"]
    # two samples each: in-sample is half the pair's gap, leave-one-out the whole gap
    pairs = [(30, 90)] + [(40 + 11 * i, 60 + 9 * i) for i in range(12)]
    gaps = np.array([abs(a - b) for a, b in pairs], dtype=float)
    assert bounds["leave_one_out"] == pytest.approx(gaps.mean())
    assert bounds["in_sample"] == pytest.approx(gaps.mean() / 2)



def test_the_transfer_noise_floor_keeps_censored_rows():
    """Censored samples count at their cut-off, as in the world's own reference row."""
    away = _world([(f"q{i}", "test", [40 + 11 * i, 60 + 9 * i]) for i in range(12)], "away")
    away.labels.loc[[0, 3, 5], "censored"] = True  # q0's first sample, q1's second, q2's second
    block = transfer_noise_floor(HOME, away, CFG)
    bounds = block["metrics"]["noise_floor"]
    assert bounds["n"] == 24 and bounds["n_censored"] == 3
    assert block["predictions"]["censored"].count(True) == 3
    assert block["metrics"]["static"]["n"] == 24
    # leave-one-out: each row predicted by its sibling, a censored row's error only where the
    # sibling falls short of its cut-off
    L = away.labels["L"].to_numpy(float)
    sib = L.reshape(-1, 2)[:, ::-1].reshape(-1)
    cens = away.labels["censored"].to_numpy(bool)
    expected = np.abs(censored_error(sib, L, cens)).mean()
    assert bounds["leave_one_out"] == pytest.approx(expected)

def _result(block: dict, name: str, mae: float, seed: int = 0) -> dict:
    return {"schema_version": 1, "status": "ok", "error": None, "kind": "predictor",
            "dataset": {"name": "home", "key": "k", "n_test": 20, "n_test_prompts": 10},
            "model": {"name": "m", "key": "m"},
            "predictor": {"name": name, "target": "x", "params": {}, "dynamic": True},
            "seed": seed, "config_hash": f"{name}{seed}", "config": {}, "environment": {},
            "git": {}, "created_at": "2026-01-01T00:00:00Z",
            "metrics": {"static": {"n": 20, "mae": mae, "mae_ci": [mae - 1, mae + 1]},
                        "dynamic": None, "variants": {}},
            "timings": {}, "fingerprints": {"labels": "home-fp"}, "transfer": block}


def test_the_result_validates_and_the_leaderboard_names_both_sets(tmp_path):
    block = score_transfer(_fitted(), "median", HOME, AWAY, CFG, seed=0)
    result = validate_result(json_safe(_result(block, "median", 12.5)))
    folder = tmp_path / "results" / "home" / "m" / "median"
    folder.mkdir(parents=True)
    (folder / "a.json").write_text(json.dumps(result))
    text = board_text(build_leaderboard(tmp_path / "results", tmp_path / "lb"))
    assert "### Transfer: trained on home, scored on away" in text
    assert "promptset `home-ps`" in text and "promptset `away-ps`" in text
    section = text.split("### Transfer")[1]
    row = next(ln for ln in section.splitlines() if ln.startswith("| median |"))
    mae = block["metrics"]["static"]["mae"]
    assert f"| {mae:.1f} |" in row and f"| {mae - 12.5:+.1f} |" in row


def test_two_sets_of_one_source_are_named_by_the_settings_that_tell_them_apart(tmp_path):
    block = score_transfer(_fitted(), "median", HOME, AWAY, CFG, seed=0)
    block["scored_on"]["name"] = block["trained_on"]["name"]  # both drawn from one source
    result = _result(block, "median", 12.5)
    result["config"] = {"dataset": {"name": "src", "max_words": 60, "limit": 2250,
                                    "split": {"train": 0.5}},
                        "transfer": {"name": "src", "min_words": 61, "max_words": 120,
                                     "limit": 400, "split": {"train": 0.7}}}
    folder = tmp_path / "results" / "home" / "m" / "median"
    folder.mkdir(parents=True)
    (folder / "a.json").write_text(json.dumps(json_safe(validate_result(json_safe(result)))))
    text = board_text(build_leaderboard(tmp_path / "results", tmp_path / "lb"))
    name = block["trained_on"]["name"]
    assert (f"### Transfer: trained on {name} (limit 2250, max_words 60, min_words —), "
            f"scored on {name} (limit 400, max_words 120, min_words 61)") in text
    heading = next(ln for ln in text.splitlines() if ln.startswith("### Transfer"))
    assert "split" not in heading  # scored on all its splits: the split is no difference


def test_a_broken_transfer_block_names_the_field():
    from lenbench.results import ResultError

    block = score_transfer(_fitted(), "median", HOME, AWAY, CFG, seed=0)
    del block["metrics"]["static"]["mae"]
    with pytest.raises(ResultError, match="transfer.metrics.static.mae"):
        validate_result(_result(block, "median", 12.5))


# ---------------------------------------------------------------------------------------------
# config checks: one line naming the field, before any model work


def _cfg(tmp_path: Path, transfer: dict | None, dataset: dict | None = None) -> dict:
    from lenbench.configs import load_preset

    return {"paths": {"cache_dir": str(tmp_path / "cache")},
            "dataset": dataset or {**load_preset("dataset", "toyworld"), "n_prompts": 20},
            "model": {"name": "toy_tiny"}, "transfer": transfer}


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _jsonl_preset(path: Path, **more) -> dict:
    from lenbench.configs import load_preset

    return {**load_preset("dataset", "jsonl"), "path": str(path), **more}


def _problem(cfg: dict, cap: int | None = None) -> str:
    with pytest.raises(ConfigError) as err:
        check_transfer(typed_config(cfg), cap)
    [line] = err.value.problems
    return line


def test_a_missing_file_is_one_line_naming_the_field(tmp_path):
    line = _problem(_cfg(tmp_path, _jsonl_preset(tmp_path / "nope.jsonl")))
    assert line.startswith("transfer.path=") and "no such file" in line


def test_a_transfer_node_without_a_preset_says_how_to_choose_one(tmp_path):
    line = _problem(_cfg(tmp_path, {"path": "x.jsonl"}))
    assert line.startswith("transfer:") and "dataset@transfer=" in line


def test_the_worlds_own_prompt_set_is_refused(tmp_path):
    cfg = _cfg(tmp_path, None)
    cfg["transfer"] = dict(cfg["dataset"])
    assert _problem(cfg).startswith("transfer: the same prompt set")


def test_a_trace_with_lengths_is_refused_for_a_generated_world(tmp_path):
    path = _jsonl(tmp_path / "t.jsonl", [{"prompt": f"List {i} cats.", "length": 9}
                                         for i in range(3)])
    line = _problem(_cfg(tmp_path, _jsonl_preset(path)))
    assert line.startswith("transfer.path=") and "record lengths" in line


def test_an_imported_world_needs_a_trace_of_the_same_model(tmp_path):
    world = _jsonl(tmp_path / "w.jsonl", [{"prompt": f"Tell me {i} dogs.", "length": 20 + i}
                                          for i in range(8)])
    away = _jsonl(tmp_path / "a.jsonl", [{"prompt": f"Name {i} owls.", "length": 5 + i}
                                         for i in range(8)])
    plain = _jsonl(tmp_path / "p.jsonl", [{"prompt": f"Name {i} owls."} for i in range(8)])
    ds = _jsonl_preset(world, model_name="llama")
    assert "record no lengths" in _problem(_cfg(tmp_path, _jsonl_preset(plain), ds), cap=27)
    line = _problem(_cfg(tmp_path, _jsonl_preset(away, model_name="qwen"), ds), cap=27)
    assert line.startswith("transfer.model_name='qwen'")
    check_transfer(typed_config(_cfg(tmp_path, _jsonl_preset(away, model_name="llama"), ds)),
                   27)  # fine


def test_a_typo_under_transfer_fails_at_compose_time_naming_the_field():
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["dataset@transfer=jsonl", "transfer.path=x.jsonl"])
        assert cfg.transfer.source == "jsonl" and cfg.transfer.min_words == 1  # schema defaults
        assert compose("config").transfer is None
        with pytest.raises(ConfigCompositionException) as err:
            compose("config", overrides=["dataset@transfer=jsonl", "transfer.pth=x.jsonl"])
    assert "transfer.pth" in f"{err.value} {err.value.__cause__}"


# ---------------------------------------------------------------------------------------------
# end to end on the smoke world


def _list_prompts(path: Path, n: int = 24) -> Path:
    """The toy world's list prompts from another draw: a prompt set of one family."""
    from lenbench.data.toyworld import make_corpus

    texts = list(dict.fromkeys(ex.prompt for ex in make_corpus(400, seed=7)
                               if ex.family == "list"))[:n]
    return _jsonl(path, [{"prompt": t} for t in texts])


def test_cli_wrong_transfer_config_is_one_line_and_exit_2(tmp_path):
    proc = run_lenbench("experiment=smoke", "dataset@transfer=jsonl",
                        f"transfer.path={tmp_path / 'missing.jsonl'}", "progress=false",
                        f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.results_dir={tmp_path / 'results'}",
                        f"paths.leaderboard_dir={tmp_path / 'lb'}")
    assert proc.returncode == 2, proc.stderr[-3000:]
    problems = [ln for ln in proc.stderr.splitlines() if ln.startswith("lenbench: transfer")]
    assert problems == [f"lenbench: transfer.path='{tmp_path / 'missing.jsonl'}': no such file "
                        "or folder"]
    assert not (tmp_path / "cache" / "models").exists()  # stopped before any model work


def test_smoke_world_predictors_are_scored_on_a_second_prompt_set(session_cache, toy_tiny_path,
                                                                  tmp_path):
    away = _list_prompts(tmp_path / "lists.jsonl")
    proc = run_lenbench("experiment=smoke", *E2E_UPSTREAM, "predictor.suite=[constant,mlp_probe]",
                        "sim.enabled=false", "dataset@transfer=jsonl", f"transfer.path={away}",
                        f"paths.cache_dir={session_cache}",
                        f"paths.results_dir={tmp_path / 'results'}",
                        f"paths.leaderboard_dir={tmp_path / 'lb'}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = {r["predictor"]["name"]: r for r in
               (json.loads(p.read_text()) for p in (tmp_path / "results").rglob("*.json"))}
    assert sorted(results) == ["constant", "mlp_probe", "noise_floor"]
    const, probe = results["constant"], results["mlp_probe"]
    t = const["transfer"]
    assert t["trained_on"]["name"] == "toyworld" and t["scored_on"]["name"] == "lists"
    assert t["trained_on"]["keys"]["generate"] == const["stage_keys"]["generate"]
    assert t["scored_on"]["keys"]["generate"] != t["trained_on"]["keys"]["generate"]
    assert t["scored_on"]["fingerprints"]["labels"] != t["trained_on"]["fingerprints"]["labels"]
    # the transfer set was answered by the same model: its generate stage sits under the cache
    labels = pd.read_parquet(session_cache / "generate" / t["scored_on"]["keys"]["generate"]
                             / "labels.parquet")
    assert set(labels["text"]) <= {json.loads(ln)["prompt"] for ln in away.read_text().splitlines()}
    scored = labels[labels["prompt_id"].isin(set(t["predictions"]["prompt_id"]))]
    assert t["scored_on"]["n_scored"] == len(scored) == len(t["predictions"]["true"])
    assert len(labels["prompt_id"].unique()) == (t["scored_on"]["n_scored_prompts"]
                                                 + t["scored_on"]["n_prompts_left_out"])
    # the constant predicts the same number everywhere: its transfer MAE recomputes from the
    # transfer labels and its in-world prediction
    c = const["predictions"]["pred"][0]
    true = scored["L"].to_numpy(dtype=float)
    err = np.abs(censored_error(np.full(true.size, c), true, scored["censored"].to_numpy(bool)))
    assert t["predictions"]["true"] == true.tolist()
    assert t["metrics"]["static"]["mae"] == pytest.approx(err.mean())
    assert len(t["metrics"]["static"]["mae_ci"]) == 2
    assert probe["transfer"]["metrics"]["dynamic"]["mae"] > 0  # mlp_probe is dynamic
    assert results["noise_floor"]["transfer"]["metrics"]["noise_floor"]["leave_one_out"] >= 0
    board = board_text(tmp_path / "lb" / "README.md")
    assert "### Transfer: trained on toyworld, scored on lists" in board
    assert f"labels `{t['scored_on']['key']}`" in board


def test_the_transfer_set_takes_no_dense_prompts():
    """A world's dense prompts (more samples for its noise floor) are the world's own: the
    transfer set is sampled with n_samples on every prompt, with the same sampling settings."""
    from lenbench.transfer import transfer_run_config

    gen = {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 1024, "n_samples": 2,
           "dense_prompts": 200, "dense_n_samples": 8, "dense_split": "test"}
    cfg = RunConfig.from_composed({"dataset": {"name": "home"}, "generation": gen,
                                   "transfer": {"name": "away", "source": "toyworld"}})
    run = transfer_run_config(cfg)
    assert run.dataset == cfg.transfer and run.dataset.name == "away" and run.transfer is None
    assert run.generation == replace(cfg.generation, dense_prompts=None, dense_n_samples=None,
                                     dense_split=None)
    assert cfg.generation.dense_prompts == 200  # the world's own config is untouched
    plain = replace(cfg, generation=replace(cfg.generation, dense_prompts=None,
                                            dense_n_samples=None, dense_split=None))
    assert transfer_run_config(plain).generation is plain.generation
