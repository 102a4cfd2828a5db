"""opt_classifier: a small OPT proxy fine-tuned on prompt text; bins, decoding, the harness."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers.leaderboard import board_text
from helpers.worlds import run_predictor, synthetic
from omegaconf import OmegaConf

from baselines.opt_classifier import OPTClassifier
from lenbench.contract.instantiate import instantiate_predictor

CONF = Path(__file__).resolve().parent.parent / "conf" / "predictor"


def test_learns_length_from_prompt_text() -> None:
    train, test = synthetic(300, 0), synthetic(120, 1)
    model = OPTClassifier(max_length=1024, n_bins=50, progress=False)
    assert model.needs.text and not model.needs.features and not model.needs.target_model
    model.fit(train)
    hidden = test.hide_labels()
    pred = model.predict(hidden)
    # argmax-bin centres: (k + 0.5) * 1024 / 50
    assert np.allclose((pred / (1024 / 50) - 0.5) % 1, 0)
    mae = np.abs(pred - test.lengths).mean()
    mae_const = np.abs(np.median(train.lengths) - test.lengths).mean()
    assert mae < 0.6 * mae_const, (mae, mae_const)  # ~57 vs ~204
    expectation = model.predict_variants(hidden)["expectation"]
    assert expectation.shape == pred.shape and (expectation > 0).all()
    assert model.num_parameters() > 1_000_000  # MiniLM vocabulary embeddings dominate


def test_paper_preset_names_opt_125m() -> None:
    paper = OmegaConf.load(CONF / "paper" / "opt_classifier.yaml")
    assert paper.model_path == "facebook/opt-125m" and paper.max_length == 2048
    cfg = OmegaConf.create({"generation": {"max_new_tokens": 128}, "progress": False,
                            "predictor": OmegaConf.load(CONF / "opt_classifier.yaml")})
    model = instantiate_predictor(OmegaConf.to_container(cfg.predictor, resolve=True))
    assert isinstance(model, OPTClassifier) and model.max_length == 128
    assert model.centres[0] == 128 / 50 / 2


def test_runs_through_the_harness(e2e, tmp_path: Path) -> None:
    result = run_predictor(e2e, tmp_path, "opt_classifier")
    assert "expectation" in result["metrics"]["variants"]
    assert result["timings"]["n_parameters"] > 0
    assert result["report"]["batch1_latency_ms"] > 0  # the proxy's own cost, one prompt alone
    board = board_text(tmp_path / "leaderboard" / "README.md")
    row = next(ln for ln in board.splitlines() if ln.startswith("| opt_classifier |"))
    assert row.split(" | ")[8] not in ("—", "")  # ms/request column
    assert "`batch1_latency_ms`" in board
