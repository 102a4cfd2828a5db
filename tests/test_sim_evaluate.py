"""simulate_predictions: result structure, paired reference rows, the score (0 for a constant and
1 for the oracle by construction, with an interval), load factor, presets, plots."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lenbench.configs import load_preset
from lenbench.sim import (
    SCORE_METRICS,
    SimConfig,
    Workload,
    capacity,
    load_sweep,
    lognormal_lengths,
    noisy_oracle,
    noisy_oracle_sweep,
    random_permutation,
    simulate,
    simulate_predictions,
)
from lenbench.sim.capacity import resolve_qps
from lenbench.sim.evaluate import CHANGE_METRICS
from lenbench.sim.workload import draw_rows

CONF = Path(__file__).resolve().parents[1] / "conf" / "sim"


def toy_rows(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Short answers like the embedded toy world's (mean ~45 tokens)."""
    rng = np.random.default_rng(seed)
    return lognormal_lengths(n, rng, mean=45, sigma=0.9, cap=400), rng.integers(5, 30, n)


def toy_cfg(**kw: object) -> SimConfig:
    cfg = SimConfig.from_dict(load_preset("sim", "default"))
    return cfg.replace(**{"n_requests": 800, "seeds": (0, 1), **kw})


def test_result_structure_and_json() -> None:
    true, prompt = toy_rows()
    pred = noisy_oracle(true, 0.3, seed=1)
    res = simulate_predictions(true, pred, prompt, toy_cfg(), name="mine",
                               extra_predictors={"random": random_permutation(true, 2)})
    text = json.dumps(res, allow_nan=False)  # strict JSON: no NaN, no numpy types
    assert json.loads(text)["policy"] == "lb+sjf"
    assert list(res["rows"]) == ["baseline", "mine", "oracle", "constant", "random"]
    # Same dispatcher for every row: the baseline differs from the policy in queue order only.
    assert res["baseline_policy"] == res["rows"]["baseline"]["policy"] == "lb+fcfs"
    assert res["rows"]["mine"]["policy"] == "lb+sjf"
    assert res["starvation"] == "none"  # the preset's headline is plain SJF
    assert "rank quantiles" in res["queue_key"] and "quantiles per second" in res["queue_key"]
    assert res["score_metric"] == "e2e_mean_all" and "delta method" in res["score_interval"]
    oracle_row = res["rows"]["oracle"]
    assert oracle_row["quality"]["kendall_tau"] == pytest.approx(1.0)
    mine = res["rows"]["mine"]
    for metric in SCORE_METRICS:
        score = mine["score"][metric]
        assert score["n_sim_seeds"] == 2 and len(score["per_seed"]) == 2
        if score["value"] is not None:
            assert score["ci95_low"] <= score["value"] <= score["ci95_high"]
    for metric in CHANGE_METRICS:  # short and long classes, always reported
        change = mine["change"][metric]
        if metric in ("e2e_mean_capped", "e2e_p99_capped"):  # no row is cut at a cap: empty
            assert change["value"] is None and res["class_shares"]["capped"] == 0.0
            continue
        base = res["rows"]["baseline"]["figures"][metric]["mean"]
        row = mine["figures"][metric]["mean"]
        assert change["value"] == pytest.approx(row / base - 1)
        assert change["ci95_low"] <= change["value"] <= change["ci95_high"]
    fig = res["rows"]["mine"]["figures"]["e2e_p99_short"]
    assert len(fig["per_seed"]) == 2 and fig["ci95_low"] <= fig["mean"] <= fig["ci95_high"]
    assert res["short_threshold"] == pytest.approx(np.percentile(true, 50))
    assert res["long_threshold"] == pytest.approx(np.percentile(true, 90))
    q = res["rows"]["mine"]["e2e_quantiles"]
    assert len(q["levels"]) == 101 and np.all(np.diff(q["short"]) >= 0)
    headline = {h["row"]: h for h in res["headline"]}
    assert set(headline) == set(res["rows"])
    assert headline["baseline"]["score"] is None
    assert headline["oracle"]["score"] == 1.0 and headline["oracle"]["score_ci95"] == [1.0, 1.0]
    assert headline["constant"]["score"] == 0.0
    for key in ("e2e_p99_long_change", "e2e_mean_long_change", "e2e_p90_short_change"):
        assert headline["mine"][key] is not None
    assert len(headline["mine"]["per_seed"]["e2e_mean_short"]) == 2
    # Queues form at the toy default, so true lengths do help short requests.
    assert headline["oracle"]["e2e_mean_short"] < 0.95 * headline["baseline"]["e2e_mean_short"]
    assert headline["mine"]["score"] > headline["random"]["score"]
    assert res["config"]["load_factor"] == 0.85 and res["seeds"] == [0, 1]


@pytest.mark.parametrize("dispatch", ["lb", "pow2", "rr"])
def test_constant_scores_zero_and_oracle_one_by_construction(dispatch: str) -> None:
    """A constant predictor of any value reproduces the baseline run exactly (its SJF order is
    FCFS order and dispatch does not read predictions), so it scores exactly 0 with a zero-width
    interval on every metric; the oracle passed as a predictor scores exactly 1."""
    true, prompt = toy_rows()
    cfg = toy_cfg(dispatch=dispatch, seeds=(0, 1, 2))
    res = simulate_predictions(true, np.full(len(true), 7.0), prompt, cfg, name="flat",
                               extra_predictors={"exact": true.astype(float)},
                               quantile_points=0)
    rows = res["rows"]
    assert rows["flat"]["figures"] == rows["baseline"]["figures"] == rows["constant"]["figures"]
    assert rows["oracle"]["score"]["e2e_mean_short"]["value"] is not None  # not vacuous
    for metric in SCORE_METRICS:
        for row, want in (("flat", 0.0), ("constant", 0.0), ("exact", 1.0), ("oracle", 1.0)):
            score = rows[row]["score"][metric]
            if score["value"] is None:  # the oracle's gain is unclear: undefined for all rows
                assert rows["oracle"]["score"][metric]["value"] is None
                continue
            assert (score["value"], score["ci95_low"], score["ci95_high"]) == (want, want, want)
    for metric in CHANGE_METRICS:  # no capped class here: that change is undefined
        assert rows["flat"]["change"][metric]["value"] == (
            None if metric in ("e2e_mean_capped", "e2e_p99_capped") else 0.0)


def test_dispatch_uses_predictions_keeps_reference_rows_exact() -> None:
    """With dispatch on predictions the constant reference row still is the baseline run."""
    true, prompt = toy_rows()
    cfg = toy_cfg(dispatch_uses_predictions=True)
    res = simulate_predictions(true, noisy_oracle(true, 0.5, 3), prompt, cfg,
                               quantile_points=0)
    assert res["rows"]["constant"]["figures"] == res["rows"]["baseline"]["figures"]
    assert res["rows"]["constant"]["score"]["e2e_mean_short"]["value"] == 0.0
    assert res["rows"]["oracle"]["score"]["e2e_mean_short"]["value"] == 1.0


def test_default_preset_baseline_is_stable() -> None:
    """At the toy preset's load the FCFS baseline's mean latency does not grow with the
    number of requests (queues do not grow without bound); at load factor 1.1 it does."""
    true, prompt = toy_rows()

    def baseline_mean_e2e(cfg: SimConfig, n: int) -> float:
        qps, _ = resolve_qps(cfg, float(prompt.mean()), float(true.mean()))
        means = []
        for seed in (0, 1):
            idx, arrivals = draw_rows(len(true), n, qps, seed, cfg.arrival_cv)
            wl = Workload(arrivals, prompt[idx], true[idx], np.ones(n))
            means.append(float(simulate(wl, cfg, queue="fcfs", seed=seed).e2e_s.mean()))
        return float(np.mean(means))

    cfg = toy_cfg()
    assert baseline_mean_e2e(cfg, 6000) < 1.15 * baseline_mean_e2e(cfg, 1000)
    over = cfg.replace(load_factor=1.1)
    assert baseline_mean_e2e(over, 6000) > 2.0 * baseline_mean_e2e(over, 1000)


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
    assert res["qps"] == pytest.approx(cfg.load_factor * cap["saturation_qps"])
    assert res["load_factor"] == pytest.approx(cfg.load_factor)
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
        data = load_preset("sim", path.stem)
        assert data.pop("enabled") is True
        cfg = SimConfig.from_dict(data)
        assert cfg.to_dict() == data, path.name
    paper = SimConfig.from_dict(load_preset("sim", "outlets_paper"))
    assert (paper.n_prefill, paper.n_decode, paper.n_requests, paper.qps,
            paper.max_num_seqs) == (1, 3, 1914, 100, 256)
    assert paper == SimConfig()  # the dataclass defaults are the paper preset
    with pytest.raises(KeyError):
        SimConfig.from_dict({"qsp": 10})
    with pytest.raises(KeyError):  # the baseline is always the policy's dispatcher with FCFS
        SimConfig.from_dict({"baseline_dispatch": "rr"})
    toy = SimConfig.from_dict(load_preset("sim", "default"))
    assert toy.baseline_policy == "lb+fcfs" and paper.baseline_policy == "lb+fcfs"
    assert toy.starvation == "none" and toy.headline_min_gain == 0.2  # plain SJF where queues form
    assert toy.sweep_loads[0] <= 0.5 and toy.sweep_loads[-1] >= 1.2 and len(toy.sweep_loads) >= 5
    assert not toy.dispatch_uses_predictions and not paper.dispatch_uses_predictions


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        SimConfig(dispatch="random")
    with pytest.raises(ValueError):
        SimConfig(starvation="promotion")
    with pytest.raises(ValueError):
        SimConfig(short_threshold="median")
    with pytest.raises(ValueError):
        SimConfig(qps=None, load_factor=None)
    with pytest.raises(ValueError):
        SimConfig(score_metric="e2e_p99_long")
    with pytest.raises(TypeError):
        SimConfig(dispatch_uses_predictions="yes")  # type: ignore[arg-type]
    assert SimConfig(short_threshold="q25").thresholds([1, 2, 3, 4, 5]) == (2.0, 1536.0)


def test_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from lenbench.sim.plots import (
        plot_latency_cdfs,
        plot_p99_vs_load,
        plot_p99_vs_quality,
        plot_score_vs_quality,
    )

    true, prompt = toy_rows()
    cfg = toy_cfg(n_requests=400, seeds=(0,))
    sweep = noisy_oracle_sweep(true, prompt, cfg, sigmas=[0.3, 1.0])
    assert {"noisy_0.3", "noisy_1"} <= set(sweep["rows"])
    loads = load_sweep(true, true, prompt, cfg, [0.8, 1.2])
    paths = [plot_latency_cdfs(sweep, tmp_path / "cdf.png"),
             plot_p99_vs_load(loads, tmp_path / "load.png"),
             plot_p99_vs_quality(sweep, tmp_path / "quality.png"),
             plot_p99_vs_quality([sweep, loads[0]], tmp_path / "quality2.png"),
             plot_score_vs_quality([sweep, loads[0]], tmp_path / "score.png"),
             plot_score_vs_quality(sweep, tmp_path / "score_c.png", rank={"noisy_0.3": 0.8},
                                   rank_label="C-index")]
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
