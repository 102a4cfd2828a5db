"""Engine semantics: hand-checked timelines, conservation, queueing theory, policy identities."""

from __future__ import annotations

import numpy as np
import pytest

from lenbench.sim import (
    LinearTimeModel,
    SimConfig,
    Workload,
    arrival_times,
    constant,
    lognormal_lengths,
    oracle,
    short_prompts,
    simulate,
)

# Constant 10 ms per decode iteration, free prefill and link: timelines are easy to predict.
FLAT = LinearTimeModel(10.0, 0.0, 0.0, prefill_base_ms=0.0, prefill_ms_per_token=0.0,
                       prefill_ms_per_sq_token=0.0)
FREE_LINK = {"kv_bytes_per_token": 0, "link_latency_ms": 0.0}

ARRAYS = ("first_token_s", "kv_ready_s", "admit_s", "done_s", "instance", "admit_seq",
          "generated")


def busy_workload(seed: int, n: int = 1200, qps: float = 60.0) -> Workload:
    """A small overloaded OUTLETS-like burst (lognormal lengths), fast to simulate."""
    rng = np.random.default_rng(seed)
    true = lognormal_lengths(n, rng, mean=600, cap=2048)
    return Workload(arrival_times(n, qps, rng), short_prompts(n, rng), true,
                    true.astype(np.float64))


def small_cfg(**kw: object) -> SimConfig:
    base = {"n_decode": 2, "max_num_seqs": 64, "n_requests": 1200}
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


def assert_same_runs(a, b) -> None:
    for name in ARRAYS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_hand_checked_timeline() -> None:
    """Two requests on one instance with 10 ms iterations: admission at the next boundary."""
    cfg = SimConfig(n_decode=1, max_num_seqs=2, **FREE_LINK)
    wl = Workload(np.array([0.0, 0.015]), np.array([4, 4]), np.array([5, 3]),
                  np.array([5.0, 3.0]))
    res = simulate(wl, cfg, time_model=FLAT, dispatch="rr", queue="fcfs")
    np.testing.assert_allclose(res.first_token_s, [0.0, 0.015])
    np.testing.assert_allclose(res.kv_ready_s, [0.0, 0.015])
    # A runs 4 decode iterations from t=0; B joins at the boundary at 20 ms and needs 2.
    np.testing.assert_allclose(res.admit_s, [0.0, 0.020])
    np.testing.assert_allclose(res.done_s, [0.040, 0.040])
    np.testing.assert_array_equal(res.generated, [5, 3])


def test_kv_capacity_blocks_admission() -> None:
    """A request that does not fit in the KV cache waits for the running one to finish."""
    cfg = SimConfig(n_decode=1, max_num_seqs=8, kv_capacity_tokens=100, **FREE_LINK)
    wl = Workload(np.array([0.0, 0.001]), np.array([50, 50]), np.array([11, 11]),
                  np.array([11.0, 11.0]))
    res = simulate(wl, cfg, time_model=FLAT, dispatch="rr", queue="fcfs")
    # The first holds 51 KV tokens at admission and 52 at the next boundary: 52 + 51 > 100.
    np.testing.assert_allclose(res.admit_s, [0.0, 0.100])
    np.testing.assert_allclose(res.done_s, [0.100, 0.200])


def test_one_token_answers_finish_at_prefill() -> None:
    cfg = SimConfig(n_decode=1)
    wl = Workload(np.array([0.0, 0.5]), np.array([10, 10]), np.array([1, 4]),
                  np.array([1.0, 4.0]))
    res = simulate(wl, cfg, dispatch="rr", queue="fcfs")
    assert res.done_s[0] == res.first_token_s[0]
    assert res.instance[0] == -1
    assert res.done_s[1] > res.first_token_s[1]
    np.testing.assert_array_equal(res.generated, [1, 4])


@pytest.mark.parametrize("policy", [("rr", "fcfs"), ("jsq", "fcfs"), ("lb", "sjf"),
                                    ("pow2", "sjf")])
def test_conservation(policy: tuple[str, str]) -> None:
    """Every request finishes after it arrives, and generated tokens equal true lengths."""
    wl = busy_workload(3)
    res = simulate(wl, small_cfg(), dispatch=policy[0], queue=policy[1])
    assert not np.isnan(res.done_s).any()
    np.testing.assert_array_equal(res.generated, wl.true_len)
    assert res.generated.sum() == wl.true_len.sum()
    decoded = res.instance >= 0
    assert np.all(res.first_token_s >= wl.arrival_s)
    assert np.all(res.kv_ready_s[decoded] >= res.first_token_s[decoded])
    assert np.all(res.admit_s[decoded] >= res.kv_ready_s[decoded])
    assert np.all(res.done_s > res.admit_s - 1e-12)
    assert sorted(res.admit_seq[decoded]) == list(range(int(decoded.sum())))
    for stats in res.instance_stats:
        assert stats["peak_running"] <= 64


def test_md1_mean_wait() -> None:
    """B = 1 and constant iteration time: the decode queue is M/D/1 and its mean wait is
    rho * S / (2 (1 - rho)) (Pollaczek-Khinchine); P(no wait) = 1 - rho."""
    cfg = SimConfig(n_decode=1, max_num_seqs=1, **FREE_LINK)
    length, service = 11, 0.100   # 10 decode iterations of 10 ms
    rho = 0.6
    expected = rho * service / (2 * (1 - rho))
    waits, idle = [], []
    for seed in range(3):
        n = 30_000
        rng = np.random.default_rng(seed)
        wl = Workload(arrival_times(n, rho / service, rng), np.ones(n, dtype=np.int64),
                      np.full(n, length), np.full(n, float(length)))
        res = simulate(wl, cfg, time_model=FLAT, dispatch="rr", queue="fcfs")
        wait = res.admit_s - res.kv_ready_s
        waits.append(wait.mean())
        idle.append(np.mean(wait < 1e-12))
        np.testing.assert_allclose(res.done_s - res.admit_s, service, atol=1e-9)
    # Three runs of 30k requests: standard error of the pooled mean is about 1.5%.
    assert np.mean(waits) == pytest.approx(expected, rel=0.05)
    assert np.mean(idle) == pytest.approx(1 - rho, abs=0.02)


def test_same_seed_same_output() -> None:
    a = simulate(busy_workload(5), small_cfg(), dispatch="pow2", queue="sjf", seed=1)
    b = simulate(busy_workload(5), small_cfg(), dispatch="pow2", queue="sjf", seed=1)
    assert_same_runs(a, b)
    c = simulate(busy_workload(6), small_cfg(), dispatch="pow2", queue="sjf", seed=1)
    assert not np.array_equal(a.done_s, c.done_s)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_oracle_sjf_not_worse_than_fcfs(seed: int) -> None:
    wl = busy_workload(seed)
    for dispatch in ("rr", "jsq"):
        fcfs = simulate(wl, small_cfg(), dispatch=dispatch, queue="fcfs")
        sjf = simulate(wl.with_predictions(oracle(wl.true_len)), small_cfg(),
                       dispatch=dispatch, queue="sjf")
        assert sjf.e2e_s.mean() <= fcfs.e2e_s.mean()
    # Not vacuous: the queues are long, so SJF helps by a wide margin here.
    assert sjf.e2e_s.mean() < 0.9 * fcfs.e2e_s.mean()


@pytest.mark.parametrize("dispatch", ["rr", "jsq", "lb"])
def test_constant_predictor_reproduces_fcfs(dispatch: str) -> None:
    """SJF on a constant prediction breaks every tie by arrival: exactly FCFS."""
    wl = busy_workload(4).with_predictions(constant(np.full(1200, 7)))
    fcfs = simulate(wl, small_cfg(), dispatch=dispatch, queue="fcfs")
    sjf = simulate(wl.with_predictions(constant(wl.true_len)), small_cfg(), dispatch=dispatch,
                   queue="sjf")
    if dispatch != "lb":  # rr and jsq ignore predictions
        assert_same_runs(fcfs, sjf)
    fcfs_same_pred = simulate(wl.with_predictions(constant(wl.true_len)), small_cfg(),
                              dispatch=dispatch, queue="fcfs")
    assert_same_runs(fcfs_same_pred, sjf)


@pytest.mark.parametrize("dispatch", ["lb", "pow2"])
@pytest.mark.parametrize("guard", [{}, {"starvation": "aging", "aging_alpha": 200.0},
                                   {"starvation": "promotion", "t_starve_s": 2.0}])
def test_prediction_free_dispatch_constant_sjf_is_fcfs(dispatch: str, guard: dict) -> None:
    """With dispatch_len one value for all, lb/pow2 do not read predictions: SJF on any
    constant reproduces the FCFS run of other predictions exactly, with or without a guard
    (aging keys pred + alpha * arrival never reorder equal predictions)."""
    wl = busy_workload(4)
    flat = np.full(len(wl), 600.0)
    cfg = small_cfg(**guard)
    fcfs = simulate(wl, cfg, dispatch=dispatch, queue="fcfs", seed=3, dispatch_len=flat)
    sjf = simulate(wl.with_predictions(np.full(len(wl), 7.0)), cfg, dispatch=dispatch,
                   queue="sjf", seed=3, dispatch_len=flat)
    assert_same_runs(fcfs, sjf)
    # ... while predictions do change the queue order (not vacuous)
    informed = simulate(wl, cfg, dispatch=dispatch, queue="sjf", seed=3, dispatch_len=flat)
    assert not np.array_equal(informed.admit_seq, fcfs.admit_seq)
    with pytest.raises(ValueError):
        simulate(wl, cfg, dispatch_len=flat[:-1])


def test_lb_with_uninformative_constant_is_jsq() -> None:
    """With a constant prediction of 1 token every running request counts max(1 - gen, 1) = 1
    and every waiting one 1: lb's outstanding tokens are jsq's queue length."""
    wl = busy_workload(7).with_predictions(np.ones(1200))
    jsq = simulate(wl, small_cfg(n_decode=3), dispatch="jsq", queue="fcfs")
    lb = simulate(wl, small_cfg(n_decode=3), dispatch="lb", queue="sjf")
    assert_same_runs(jsq, lb)


def test_starvation_guards_limits() -> None:
    """Extreme guards reduce to known policies: promotion after 0 s and aging with a huge
    alpha are FCFS; promotion that never triggers is plain SJF."""
    wl = busy_workload(8)
    wl = wl.with_predictions(oracle(wl.true_len))
    fcfs = simulate(wl, small_cfg(), dispatch="rr", queue="fcfs")
    sjf = simulate(wl, small_cfg(), dispatch="rr", queue="sjf")
    promo0 = simulate(wl, small_cfg(starvation="promotion", t_starve_s=0.0), dispatch="rr",
                      queue="sjf")
    aged = simulate(wl, small_cfg(starvation="aging", aging_alpha=1e12), dispatch="rr",
                    queue="sjf")
    never = simulate(wl, small_cfg(starvation="promotion", t_starve_s=1e9), dispatch="rr",
                     queue="sjf")
    assert_same_runs(fcfs, promo0)
    assert_same_runs(fcfs, aged)
    assert_same_runs(sjf, never)
    # A moderate guard sits between: long requests wait less than under pure SJF.
    mid = simulate(wl, small_cfg(starvation="promotion", t_starve_s=5.0), dispatch="rr",
                   queue="sjf")
    long_ = wl.true_len >= 1536
    assert np.percentile(mid.e2e_s[long_], 99) < np.percentile(sjf.e2e_s[long_], 99)


def test_timeline_and_generic_time_model() -> None:
    """A time model without decode_affine goes through the array path with the same result."""

    class Plain:
        def decode_ms(self, batch_size: int, context_tokens):
            return FLAT.decode_ms(batch_size, context_tokens) + 0.001 * np.asarray(context_tokens)

        def prefill_ms(self, tokens: int, sum_sq_len: float) -> float:
            return 5.0 + 0.01 * tokens

    affine = LinearTimeModel(10.0, 0.0, 0.001, prefill_base_ms=5.0, prefill_ms_per_token=0.01,
                             prefill_ms_per_sq_token=0.0)
    wl = busy_workload(9, n=300)
    a = simulate(wl, small_cfg(), time_model=Plain(), record_timeline=True)
    b = simulate(wl, small_cfg(), time_model=affine)
    np.testing.assert_allclose(a.done_s, b.done_s, rtol=1e-9)
    assert a.timeline is not None and a.timeline.shape[1] == 4
    assert a.timeline[:, 2].max() <= 64
