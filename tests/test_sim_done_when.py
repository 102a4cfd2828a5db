"""Issue 3 "Done when": the OUTLETS preset reproduces the paper's direction and magnitudes.

outlets_paper (1 prefill + 3 decode, 256 slots, 1,914 requests at 100 QPS), lognormal output
lengths of mean ~1,150 capped at 2,048, oracle predictions: LB+SJF cuts short-request P99 by
>= 25% against RR+FCFS, long-request P99 stays within 5%, throughput is no lower, and a noisy
oracle captures less of the gain than the exact one.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from lenbench.sim import (
    SimConfig,
    lognormal_lengths,
    noisy_oracle,
    short_prompts,
    simulate_predictions,
)

PRESET = Path(__file__).resolve().parents[1] / "conf" / "sim" / "outlets_paper.yaml"


def test_outlets_preset_done_when() -> None:
    cfg = SimConfig.from_dict(yaml.safe_load(PRESET.read_text()))
    assert cfg.max_num_seqs == 256 and cfg.policy == "lb+sjf" and cfg.baseline_policy == "rr+fcfs"
    rng = np.random.default_rng(2024)
    true = lognormal_lengths(20_000, rng)
    assert abs(true.mean() - 1150) < 25
    prompt = short_prompts(len(true), rng)
    res = simulate_predictions(true, noisy_oracle(true, 0.5, seed=7), prompt, cfg,
                               seeds=[0, 1], name="noisy_0.5")
    figs = {row: {k: v["mean"] for k, v in entry["figures"].items()}
            for row, entry in res["rows"].items()}
    base, orc = figs["baseline"], figs["oracle"]
    assert orc["e2e_p99_short"] <= 0.75 * base["e2e_p99_short"]
    assert abs(orc["e2e_p99_long"] / base["e2e_p99_long"] - 1) <= 0.05
    assert orc["throughput_tok_s"] >= base["throughput_tok_s"]
    share = res["rows"]["noisy_0.5"]["captured_share"]["e2e_p99_short"]["of_means"]
    assert 0 < share < 0.9
    assert res["rows"]["oracle"]["captured_share"]["e2e_p99_short"]["of_means"] == 1.0
