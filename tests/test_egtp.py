"""EGTP and its soft-label head: labels, loss, and a fit that beats the constant median."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from helpers.worlds import run_predictor, synthetic_world, views
from omegaconf import OmegaConf

from baselines.egtp import EGTP
from baselines.soft_bins import SoftBinRegressor, soft_labels
from lenbench.contract.instantiate import instantiate_predictor

CONF = Path(__file__).resolve().parent.parent / "conf" / "predictor"


def test_soft_labels_sum_to_one_and_peak_at_the_true_bin() -> None:
    p = soft_labels(torch.tensor([0, 7, 19]), 20)
    assert torch.allclose(p.sum(-1), torch.ones(3))
    assert p.argmax(-1).tolist() == [0, 7, 19]
    # p_j ∝ exp(-|j - i|): neighbours at distance 1 and 2 are e^-1 and e^-2 of the peak
    assert p[1, 8] / p[1, 7] == pytest.approx(np.exp(-1), rel=1e-5)
    assert p[1, 5] / p[1, 7] == pytest.approx(np.exp(-2), rel=1e-5)
    assert p[1, 6] == pytest.approx(p[1, 8].item())


def test_loss_is_smallest_at_the_true_bin() -> None:
    reg = SoftBinRegressor(max_length=200, n_bins=20)
    for y, best in ((0.36, 7), (0.999, 19), (1.0, 20)):  # a length at max_length: the top class
        losses = []
        for k in range(21):  # 20 bins and the class of lengths at or beyond max_length
            logits = torch.full((1, 21), -10.0)
            logits[0, k] = 10.0
            losses.append(float(reg.loss(logits, torch.tensor([y]))))
        assert int(np.argmin(losses)) == best, y


def test_egtp_beats_the_constant_median(tmp_path: Path) -> None:
    v = views(*synthetic_world(tmp_path))
    model = EGTP(max_length=200, epochs=60, progress=False)
    model.fit(v["train"], v["val"])
    test = v["test"]
    pred = model.predict(test.hide_labels())
    truth = test.lengths
    mae = np.abs(pred - truth).mean()
    mae_const = np.abs(np.median(v["train"].lengths) - truth).mean()
    assert mae < 0.5 * mae_const, (mae, mae_const)
    assert pred.min() >= 1.0 and pred.max() <= 200
    assert set(model.predict_variants(test.hide_labels())) == {"argmax_bin"}
    assert model.num_parameters() == 8 * 512 + 512 + 512 * 21 + 21  # 20 bins and the top class


def test_builds_from_yaml_with_needs_from_config() -> None:
    cfg = OmegaConf.create({"generation": {"max_new_tokens": 321}, "progress": False,
                            "predictor": OmegaConf.load(CONF / "egtp.yaml")})
    pcfg = OmegaConf.to_container(cfg.predictor, resolve=True)
    pcfg.update(layer="mid", pooling="mean")
    model = instantiate_predictor(pcfg)
    assert isinstance(model, EGTP) and model.max_length == 321
    assert model.needs.hidden == ("mid",) and model.needs.pooling == ("mean",)


def test_runs_through_the_harness(e2e, tmp_path: Path) -> None:
    result = run_predictor(e2e, tmp_path, "egtp")
    assert result["predictor"]["params"]["pooling"] == "entropy"
    assert result["predictor"]["params"]["max_length"] == 64  # ${generation.max_new_tokens}
    assert "argmax_bin" in result["metrics"]["variants"]
