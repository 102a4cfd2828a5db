"""EGTP and its soft-label head: labels, loss, and a fit that beats the constant median."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from baselines.egtp import EGTP
from baselines.soft_bins import SoftBinRegressor, soft_labels
from lenbench.cli import instantiate_predictor
from lenbench.features.extract import FeatureStore
from lenbench.inputs import SplitView

CONF = Path(__file__).resolve().parent.parent / "conf" / "predictor"


def synthetic_world(folder: Path, n: int = 600, hidden: int = 8, seed: int = 0
                    ) -> tuple[pd.DataFrame, FeatureStore]:
    """A feature store where L is a smooth function of the prompt state; steps carry t / 50 in
    their last dimension (0 in the prompt state, so step 0 equals the prompt pool)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, hidden)).astype(np.float32)
    x[:, -1] = 0.0
    L = (10 + 150 / (1 + np.exp(-(1.5 * x[:, 0] + x[:, 1]))) + rng.normal(0, 3, n)).astype(int)
    L = np.clip(L, 1, 200)
    split = np.array(["train", "val", "test"])[rng.choice(3, n, p=[0.6, 0.1, 0.3])]
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "sample_idx": 0,
                           "split": split, "family": "", "text": [f"p{i}" for i in range(n)],
                           "prompt_token_ids": [[1, 2]] * n, "L": L})
    offsets = np.concatenate([[0], np.cumsum(L)])
    index = np.array([(i, t) for i in range(n) for t in range(L[i])], dtype=np.int32)
    steps = x[index[:, 0]].copy()
    steps[:, -1] = index[:, 1] / 50
    np.save(folder / "steps_offsets.npy", offsets)
    np.save(folder / "steps_index.npy", index)
    for pool in ("last", "entropy"):
        np.save(folder / f"static_last_{pool}.npy", x.astype(np.float16))
        np.save(folder / ("steps_last.npy" if pool == "last" else "steps_last_entropy.npy"),
                steps.astype(np.float16))
    tok = np.concatenate([[0], np.cumsum(2 + L)])
    np.save(folder / "entropy_offsets.npy", tok)
    np.save(folder / "entropy.npy", np.zeros(tok[-1], dtype=np.float32))
    (folder / "meta.json").write_text(json.dumps(
        {"roles": ["last"], "poolings": ["last", "entropy"], "step_roles": ["last"],
         "step_poolings": ["last", "entropy"], "step_stride": 1}))
    return labels, FeatureStore(folder)


def views(labels: pd.DataFrame, store: FeatureStore) -> dict[str, SplitView]:
    return {s: SplitView(s, labels, np.flatnonzero(labels["split"].to_numpy() == s), store)
            for s in ("train", "val", "test")}


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
    y = torch.tensor([0.36])  # bin 7
    losses = []
    for k in range(20):
        logits = torch.full((1, 20), -10.0)
        logits[0, k] = 10.0
        losses.append(float(reg.loss(logits, y)))
    assert int(np.argmin(losses)) == 7


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
    assert model.num_parameters() == 8 * 512 + 512 + 512 * 20 + 20


def test_builds_from_yaml_with_needs_from_config() -> None:
    cfg = OmegaConf.create({"generation": {"max_new_tokens": 321}, "progress": False,
                            "predictor": OmegaConf.load(CONF / "egtp.yaml")})
    pcfg = OmegaConf.to_container(cfg.predictor, resolve=True)
    pcfg.update(layer="mid", pooling="mean")
    model = instantiate_predictor(pcfg)
    assert isinstance(model, EGTP) and model.max_length == 321
    assert model.needs.hidden == ("mid",) and model.needs.pooling == ("mean",)


def run_predictor(e2e, tmp_path: Path, name: str, *overrides: str) -> dict:
    """One predictor through `lenbench` on the session's tiny toy world; its result dict."""
    from conftest import E2E_UPSTREAM, run_lenbench

    proc = run_lenbench(*E2E_UPSTREAM, f"predictor={name}", *overrides,
                        *e2e.paths(tmp_path / "results", tmp_path / "leaderboard"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    [path] = list((tmp_path / "results").rglob(f"{name}/*.json"))
    result = json.loads(path.read_text())
    assert result["status"] == "ok", result["error"]
    assert np.isfinite(result["metrics"]["static"]["mae"])
    assert result["timings"]["predict_ms_per_request"] > 0
    return result


def test_runs_through_the_harness(e2e, tmp_path: Path) -> None:
    result = run_predictor(e2e, tmp_path, "egtp")
    assert result["predictor"]["params"]["pooling"] == "entropy"
    assert result["predictor"]["params"]["max_length"] == 64  # ${generation.max_new_tokens}
    assert "argmax_bin" in result["metrics"]["variants"]
