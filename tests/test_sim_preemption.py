"""Preemptive re-ranking (queue srpt): hand-solved single-server instances, the preemption cost,
the per-request cap, the reduction to non-preemptive SJF, remaining-length lookups, ordering by
a predicted distribution, and the comparison rows."""

from __future__ import annotations

import numpy as np
import pytest

from lenbench.contract.distributions import QUANTILE_LEVELS
from lenbench.sim import LinearTimeModel, SimConfig, Workload, simulate, simulate_predictions
from lenbench.sim.comparison import compare_policies, distribution_key
from lenbench.sim.remaining import RemainingEstimates

# 10 ms per decode iteration, free prefill and link: the decode instance is one server whose
# job of true length L needs L - 1 slots of 10 ms.
FLAT = LinearTimeModel(10.0, 0.0, 0.0, prefill_base_ms=0.0, prefill_ms_per_token=0.0,
                       prefill_ms_per_sq_token=0.0)
ONE_SLOT = {"n_decode": 1, "max_num_seqs": 1, "kv_bytes_per_token": 0, "link_latency_ms": 0.0}
ARRAYS = ("first_token_s", "kv_ready_s", "admit_s", "done_s", "instance", "admit_seq",
          "generated")


def three_jobs(prompt: int = 0) -> Workload:
    """A (L=7, 6 slots) at 0 ms, B (L=3, 2 slots) at 5 ms, C (L=2, 1 slot) at 25 ms."""
    return Workload(np.array([0.0, 0.005, 0.025]), np.full(3, prompt), np.array([7, 3, 2]),
                    np.array([7.0, 3.0, 2.0]))


def busy(seed: int, n: int = 600) -> Workload:
    rng = np.random.default_rng(seed)
    true = np.clip(rng.lognormal(5.0, 0.8, n).round(), 2, 1500).astype(np.int64)
    pred = np.maximum(np.rint(true * np.exp(rng.normal(0, 0.5, n))), 2.0)
    arrivals = np.sort(rng.uniform(0, 10.0, n))
    return Workload(arrivals, rng.integers(4, 50, n), true, pred)


def test_srpt_exact_sizes_is_optimal_on_one_server() -> None:
    """Decisions at 10 ms boundaries: B can start at 10 ms at the earliest (response >= 25 ms),
    C at 30 ms once B is done (>= 15 ms), and all 9 slots end at 90 ms, so someone responds
    at 90 - arrival; that is least with A (the earliest arrival) last: 90 + 25 + 15 = 130 ms.
    SRPT on exact sizes reaches it: A is preempted at 10 ms for B, C follows B, A resumes."""
    cfg = SimConfig(**ONE_SLOT)
    wl = three_jobs()
    res = simulate(wl, cfg, time_model=FLAT, dispatch="rr", queue="srpt")
    np.testing.assert_allclose(res.done_s, [0.090, 0.030, 0.040])
    assert (res.done_s - wl.arrival_s).mean() == pytest.approx(0.130 / 3)
    np.testing.assert_array_equal(res.preemptions, [1, 0, 0])
    np.testing.assert_array_equal(res.generated, wl.true_len)
    np.testing.assert_allclose(res.admit_s, [0.0, 0.010, 0.030])  # first admissions
    # non-preemptive SJF must let A finish first: 60 + 85 (B) + 45 (C) = 190 ms
    sjf = simulate(wl, cfg, time_model=FLAT, dispatch="rr", queue="sjf")
    assert (sjf.done_s - wl.arrival_s).sum() == pytest.approx(0.190)
    assert sjf.preemptions.sum() == 0


def test_recompute_cost_is_charged_exactly() -> None:
    """Prefill at 5 ms per token: A is evicted at 10 ms with 2 tokens generated (prompt 0), so
    its resumption at 40 ms prefills 2 tokens again in the next iteration: the marginal
    prefill_ms(1 + 2) - prefill_ms(1) = 10 ms. B and C finish before A resumes: unchanged."""
    model = LinearTimeModel(10.0, 0.0, 0.0, prefill_base_ms=0.0, prefill_ms_per_token=5.0,
                            prefill_ms_per_sq_token=0.0)
    cfg = SimConfig(preempt_cost="recompute", **ONE_SLOT)
    res = simulate(three_jobs(), cfg, time_model=model, dispatch="rr", queue="srpt")
    np.testing.assert_allclose(res.done_s, [0.090 + 0.010, 0.030, 0.040])


def test_swap_cost_is_charged_each_way() -> None:
    """1 MB of KV per token over 1 GB/s: 1 ms per token. Swapping A's 2 tokens out at 10 ms
    delays B (done 32 ms) and C (42 ms); swapping them back in delays A: 42 + 2 + 50 = 94 ms.
    With zero KV bytes the swap is free and the schedule is the free one."""
    cfg = SimConfig(preempt_cost="swap", swap_bandwidth_gb_s=1.0,
                    **{**ONE_SLOT, "kv_bytes_per_token": 1_000_000})
    res = simulate(three_jobs(), cfg, time_model=FLAT, dispatch="rr", queue="srpt")
    np.testing.assert_allclose(res.done_s, [0.094, 0.032, 0.042])
    free = simulate(three_jobs(), cfg.replace(kv_bytes_per_token=0), time_model=FLAT,
                    dispatch="rr", queue="srpt")
    np.testing.assert_allclose(free.done_s, [0.090, 0.030, 0.040])


def test_max_preemptions_is_respected() -> None:
    """A (L=20) is preempted by B (L=3) at 10 ms and, resumed at 30 ms, by C (L=3, arrives at
    35 ms) at 40 ms; with a cap of one preemption C waits for A instead."""
    wl = Workload(np.array([0.0, 0.005, 0.035]), np.zeros(3, dtype=np.int64),
                  np.array([20, 3, 3]), np.array([20.0, 3.0, 3.0]))
    free = simulate(wl, SimConfig(**ONE_SLOT), time_model=FLAT, dispatch="rr", queue="srpt")
    np.testing.assert_array_equal(free.preemptions, [2, 0, 0])
    np.testing.assert_allclose(free.done_s, [0.230, 0.030, 0.060])
    capped = simulate(wl, SimConfig(max_preemptions=1, **ONE_SLOT), time_model=FLAT,
                      dispatch="rr", queue="srpt")
    np.testing.assert_array_equal(capped.preemptions, [1, 0, 0])
    np.testing.assert_allclose(capped.done_s, [0.210, 0.030, 0.230])
    # on a busy cluster no request exceeds the cap, yet preemption happens
    cfg = SimConfig(n_decode=2, max_num_seqs=16, max_preemptions=1, n_requests=600)
    res = simulate(busy(3), cfg, queue="srpt")
    assert res.preemptions.max() == 1 and res.preemptions.sum() > 10
    np.testing.assert_array_equal(res.generated, busy(3).true_len)


@pytest.mark.parametrize("knob", [{"repredict_every": 10**9}, {"max_preemptions": 0}])
def test_no_re_ranking_reduces_to_sjf(knob: dict) -> None:
    """With no re-rank point before any finish (or no preemption allowed), srpt admits by
    pred - 1 (integer predictions >= 2: the order of pred) and never preempts: the SJF run."""
    cfg = SimConfig(n_decode=2, max_num_seqs=16, n_requests=600, **knob)
    wl = busy(0)
    srpt = simulate(wl, cfg, queue="srpt")
    sjf = simulate(wl, cfg, queue="sjf")
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(srpt, name), getattr(sjf, name), err_msg=name)
    assert srpt.preemptions.sum() == 0
    assert simulate(wl, cfg.replace(repredict_every=1, max_preemptions=4),
                    queue="srpt").preemptions.sum() > 0


def test_remaining_lookup_latest_step_minus_generated() -> None:
    """Row 0 scored at t=0 (r=10) and t=5 (r=2); row 1 never: its static prediction stands."""
    est = RemainingEstimates([0, 0], [0, 5], [10.0, 2.0], n_rows=2)
    req = est.for_requests([0, 1, 0], static_total=[50.0, 40.0, 50.0])
    # t = 3: latest step 0, total 10 (remaining 7); t = 5 and 9: total 5 + 2 = 7
    np.testing.assert_allclose(req.totals(np.array([0, 1, 2]), np.array([3, 3, 9])),
                               [10.0, 40.0, 7.0])
    assert req.total(0, 5) == 7.0 and req.total(0, 8) == 7.0
    assert req.total(2, 2) == 10.0  # a cursor never runs ahead of a smaller t


def test_remaining_lookup_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    rows, ts = [], []
    for r in range(40):
        t = np.unique(rng.integers(0, 60, rng.integers(0, 12)))
        rows += [r] * t.size
        ts += t.tolist()
    rem = rng.uniform(1, 100, len(ts))
    est = RemainingEstimates(rows, ts, rem, n_rows=40)
    static = rng.uniform(1, 100, 40)
    req = est.for_requests(np.arange(40), static)
    t = np.zeros(40, dtype=np.int64)
    for _ in range(30):  # t grows by 0-7 per lookup, as while decoding
        t += rng.integers(0, 8, 40)
        got = req.totals(np.arange(40), t)
        for r in range(40):
            mine = [i for i in range(len(ts)) if rows[i] == r and ts[i] <= t[r]]
            want = ts[mine[-1]] + rem[mine[-1]] if mine else static[r]
            assert got[r] == pytest.approx(want)


def test_exact_dynamic_estimates_reproduce_the_srpt_oracle() -> None:
    """Estimates of L - t at every step make the dynamic run the oracle's (remaining L - t)."""
    wl = busy(1, n=300)
    cfg = SimConfig(n_decode=2, max_num_seqs=8, n_requests=300)
    rows = np.repeat(np.arange(len(wl)), wl.true_len)
    t = np.concatenate([np.arange(L) for L in wl.true_len])
    est = RemainingEstimates(rows, t, wl.true_len[rows] - t, len(wl))
    flat = np.ones(len(wl))  # lb dispatch must not read the (different) static predictions
    dyn = simulate(wl, cfg, queue="srpt", dispatch_len=flat,
                   remaining=est.for_requests(np.arange(len(wl)), wl.pred_len))
    exact = simulate(wl.with_predictions(wl.true_len), cfg, queue="srpt", dispatch_len=flat)
    # the dynamic run stops at more re-rank points: times agree up to rounding, order exactly
    for name in ("first_token_s", "kv_ready_s", "admit_s", "done_s"):
        np.testing.assert_allclose(getattr(dyn, name), getattr(exact, name), rtol=1e-12,
                                   err_msg=name)
    for name in ("instance", "admit_seq", "generated", "preemptions"):
        np.testing.assert_array_equal(getattr(dyn, name), getattr(exact, name), err_msg=name)
    assert exact.preemptions.sum() > 0


def test_dynamic_estimates_follow_the_step_clock() -> None:
    """Step t's estimate reads y_1 ... y_{t+1}, so it is usable once t + 1 tokens exist. A (L=20)
    is admitted at 0 ms with y_1 from prefill; after iteration k it has k + 1 tokens, so its
    step-5 estimate (total 105: remaining 99) is read first at k = 5 (50 ms), not at k = 4.
    B (L=2, waits from 1 ms with 1 token) is keyed by its step-0 estimate (total 2, remaining
    1), not by its step-1 estimate (total 1001), which reads y_2; so B preempts A at 50 ms and
    is done one iteration later, at 60 ms (a clock one token ahead: 50 ms, or 200 ms when B's
    step-1 estimate is read while it waits). A resumes with 6 tokens and ends at 200 ms."""
    wl = Workload(np.array([0.0, 0.001]), np.zeros(2, dtype=np.int64), np.array([20, 2]),
                  np.array([20.0, 2.0]))
    for b_steps in ((), ((0, 2.0), (1, 1000.0))):
        rows = [0, 0] + [1] * len(b_steps)
        steps = [0, 5] + [t for t, _ in b_steps]
        rem = [1.0, 100.0] + [r for _, r in b_steps]
        est = RemainingEstimates(rows, steps, rem, n_rows=2).for_requests([0, 1], wl.pred_len)
        res = simulate(wl, SimConfig(**ONE_SLOT), time_model=FLAT, dispatch="rr",
                       queue="srpt", remaining=est)
        np.testing.assert_array_equal(res.preemptions, [1, 0])
        np.testing.assert_allclose(res.done_s, [0.200, 0.060])
        np.testing.assert_array_equal(res.generated, wl.true_len)


def test_distribution_keys_by_hand() -> None:
    """Quantiles 1..5 at levels 0.1..0.9 are symmetric about 3 (mean = median = 3)."""
    q = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])
    assert distribution_key(q, SimConfig(order_by="quantile", order_quantile=0.9))[0] == 5.0
    assert distribution_key(q, SimConfig(order_by="quantile", order_quantile=0.25))[0] == 2.0
    tail = distribution_key(q, SimConfig(order_by="tail", tail_beta=0.5))[0]
    assert tail == pytest.approx(3.0 + 0.5 * (5.0 - 3.0))
    assert distribution_key(q, SimConfig(order_by="point")) is None


def test_quantile_order_differs_from_point_order() -> None:
    """X has the smaller point prediction (10 vs 20) but a long predicted tail (q0.9 = 100 vs
    25): SJF by point serves X first, SJF by the q0.9 quantile serves Y first."""
    wl = Workload(np.array([0.0, 0.005, 0.006]), np.zeros(3, dtype=np.int64),
                  np.array([6, 12, 12]), np.array([6.0, 10.0, 20.0]))
    quantiles = np.array([[5, 5, 6, 6, 7], [4, 6, 10, 40, 100], [15, 18, 20, 22, 25]], float)
    cfg = SimConfig(order_by="quantile", order_quantile=0.9, **ONE_SLOT)
    by_point = simulate(wl, cfg, time_model=FLAT, dispatch="rr", queue="sjf")
    by_tail = simulate(wl.with_predictions(distribution_key(quantiles, cfg)), cfg,
                       time_model=FLAT, dispatch="rr", queue="sjf")
    assert list(np.argsort(by_point.admit_seq)) == [0, 1, 2]
    assert list(np.argsort(by_tail.admit_seq)) == [0, 2, 1]


def test_compare_policies_rows_and_scores() -> None:
    """Paired rows: static_sjf is the reference's predictor row, the SRPT oracle beats the
    non-preemptive oracle here (score > 1), missing inputs are listed as skipped."""
    rng = np.random.default_rng(5)
    true = (rng.lognormal(3.5, 0.8, 300).round() + 2).astype(np.int64)
    pred = true * np.exp(rng.normal(0, 0.3, true.size))
    cfg = SimConfig(n_decode=2, max_num_seqs=8, n_requests=300, load_factor=0.9, qps=None,
                    arrival_cv=2.0, seeds=(0, 1, 2), short_threshold="q50",
                    long_threshold="q90", preempt_cost="swap", compare=True)
    ref = simulate_predictions(true, pred, 20, cfg, name="p")
    q = np.sort(pred[:, None] * np.array([0.6, 0.8, 1.0, 1.3, 1.8]), axis=1)
    out = compare_policies(true, pred, 20, cfg, name="p", reference=ref, quantiles=q)
    assert list(out["rows"]) == ["static_sjf", "static_preemptive", "distributional",
                                 "oracle_preemptive"]
    assert out["skipped"] == {"dynamic_preemptive": "the predictor has no dynamic predictions"}
    metric = cfg.score_metric
    assert out["rows"]["static_sjf"]["score"][metric]["value"] == pytest.approx(
        ref["rows"]["p"]["score"][metric]["value"])
    assert out["rows"]["oracle_preemptive"]["score"][metric]["value"] > 1.0
    assert out["rows"]["oracle_preemptive"]["figures"]["preemptions_per_request"]["mean"] > 0
    assert out["rows"]["static_sjf"]["figures"]["preemptions_per_request"]["mean"] == 0.0
    assert QUANTILE_LEVELS == (0.1, 0.25, 0.5, 0.75, 0.9)


def test_config_checks() -> None:
    with pytest.raises(ValueError, match="repredict_every"):
        SimConfig(repredict_every=0)
    with pytest.raises(ValueError, match="preempt_cost"):
        SimConfig(preempt_cost="drop")
    with pytest.raises(ValueError, match="promotion"):
        SimConfig(queue="srpt", starvation="promotion", t_starve_s=1.0)
    with pytest.raises(ValueError, match="order_quantile"):
        SimConfig(order_quantile=1.0)
