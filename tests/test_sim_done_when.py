"""The simulator's acceptance checks: the OUTLETS preset reproduces the paper's direction and
magnitudes.

outlets_paper (1 prefill + 3 decode, 256 slots, 1,914 requests at 100 QPS), lognormal output
lengths of mean ~1,150 capped at 2,048, oracle predictions: LB+SJF cuts short-request P99 by
>= 25% against RR+FCFS (the paper's comparison), and also against the score's baseline, the same
dispatcher with FCFS (LB+FCFS), so the gain is the queue order's and not the dispatcher's;
long-request P99 stays within 5%, throughput is no lower, and a noisy oracle scores less than
the exact one (the score is 1 for the oracle and 0 for a constant by construction).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lenbench.configs import load_preset
from lenbench.sim import (
    SimConfig,
    Workload,
    lognormal_lengths,
    noisy_oracle,
    short_prompts,
    simulate,
    simulate_predictions,
)
from lenbench.sim.workload import draw_rows

PRESET = Path(__file__).resolve().parents[1] / "conf" / "sim" / "outlets_paper.yaml"


def test_outlets_preset_done_when() -> None:
    cfg = SimConfig.from_dict(load_preset("sim", "outlets_paper"))
    assert cfg.max_num_seqs == 256 and cfg.policy == "lb+sjf" and cfg.baseline_policy == "lb+fcfs"
    rng = np.random.default_rng(2024)
    true = lognormal_lengths(20_000, rng)
    assert abs(true.mean() - 1150) < 25
    prompt = short_prompts(len(true), rng)
    res = simulate_predictions(true, noisy_oracle(true, 0.5, seed=7), prompt, cfg,
                               seeds=[0, 1], name="noisy_0.5", quantile_points=0)
    figs = {row: {k: v["mean"] for k, v in entry["figures"].items()}
            for row, entry in res["rows"].items()}
    base, orc = figs["baseline"], figs["oracle"]
    assert orc["e2e_p99_short"] <= 0.75 * base["e2e_p99_short"]
    assert abs(orc["e2e_p99_long"] / base["e2e_p99_long"] - 1) <= 0.05
    assert orc["throughput_tok_s"] >= base["throughput_tok_s"]
    score = res["rows"]["noisy_0.5"]["score"][cfg.score_metric]
    assert 0 < score["value"] < 1 and score["ci95_high"] < 1
    assert res["rows"]["oracle"]["score"][cfg.score_metric]["value"] == 1.0
    assert res["rows"]["constant"]["score"][cfg.score_metric]["value"] == 0.0
    # The paper's comparison, RR+FCFS, on the seed-0 draw: at least as large a cut.
    idx, arrivals = draw_rows(len(true), cfg.n_requests, res["qps"], 0, cfg.arrival_cv)
    wl = Workload(arrivals, prompt[idx], true[idx], true[idx].astype(np.float64))
    rr = simulate(wl, cfg, dispatch="rr", queue="fcfs", seed=0)
    short = true[idx] < cfg.short_threshold
    rr_p99 = float(np.percentile(rr.e2e_s[short], 99))
    assert res["rows"]["oracle"]["figures"]["e2e_p99_short"]["per_seed"][0] <= 0.75 * rr_p99
