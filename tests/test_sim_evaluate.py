"""simulate_predictions: result structure, paired reference rows, load factor, presets, plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from lenbench.sim import (
    SimConfig,
    capacity,
    load_sweep,
    lognormal_lengths,
    noisy_oracle,
    noisy_oracle_sweep,
    random_permutation,
    simulate_predictions,
)

CONF = Path(__file__).resolve().parents[1] / "conf" / "sim"


def toy_rows(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Short answers like the embedded toy world's (mean ~45 tokens)."""
    rng = np.random.default_rng(seed)
    return lognormal_lengths(n, rng, mean=45, sigma=0.9, cap=400), rng.integers(5, 30, n)


def toy_cfg(**kw: object) -> SimConfig:
    cfg = SimConfig.from_dict(yaml.safe_load((CONF / "default.yaml").read_text()))
    return cfg.replace(**{"n_requests": 800, "seeds": (0, 1), **kw})


def test_result_structure_and_json() -> None:
    true, prompt = toy_rows()
    pred = noisy_oracle(true, 0.3, seed=1)
    res = simulate_predictions(true, pred, prompt, toy_cfg(), name="mine",
                               extra_predictors={"random": random_permutation(true, 2)})
    text = json.dumps(res, allow_nan=False)  # strict JSON: no NaN, no numpy types
    assert json.loads(text)["policy"] == "lb+sjf"
    assert list(res["rows"]) == ["baseline", "mine", "oracle", "constant", "random"]
    assert res["rows"]["baseline"]["policy"] == "rr+fcfs"
    assert res["rows"]["mine"]["policy"] == "lb+sjf"
    oracle_row = res["rows"]["oracle"]
    assert oracle_row["quality"]["kendall_tau"] == pytest.approx(1.0)
    assert oracle_row["captured_share"]["e2e_p99_short"]["of_means"] == pytest.approx(1.0)
    assert oracle_row["price_of_misprediction"] == pytest.approx(1.0)
    fig = res["rows"]["mine"]["figures"]["e2e_p99_short"]
    assert len(fig["per_seed"]) == 2 and fig["ci95_low"] <= fig["mean"] <= fig["ci95_high"]
    assert res["short_threshold"] == pytest.approx(np.percentile(true, 50))
    assert res["long_threshold"] == pytest.approx(np.percentile(true, 90))
    q = res["rows"]["mine"]["e2e_quantiles"]
    assert len(q["levels"]) == 101 and np.all(np.diff(q["short"]) >= 0)
    headline = {h["row"]: h for h in res["headline"]}
    assert set(headline) == set(res["rows"])
    assert headline["baseline"]["captured_share"] is None
    # The toy default is sized so that decode queues form and predictions matter.
    assert headline["oracle"]["e2e_p99_short"] < 0.7 * headline["baseline"]["e2e_p99_short"]
    assert headline["mine"]["captured_share"] > headline["random"]["captured_share"]
    assert res["config"]["load_factor"] == 1.1 and res["seeds"] == [0, 1]


def test_reference_rows_are_paired_and_deterministic() -> None:
    true, prompt = toy_rows()
    a = simulate_predictions(true, true * 1.0, prompt, toy_cfg())
    b = simulate_predictions(true, true * 1.0, prompt, toy_cfg())
    # An oracle passed as the predictor reproduces the oracle row exactly (same draws).
    assert a["rows"]["predictor"]["figures"] == a["rows"]["oracle"]["figures"]
    for row in a["rows"]:
        assert a["rows"][row]["figures"] == b["rows"][row]["figures"]


def test_load_factor_sets_qps_from_capacity() -> None:
    true, prompt = toy_rows()
    cfg = toy_cfg()
    cap = capacity(cfg, prompt.mean(), true.mean())
    res = simulate_predictions(true, true, prompt, cfg, seeds=[0])
    assert res["saturation_qps"] == pytest.approx(cap["saturation_qps"])
    assert res["qps"] == pytest.approx(1.1 * cap["saturation_qps"])
    assert res["load_factor"] == pytest.approx(1.1)
    fixed = simulate_predictions(true, true, prompt, cfg.replace(load_factor=None, qps=50.0),
                                 seeds=[0])
    assert fixed["qps"] == 50.0


def test_capacity_matches_simulated_saturation() -> None:
    """Far above the estimated saturation rate, measured decode throughput is close to the
    estimate (within the drain-phase and length-mix slack)."""
    true, prompt = toy_rows(seed=3)
    cfg = toy_cfg(load_factor=3.0, n_requests=3000)
    res = simulate_predictions(true, true, prompt, cfg, seeds=[0])
    est = capacity(cfg, prompt.mean(), true.mean())["decode_tok_s"]
    measured = res["rows"]["baseline"]["figures"]["throughput_tok_s"]["mean"]
    assert 0.7 * est < measured < 1.1 * est


def test_presets_load() -> None:
    for path in sorted(CONF.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        assert data.pop("enabled") is True
        cfg = SimConfig.from_dict(data)
        assert cfg.to_dict().keys() == data.keys(), path.name
    paper = SimConfig.from_dict(yaml.safe_load((CONF / "outlets_paper.yaml").read_text()))
    assert (paper.n_prefill, paper.n_decode, paper.n_requests, paper.qps,
            paper.max_num_seqs) == (1, 3, 1914, 100, 256)
    assert paper == SimConfig()  # the dataclass defaults are the paper preset
    with pytest.raises(KeyError):
        SimConfig.from_dict({"qsp": 10})


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        SimConfig(dispatch="random")
    with pytest.raises(ValueError):
        SimConfig(starvation="promotion")
    with pytest.raises(ValueError):
        SimConfig(short_threshold="median")
    with pytest.raises(ValueError):
        SimConfig(qps=None, load_factor=None)
    assert SimConfig(short_threshold="q25").thresholds([1, 2, 3, 4, 5]) == (2.0, 1536.0)


def test_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lenbench.sim.plots import plot_latency_cdfs, plot_p99_vs_load, plot_p99_vs_quality

    true, prompt = toy_rows()
    cfg = toy_cfg(n_requests=400, seeds=(0,))
    sweep = noisy_oracle_sweep(true, prompt, cfg, sigmas=[0.3, 1.0])
    assert {"noisy_0.3", "noisy_1"} <= set(sweep["rows"])
    loads = load_sweep(true, true, prompt, cfg, [0.8, 1.2])
    paths = [plot_latency_cdfs(sweep, tmp_path / "cdf.png"),
             plot_p99_vs_load(loads, tmp_path / "load.png"),
             plot_p99_vs_quality(sweep, tmp_path / "quality.png"),
             plot_p99_vs_quality([sweep, loads[0]], tmp_path / "quality2.png")]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
