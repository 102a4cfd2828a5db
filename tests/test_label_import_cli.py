"""Label import through the whole app: a JSONL of real-looking prompts with known lengths is
scored by text-only predictors with no generation, and feature predictors are refused clearly."""

from __future__ import annotations

import json
from pathlib import Path

from helpers.cli import E2ERun, run_lenbench

from lenbench.results import load_results


def _trace(path: Path, n: int = 120) -> dict[str, int]:
    """Prompts whose known length depends on a word in them (so text predictors can learn it)."""
    lengths = {}
    with path.open("w") as fh:
        for i in range(n):
            kind = ["short", "medium", "long"][i % 3]
            prompt = f"Write a {kind} note about item {i}."
            lengths[prompt] = {"short": 20, "medium": 120, "long": 400}[kind] + i % 7
            fh.write(json.dumps({"prompt": prompt, "length": lengths[prompt]}) + "\n")
    return lengths


def test_jsonl_label_import_scores_text_predictors(e2e: E2ERun, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    _trace(trace)
    proc = run_lenbench("model=toy_tiny", "dataset=jsonl", f"dataset.path={trace}",
                        "predictor.suite=[constant,tfidf_ridge]", "generation.max_new_tokens=512",
                        "sim.enabled=false",
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    results, problems = load_results(tmp_path / "results")
    assert not problems
    by_name = {r.predictor.name: r for r in results}
    assert set(by_name) == {"constant", "tfidf_ridge"}  # one length per prompt: no noise floor
    mae = {k: r.metrics.static["mae"] for k, r in by_name.items()}
    assert mae["tfidf_ridge"] < 0.5 * mae["constant"]
    assert by_name["constant"].stage_keys["features"] is None


def test_label_import_refuses_feature_predictors(e2e: E2ERun, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    _trace(trace, 30)
    proc = run_lenbench("model=toy_tiny", "dataset=jsonl", f"dataset.path={trace}",
                        "predictor=mlp_probe",
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    assert proc.returncode != 0
    assert "only text-only predictors" in proc.stderr
