"""Metrics: statistics, intervals, ratio intervals, captured share, HOL inversions, Kendall tau,
predictors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lenbench.sim import (
    SimConfig,
    Workload,
    aggregate,
    arrival_times,
    captured_share,
    constant,
    hol_inversion_rate,
    kendall_tau,
    lognormal_lengths,
    noisy_oracle,
    one_bit,
    oracle,
    random_permutation,
    ratio_interval,
    run_figures,
    short_prompts,
    simulate,
)
from lenbench.sim.metrics import t_quantile_975


def test_aggregate_t_interval() -> None:
    agg = aggregate([1.0, 2.0, 3.0])
    assert agg["mean"] == 2.0
    half = 4.303 * 1.0 / math.sqrt(3)
    assert agg["ci95_low"] == pytest.approx(2.0 - half)
    assert agg["ci95_high"] == pytest.approx(2.0 + half)
    one = aggregate([5.0, None])
    assert one["mean"] == 5.0 and one["ci95_low"] is None and one["per_seed"] == [5.0, None]
    assert t_quantile_975(40) == pytest.approx(2.021, abs=2e-3)
    assert t_quantile_975(120) == pytest.approx(1.980, abs=2e-3)


def test_ratio_interval_delta_method() -> None:
    """mean(num) / mean(den) with a t-interval on the linearised ratio over seeds."""
    num, den = np.array([1.0, 2.0, 4.0]), np.array([2.0, 3.0, 5.0])
    out = ratio_interval(num, den)
    ratio = 7.0 / 10.0
    e = (num - ratio * den) / den.mean()
    half = 4.303 * e.std(ddof=1) / math.sqrt(3)
    assert out["value"] == pytest.approx(ratio)
    assert (out["ci95_low"], out["ci95_high"]) == pytest.approx((ratio - half, ratio + half))
    # exact by construction: no gain is 0 and the denominator itself is 1, zero width
    assert ratio_interval(np.zeros(3), den) == {"value": 0.0, "ci95_low": 0.0, "ci95_high": 0.0,
                                                "n_sim_seeds": 3.0, "n_pred_seeds": 1.0}
    same = ratio_interval(den, den)
    assert (same["value"], same["ci95_low"], same["ci95_high"]) == (1.0, 1.0, 1.0)
    assert ratio_interval(num, [0.01, -0.01, 0.0], min_den=0.1)["value"] is None
    assert ratio_interval([1.0], [2.0])["ci95_low"] is None  # one seed: no interval
    nan = ratio_interval([1.0, np.nan, 4.0], [2.0, 3.0, 5.0])  # a seed without the figure
    assert nan["n_sim_seeds"] == 2 and nan["value"] == pytest.approx(5.0 / 7.0)
    # predictor seeds x simulator seeds: their spread widens the interval
    two = ratio_interval(np.stack([num, num * 1.5]), den)
    assert two["n_pred_seeds"] == 2 and two["value"] == pytest.approx(1.25 * ratio)
    assert two["ci95_high"] - two["ci95_low"] > out["ci95_high"] - out["ci95_low"]


def test_captured_share() -> None:
    assert captured_share(100.0, 60.0, 50.0) == pytest.approx(0.8)
    assert captured_share(100.0, 110.0, 50.0) == pytest.approx(-0.2)
    assert captured_share(100.0, 60.0, 99.9) is None  # the oracle gains < 2%: undefined
    assert captured_share(100.0, 60.0, 98.5) is None
    assert captured_share(100.0, 110.0, 105.0) is None  # the oracle loses: no sign-flipped share
    assert captured_share(None, 1.0, 2.0) is None


def test_predictors() -> None:
    true = np.array([10, 20, 30, 40, 2000])
    np.testing.assert_array_equal(oracle(true), true)
    np.testing.assert_array_equal(constant(true), np.full(5, true.mean()))
    np.testing.assert_array_equal(constant(true, 3), np.full(5, 3.0))
    perm = random_permutation(true, seed=1)
    np.testing.assert_array_equal(np.sort(perm), true)
    noisy = noisy_oracle(true, 0.5, seed=2)
    assert np.all(noisy > 0) and not np.allclose(noisy, true)
    np.testing.assert_array_equal(noisy_oracle(true, 0.0), true)
    np.testing.assert_array_equal(one_bit(true, 35), [20, 20, 20, 1020, 1020])


def test_kendall_tau_numpy_matches_known_values(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_scipy(name: str, *args: object, **kwargs: object):
        if name.startswith("scipy"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    x = np.array([1, 2, 3, 4, 5])
    monkeypatch.setattr(builtins, "__import__", no_scipy)
    assert kendall_tau(x, x) == pytest.approx(1.0)
    assert kendall_tau(x, -x) == pytest.approx(-1.0)
    # One discordant pair out of 10: (9 - 1) / 10.
    assert kendall_tau(x, np.array([1, 2, 3, 5, 4])) == pytest.approx(0.8)
    assert kendall_tau(x, np.ones(5)) is None
    # tau-b with ties: x has a tie, y does not.
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 200), rng.normal(size=200)
    numpy_tau = kendall_tau(a, b)
    monkeypatch.setattr(builtins, "__import__", real_import)
    scipy = pytest.importorskip("scipy.stats")
    assert numpy_tau == pytest.approx(scipy.kendalltau(a, b).statistic, abs=1e-12)


def _run(queue: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    n = 800
    true = lognormal_lengths(n, rng, mean=500)
    wl = Workload(arrival_times(n, 60, rng), short_prompts(n, rng), true, true.astype(float))
    return simulate(wl, SimConfig(n_decode=1, max_num_seqs=32), dispatch="rr", queue=queue)


def test_hol_inversion_rate() -> None:
    """Oracle SJF never admits the longer of two co-waiting requests first; FCFS does about
    half the time (arrival order is independent of length)."""
    assert hol_inversion_rate(_run("sjf")) == 0.0
    assert hol_inversion_rate(_run("fcfs")) == pytest.approx(0.5, abs=0.05)
    # Chunking does not change the count.
    res = _run("fcfs")
    assert hol_inversion_rate(res, max_pairs_per_chunk=1000) == hol_inversion_rate(res)


def test_run_figures_definitions() -> None:
    res = _run("fcfs", seed=1)
    figs = run_figures(res, short_threshold=300, long_threshold=900)
    wl = res.workload
    e2e = res.done_s - wl.arrival_s
    short = wl.true_len < 300
    assert figs["e2e_p99_short"] == pytest.approx(np.percentile(e2e[short], 99))
    assert figs["e2e_mean_all"] == pytest.approx(e2e.mean())
    assert figs["n_short"] == short.sum()
    assert figs["n_long"] == (wl.true_len >= 900).sum()
    span = res.done_s.max() - wl.arrival_s.min()
    assert figs["throughput_tok_s"] == pytest.approx(wl.true_len.sum() / span)
    tpot = (res.done_s - res.first_token_s) / (wl.true_len - 1)
    assert figs["tpot_p50_all"] == pytest.approx(np.median(tpot))
    qd = res.admit_s - res.kv_ready_s
    assert figs["queue_delay_p90_long"] == pytest.approx(
        np.percentile(qd[wl.true_len >= 900], 90))
    assert figs["ttft_mean_all"] == pytest.approx((res.first_token_s - wl.arrival_s).mean())
