"""The value-of-prediction curves, the headline's load rule, withheld scores and the shared
reference simulations (lenbench/sim/sweep.py, memo.py, record.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lenbench.scoring.concordance import concordance_index
from lenbench.sim import SimConfig, memo
from lenbench.sim.record import scheduling_record
from lenbench.sim.sweep import headline_load, load_curves, noisy_oracles

# A small cluster that saturates on a few hundred short requests.
CFG = SimConfig(n_prefill=1, n_decode=2, max_num_seqs=8, n_requests=300, qps=None,
                load_factor=0.85, arrival_cv=2.0, seeds=(0, 1, 2), short_threshold="q50",
                long_threshold="q90", starvation="none", score_alphas=(0, 1),
                sweep_loads=(0.5, 1.0, 1.3), sweep_seeds=2, sweep_noisy_c=(0.7, 0.9),
                headline_min_gain=0.2)


@pytest.fixture(scope="module")
def world() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    true = (rng.lognormal(3.5, 0.9, 400).round() + 1).astype(np.int64)
    cut = true >= 200
    true[cut] = 200
    prompt = rng.integers(5, 60, 400)
    pred = true * np.exp(rng.normal(0, 0.5, 400))
    return true, pred, prompt, cut


def test_noisy_oracles_hit_their_c_index(world) -> None:
    true, _, _, cut = world
    noisy = noisy_oracles(true, cut, [0.6, 0.75, 0.9])
    sigmas = [noisy[name]["sigma"] for name in ("noisy C=0.6", "noisy C=0.75", "noisy C=0.9")]
    assert sigmas[0] > sigmas[1] > sigmas[2] > 0  # more noise, worse ranking
    for target, name in ((0.6, "noisy C=0.6"), (0.75, "noisy C=0.75"), (0.9, "noisy C=0.9")):
        c = concordance_index(true, noisy[name]["pred"], cut)
        assert c == pytest.approx(noisy[name]["c_index"]) and abs(c - target) <= 0.002


def test_curves_rule_and_headline_share_draws(world) -> None:
    true, pred, prompt, cut = world
    rec = scheduling_record(true, pred, prompt, "mine", CFG, censored=cut)
    sweep = rec["sweep"]
    refs = sweep["references"]
    assert list(refs) == ["fcfs", "oracle", "noisy C=0.7", "noisy C=0.9", "short prompt first"]
    assert list(sweep["rows"]) == ["mine"] and sweep["seeds"] == [0, 1]
    for points in [*refs.values(), *sweep["rows"].values()]:
        assert [p["load_factor"] for p in points] == [0.5, 1.0, 1.3]
    # the oracle never loses to FCFS by much and wins clearly in overload
    fcfs = [p["figures"]["e2e_mean_all"] for p in refs["fcfs"]]
    best = [p["figures"]["e2e_mean_all"] for p in refs["oracle"]]
    assert best[-1] < 0.9 * fcfs[-1]
    gains = [1 - b / f for f, b in zip(fcfs, best)]
    assert sweep["oracle_gain"] == pytest.approx(gains)
    assert sweep["oracle_gain_s"] == pytest.approx([f - b for f, b in zip(fcfs, best)])
    # the rule: the lowest load at which the oracle gains at least 20%
    want = next(lf for lf, g in zip((0.5, 1.0, 1.3), gains) if g >= 0.2)
    assert sweep["headline_load"] == want and rec["load_factor"] == pytest.approx(want)
    # the headline at that load serves the sweep's draws: its first two simulator seeds agree
    heads = {h["row"]: h for h in rec["headline"]}
    point = refs["fcfs"][[0.5, 1.0, 1.3].index(want)]
    assert heads["baseline"]["per_seed"]["e2e_mean_all"][:2] == \
        point["per_seed"]["e2e_mean_all"]
    assert heads["mine"]["score"] is not None and "score_withheld" not in rec


def test_rule_no_load_withholds_every_score(world) -> None:
    true, pred, prompt, cut = world
    cfg = CFG.replace(sweep_loads=(0.2, 0.4), headline_min_gain=0.2)
    rec = scheduling_record(true, pred, prompt, "mine", cfg, censored=cut)
    assert rec["sweep"]["headline_load"] is None
    assert "no load from 0.2 to 0.4" in rec["score_withheld"]
    assert all(h.get("score") is None for h in rec["headline"] if h["row"] != "baseline")
    for entry in rec["rows"].values():
        for score in (entry.get("score") or {}).values():
            assert score["value"] is None and score["reason"] == rec["score_withheld"]
    for entry in rec["by_alpha"]["entries"]:
        assert entry["rows"]["mine"]["score"]["value"] is None


def test_headline_load_is_the_lowest_that_clears_the_gain() -> None:
    def point(v: float) -> dict:
        return {"figures": {"e2e_mean_all": v}}

    refs = {"fcfs": [point(1.0), point(2.0), point(4.0)],
            "oracle": [point(1.0), point(1.7), point(2.0)]}
    for p, lf in zip(refs["fcfs"], (0.5, 1.0, 1.5)):
        p["load_factor"] = lf
    assert headline_load(refs, "e2e_mean_all", 0.1)[0] == 1.0
    assert headline_load(refs, "e2e_mean_all", 0.2)[0] == 1.5
    assert headline_load(refs, "e2e_mean_all", 0.6)[0] is None


def test_references_are_simulated_once_for_every_predictor(world, monkeypatch) -> None:
    true, pred, prompt, cut = world
    calls: list[str] = []
    real = memo.simulate

    def counting(*args, **kwargs):
        calls.append(kwargs["queue"])
        return real(*args, **kwargs)

    monkeypatch.setattr(memo, "simulate", counting)
    monkeypatch.setenv("LENBENCH_SIM_WORKERS", "1")  # counted in this process
    memo.clear()
    first = scheduling_record(true, pred, prompt, "a", CFG, censored=cut)
    n_first = len(calls)
    calls.clear()
    other = pred[::-1].copy()
    second = scheduling_record(true, other, prompt, "b", CFG, censored=cut)
    # the second predictor runs only its own rows: the sweep (3 loads x 2 seeds), the headline
    # seeds the sweep did not cover (1) and the guard at alpha 1 (3 seeds)
    assert len(calls) == 3 * 2 + 1 + 3 < n_first
    assert second["sweep"]["references"] == first["sweep"]["references"]
    again = scheduling_record(true, other, prompt, "b", CFG, censored=cut)
    assert len(calls) == 10 and again["sweep"] == second["sweep"]  # all kept


def test_sweep_needs_loads() -> None:
    with pytest.raises(ValueError, match="sweep_loads"):
        load_curves([10, 20], [10, 20], 5, CFG.replace(sweep_loads=(), headline_min_gain=None),
                    name="x")
    with pytest.raises(ValueError, match="headline_min_gain picks"):
        CFG.replace(sweep_loads=())
    with pytest.raises(ValueError, match="sweep_loads must increase"):
        CFG.replace(sweep_loads=(1.0, 0.5))
    with pytest.raises(ValueError, match="sweep_noisy_c"):
        CFG.replace(sweep_noisy_c=(1.2,))


def test_worker_processes_give_the_same_figures(world, monkeypatch) -> None:
    true, pred, prompt, cut = world
    records = []
    for n in ("1", "2"):
        monkeypatch.setenv("LENBENCH_SIM_WORKERS", n)
        memo.clear()
        records.append(scheduling_record(true, pred, prompt, "mine", CFG, censored=cut))
    one, two = records
    assert one["sweep"] == two["sweep"] and one["headline"] == two["headline"]
    assert one["by_alpha"]["entries"] == two["by_alpha"]["entries"]
    monkeypatch.setenv("LENBENCH_SIM_WORKERS", "two")
    memo.clear()
    with pytest.raises(ValueError, match="LENBENCH_SIM_WORKERS='two'"):
        scheduling_record(true, pred, prompt, "mine", CFG, censored=cut)
