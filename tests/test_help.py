"""`lenbench --help` describes lenbench (conf/hydra/help/lenbench.yaml), not Hydra's generic
help."""

from __future__ import annotations

from helpers.cli import run_lenbench


def test_help_describes_lenbench() -> None:
    proc = run_lenbench("--help", timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("lenbench: a benchmark harness for LLM output-length predictors")
    # the config groups with their real choices, filled in by Hydra
    assert "predictor: bert_regressor, bin_classifier, conformal, constant" in out
    assert "mlp_probe" in out and "experiment:" in out and "smoke" in out
    # examples, where results go, the debugging knobs
    for text in ("lenbench -m predictor=", "experiment=real_smollm2", "dataset=jsonl",
                 "paths.results_dir", "leaderboard/README.md", "LENBENCH_CACHE_DIR",
                 "debug=true", "--cfg job"):
        assert text in out, text
    assert "is powered by Hydra" not in out
    assert len(out.splitlines()) < 60
