"""Workloads: the Azure trace loader, synthetic lengths, seeded draws and arrivals."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lenbench.sim import (
    Workload,
    arrival_times,
    draw_workload,
    load_azure_trace,
    lognormal_lengths,
)

AZURE = Path(__file__).parent / "data" / "azure_llm_inference_2023"  # README.md there
CODE = AZURE / "AzureLLMInferenceTrace_code.csv"


def test_azure_trace_rows_and_columns() -> None:
    wl = load_azure_trace(CODE)
    assert len(wl) == 8819  # `wc -l` says 8,819 lines: a header, and the last row lacks a newline
    # First rows: 18:17:03.9799600 4808/10, 18:17:04.0319600 3180/8, 18:17:04.0781490 110/27.
    np.testing.assert_array_equal(wl.prompt_len[:3], [4808, 3180, 110])
    np.testing.assert_array_equal(wl.true_len[:3], [10, 8, 27])
    np.testing.assert_allclose(wl.arrival_s[:3], [0.0, 0.052, 0.098189], atol=1e-6)
    assert np.all(np.diff(wl.arrival_s) >= 0)
    np.testing.assert_array_equal(wl.pred_len, wl.true_len)  # oracle until replaced
    limited = load_azure_trace(CODE, limit=100)
    assert len(limited) == 100
    np.testing.assert_array_equal(limited.prompt_len, wl.prompt_len[:100])


def test_azure_conv_trace_replays(tmp_path: Path) -> None:
    from lenbench.sim import SimConfig, simulate

    wl = load_azure_trace(AZURE / "AzureLLMInferenceTrace_conv_first2000.csv", limit=2000)
    assert len(wl) == 2000 and wl.arrival_s[0] == 0.0
    res = simulate(wl, SimConfig(n_decode=2))
    np.testing.assert_array_equal(res.generated, wl.true_len)


def test_azure_loader_checks_columns(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,Tokens\n2023-11-16 18:17:03.9,10\n")
    with pytest.raises(ValueError, match="missing columns"):
        load_azure_trace(bad)


def test_lognormal_lengths_mean_and_cap() -> None:
    lengths = lognormal_lengths(200_000, np.random.default_rng(0))
    assert lengths.max() <= 2048 and lengths.min() >= 1
    assert lengths.mean() == pytest.approx(1150, rel=0.01)
    assert lognormal_lengths(50_000, np.random.default_rng(1), mean=300, cap=4096).mean() == \
        pytest.approx(300, rel=0.02)


def test_poisson_arrivals() -> None:
    arr = arrival_times(100_000, 50.0, np.random.default_rng(0))
    gaps = np.diff(arr)
    assert arr[0] == 0.0
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.03)
    bursty = np.diff(arrival_times(100_000, 50.0, np.random.default_rng(0), cv=3.0))
    assert bursty.mean() == pytest.approx(1 / 50, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(3.0, rel=0.1)


def test_draw_workload_is_seeded_and_paired() -> None:
    true = np.arange(1, 101)
    a = draw_workload(true, true * 2.0, 10, n_requests=500, qps=20, seed=3)
    b = draw_workload(true, np.zeros(100), 10, n_requests=500, qps=20, seed=3)
    np.testing.assert_array_equal(a.true_len, b.true_len)
    np.testing.assert_array_equal(a.arrival_s, b.arrival_s)
    np.testing.assert_array_equal(a.pred_len, 2.0 * a.true_len)
    c = draw_workload(true, true, 10, n_requests=500, qps=20, seed=4)
    assert not np.array_equal(a.true_len, c.true_len)


def test_workload_validation() -> None:
    with pytest.raises(ValueError):
        Workload(np.array([1.0, 0.0]), np.array([1, 1]), np.array([2, 2]), np.array([2., 2.]))
    with pytest.raises(ValueError):
        Workload(np.array([0.0]), np.array([1]), np.array([0]), np.array([2.0]))
    with pytest.raises(ValueError):
        Workload(np.array([0.0]), np.array([1, 2]), np.array([3]), np.array([2.0]))
