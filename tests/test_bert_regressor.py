"""bert_regressor: the bundled MiniLM loads offline; fine-tuning learns length from text."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers.worlds import run_predictor, synthetic
from omegaconf import OmegaConf

from baselines.bert_regressor import BertRegressor, bundled_minilm_path
from baselines.opt_classifier import OPTClassifier

CONF = Path(__file__).resolve().parent.parent / "conf" / "predictor"


def test_minilm_loads_with_networking_disabled() -> None:
    path = Path(bundled_minilm_path())
    assert (path / "model.safetensors").stat().st_size > 80_000_000
    code = ("from transformers import AutoModel, AutoTokenizer; import sys; "
            f"m = AutoModel.from_pretrained({str(path)!r}); "
            f"t = AutoTokenizer.from_pretrained({str(path)!r}); "
            "print(m.config.num_hidden_layers, m.config.hidden_size, len(t))")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_HOME": "/nonexistent-hf-home"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.split()[-3:] == ["6", "384", "30522"]


def test_learns_length_from_prompt_text() -> None:
    train, test = synthetic(240, 0), synthetic(100, 1)
    model = BertRegressor(pooling="mean", epochs=3, max_length=2048, progress=False)
    model.fit(train)
    pred = model.predict(test.hide_labels())
    assert pred.shape == (100,) and pred.min() >= 1.0
    mae = np.abs(pred - test.lengths).mean()
    mae_const = np.abs(np.median(train.lengths) - test.lengths).mean()
    assert mae < 0.75 * mae_const, (mae, mae_const)
    assert 20_000_000 < model.num_parameters() < 25_000_000  # MiniLM-L6 + head


def test_paper_preset_names_bigbird() -> None:
    paper = OmegaConf.load(CONF / "paper" / "bert_regressor.yaml")
    assert paper.model_path == "google/bigbird-roberta-base" and paper.pooling == "cls"


def test_runs_through_the_harness(e2e, tmp_path: Path) -> None:
    result = run_predictor(e2e, tmp_path, "bert_regressor")
    assert result["predictor"]["params"]["model_path"] is None
    assert result["timings"]["n_parameters"] > 20_000_000
    assert result["report"]["batch1_latency_ms"] > 0  # the proxy's own cost, one prompt alone
    assert result["report"]["predict_batch_size"] == 64


@pytest.mark.parametrize("progress", [True, False])
@pytest.mark.parametrize("cls", [BertRegressor, OPTClassifier])
def test_fit_logs_plain_progress_lines_with_or_without_bars(cls, progress: bool, caplog
                                                            ) -> None:
    # the shared fine-tune loop: a 9-minute fit used to print nothing at all, and a batch job
    # (progress=false: no bars) needs its lines most
    caplog.set_level(logging.INFO, logger="baselines.bert_regressor")
    model = cls(max_tokens=16, epochs=2, batch_size=4, max_length=2048, progress=progress)
    model.fit(synthetic(10, 0))  # 3 steps an epoch, 6 in all
    lines = [r.getMessage() for r in caplog.records if r.name == "baselines.bert_regressor"]
    name = "bert_regressor" if cls is BertRegressor else "opt_classifier"
    assert lines[0] == f"{name} fit: 10 prompts, 2 epochs, 6 steps"
    assert f"{name} fit: epoch 2/2 done, train loss " in lines[-1]
    last_step = next(m for m in reversed(lines) if " steps (" in m)
    assert last_step.startswith(f"{name} fit: 6/6 steps (100%)")
    assert "elapsed " in last_step and ", epoch 2/2, loss " in last_step
