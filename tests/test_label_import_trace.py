"""Importing a length trace loads no model: a 2,000-row trace with lengths beyond the default
cap, some rows flagged censored and some unlabelled, scored by text-only predictors on an empty
cache; the cap comes from the data, the world from the file and the declared model name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from helpers.cli import run_lenbench
from helpers.leaderboard import board_text

from lenbench.results import load_results

KINDS = {"haiku": 20, "summary": 120, "report": 420, "essay": 700}


def write_trace(path: Path, n: int = 2000, seed: int = 0) -> dict:
    """Prompts whose length follows a word in them; every 50th flagged as cut at the cap 800,
    every 100th without a length."""
    rng = np.random.default_rng(seed)
    largest, n_censored, n_unlabelled = 0, 0, 0
    with path.open("w") as fh:
        for i in range(n):
            kind = list(KINDS)[i % len(KINDS)]
            row: dict = {"prompt": f"Please write a {kind} about subject number {i}."}
            if i % 100 == 99:
                n_unlabelled += 1
            elif i % 50 == 7:
                row.update(length=800, finish_reason="length")
                n_censored += 1
            else:
                row["length"] = min(int(KINDS[kind] * rng.lognormal(0.0, 0.2)) + 1, 799)
            largest = max(largest, row.get("length", 0))
            fh.write(json.dumps(row) + "\n")
    return {"largest": largest, "n_censored": n_censored, "n_unlabelled": n_unlabelled}


def test_a_trace_imports_without_any_model(tmp_path: Path) -> None:
    trace = tmp_path / "llama_trace.jsonl"
    facts = write_trace(trace)
    cache = tmp_path / "cache"
    proc = run_lenbench("dataset=jsonl", f"dataset.path={trace}", "dataset.model_name=llama-3-8b",
                        "predictor.suite=[constant,prompt_length,tfidf_ridge]",
                        "sim.enabled=false", "eval.n_boot=100", "progress=false",
                        f"paths.cache_dir={cache}", f"paths.results_dir={tmp_path / 'res'}",
                        f"paths.leaderboard_dir={tmp_path / 'board'}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    # no model stage of any kind was built: nothing was trained, converted or loaded
    # hydra: logs
    assert sorted(p.name for p in cache.iterdir()) == ["hydra", "import", "promptset"]
    results, problems = load_results(tmp_path / "res")
    assert not problems and len(results) == 3
    by_name = {r.predictor.name: r for r in results}
    for r in results:
        assert r.dataset.name == "llama_trace" and r.model.name == "llama-3-8b"
        assert r.config["generation"]["max_new_tokens"] == facts["largest"] == 800
        assert r.generation["n_prompts_unlabelled"] == facts["n_unlabelled"]
        assert r.metrics.static["n_censored"] > 0  # censored test rows, scored as such
    ridge = by_name["tfidf_ridge"]
    assert ridge.predictor.params["max_length"] == facts["largest"]
    assert max(ridge.predictions.pred) > 600  # essays: nothing clipped at the default 256
    mae = {k: r.metrics.static["mae"] for k, r in by_name.items()}
    assert mae["tfidf_ridge"] < 0.7 * mae["constant"]  # ~151 vs ~252
    board = board_text(tmp_path / "board" / "README.md")
    assert "## llama_trace / llama-3-8b" in board
    assert "jsonl / toy" not in board
    assert (f"{facts['n_unlabelled']} prompts without a length dropped; predictions clipped to "
            "800 (the largest length in the file)") in board


def test_a_declared_cap_below_a_label_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace, n=40)
    proc = run_lenbench("dataset=jsonl", f"dataset.path={trace}", "dataset.max_length=256",
                        "predictor=constant", f"paths.cache_dir={tmp_path / 'c'}",
                        f"paths.results_dir={tmp_path / 'res'}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "dataset.max_length=256: below the largest length in the file (800)" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_feature_predictors_are_refused_on_a_trace_before_any_model(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace, n=40)
    cache = tmp_path / "c"
    proc = run_lenbench("dataset=jsonl", f"dataset.path={trace}", "predictor=mlp_probe",
                        f"paths.cache_dir={cache}", f"paths.results_dir={tmp_path / 'res'}",
                        timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "only text-only predictors" in proc.stderr and "Traceback" not in proc.stderr
    assert not (cache / "toymodel").exists()


def test_zero_lengths_and_repeated_prompts_are_said(tmp_path: Path) -> None:
    """A length of 0 is a counted bad row (a response has at least one token); a prompt repeated
    on a second line loses that line's length, and the run says so."""
    trace = tmp_path / "t.jsonl"
    write_trace(trace, n=60)
    with trace.open("a") as fh:
        fh.write(json.dumps({"prompt": "an empty answer", "length": 0}) + "\n")
        fh.write(json.dumps({"prompt": "Please write a haiku about subject number 0.",
                             "length": 999}) + "\n")
    proc = run_lenbench("dataset=jsonl", f"dataset.path={trace}", "predictor=constant",
                        "sim.enabled=false", f"paths.cache_dir={tmp_path / 'c'}",
                        f"paths.results_dir={tmp_path / 'res'}",
                        f"paths.leaderboard_dir={tmp_path / 'board'}", timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = proc.stdout + proc.stderr
    assert "1 rows of" in log and "repeat an earlier prompt" in log
    (card,) = (tmp_path / "c" / "promptset").glob("*/card.json")
    dropped = json.loads(card.read_text())["dropped"]
    assert dropped == {"duplicate": 1, "wrong_type": 1}
    result = json.loads(next((tmp_path / "res").rglob("*.json")).read_text())
    assert result["config"]["generation"]["max_new_tokens"] == 800  # not the dropped 999
