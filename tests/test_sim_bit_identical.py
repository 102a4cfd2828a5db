"""The simulator's results are pinned bit for bit: every case below is simulated and its arrays
are hashed against tests/data/sim_bit_identical.json.

The engine's hot path is tuned for speed; a change there must not move a single float. The cases
cover every dispatcher (lb, jsq, rr, pow2), both non-preemptive queues with each starvation
guard, preemptive srpt (recompute and swap, static and dynamic estimates), a KV-limited cluster,
a prefill-bound cluster, the table, linear and array-only time models, the timeline, and the
figures `run_figures` and `simulate_predictions` derive from runs. Regenerate the fixture only
for a deliberate change of results:

    python tests/test_sim_bit_identical.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lenbench.sim import LinearTimeModel, SimConfig, Workload, simulate, simulate_predictions
from lenbench.sim.engine import _Engine
from lenbench.sim.keys import rank_keys
from lenbench.sim.metrics import run_figures
from lenbench.sim.remaining import RemainingEstimates
from lenbench.sim.timing import A100_LLAMA3_8B, H100_LLAMA3_8B

FIXTURE = Path(__file__).parent / "data" / "sim_bit_identical.json"
TIMES = ("done_s", "first_token_s", "admit_s")
OTHERS = ("kv_ready_s", "instance", "admit_seq", "generated", "preemptions")


FLAT = LinearTimeModel(10.0, 0.0, 0.0, prefill_base_ms=0.0, prefill_ms_per_token=0.0,
                       prefill_ms_per_sq_token=0.0)


class ArrayOnlyModel:
    """The A100 table seen through decode_ms/prefill_ms alone (no closed form for the engine)."""

    name = "array-only"

    def decode_ms(self, batch_size: int, context_tokens: Any) -> np.ndarray:
        return A100_LLAMA3_8B.decode_ms(batch_size, context_tokens)

    def prefill_ms(self, tokens: int, sum_sq_len: float) -> float:
        return A100_LLAMA3_8B.prefill_ms(tokens, sum_sq_len)


def rows(seed: int, n: int, mean_log: float = 5.6, cap: int = 2048) -> dict[str, np.ndarray]:
    """Test rows with v2-like lengths (mean output a few hundred tokens, some one-token
    answers, some cut at the cap) and noisy predictions."""
    rng = np.random.default_rng(seed)
    true = np.clip(np.rint(rng.lognormal(mean_log, 0.9, n)), 1, cap).astype(np.int64)
    true[rng.random(n) < 0.02] = 1
    pred = np.maximum(np.rint(true * np.exp(rng.normal(0.0, 0.6, n))), 1.0)
    prompt = rng.integers(5, 300, n).astype(np.int64)
    return {"true": true, "pred": pred, "prompt": prompt, "censored": true >= cap}


def workload(seed: int, n: int, qps: float, *, cv: float = 1.0, keys: str = "rank",
             mean_log: float = 5.6) -> Workload:
    r = rows(seed, n, mean_log)
    rng = np.random.default_rng(seed + 1000)
    shape = 1.0 / (cv * cv)
    gaps = rng.gamma(shape, 1.0 / (qps * shape), n - 1)
    arrivals = np.concatenate([[0.0], np.cumsum(gaps)])
    pred = rank_keys(r["pred"]) if keys == "rank" else r["pred"]
    return Workload(arrivals, r["prompt"], r["true"], pred, r["censored"])


V2 = {"n_decode": 2, "max_num_seqs": 32, "short_threshold": 200, "long_threshold": 900}


def _cases() -> dict[str, dict[str, Any]]:
    """name -> simulate() arguments."""
    aging = {"starvation": "aging", "aging_alpha": 1.0}
    wl = workload(1, 700, 15.0, cv=2.0)
    wl_tok = workload(1, 700, 15.0, cv=2.0, keys="tokens")
    const = np.full(len(wl), 375.0)
    est_rows = rows(1, 700)
    rng = np.random.default_rng(7)
    step_row = np.repeat(np.arange(700), 6)
    step_t = np.tile(np.array([0, 1, 2, 4, 8, 16]), 700)
    noise = np.exp(rng.normal(0.0, 0.3, step_row.size))
    remaining = np.maximum(est_rows["true"][step_row] - step_t - 1, 0) * noise
    est = RemainingEstimates(step_row, step_t, remaining, 700)
    dyn = est.for_requests(np.arange(700), wl_tok.pred_len)
    free = {"kv_bytes_per_token": 0, "link_latency_ms": 0.0}
    flat = Workload(np.round(workload(6, 600, 150.0).arrival_s, 2),
                    np.full(600, 20), np.minimum(rows(6, 600, 3.5)["true"], 200),
                    np.minimum(rows(6, 600, 3.5)["pred"], 150))
    return {
        "lb_sjf_aging": {"wl": wl, "cfg": SimConfig(**V2, **aging), "dispatch_len": const},
        "lb_fcfs": {"wl": wl, "cfg": SimConfig(**V2), "queue": "fcfs", "dispatch_len": const},
        "lb_sjf_pred_dispatch": {"wl": wl_tok, "cfg": SimConfig(**V2)},
        "rr_sjf": {"wl": wl, "cfg": SimConfig(**V2), "dispatch": "rr"},
        "jsq_sjf_promotion": {"wl": wl, "cfg": SimConfig(**V2, starvation="promotion",
                                                         t_starve_s=2.0), "dispatch": "jsq"},
        "pow2_sjf_aging": {"wl": workload(1, 700, 22.0, cv=2.0, keys="tokens"),
                           "cfg": SimConfig(**{**V2, "n_decode": 3}, **aging),
                           "dispatch": "pow2", "seed": 3},
        "lb_sjf_kv_limited": {"wl": wl, "cfg": SimConfig(**V2, kv_capacity_tokens=9000),
                              "dispatch_len": const},
        "lb_fcfs_kv_limited_timeline": {"wl": wl, "cfg": SimConfig(**V2, kv_capacity_tokens=9000),
                                        "queue": "fcfs", "record_timeline": True},
        "lb_sjf_prefill_bound": {"wl": workload(2, 500, 40.0), "cfg": SimConfig(
            **{**V2, "max_num_seqs": 256}, n_prefill=2, max_prefill_tokens=600)},
        "lb_sjf_linear": {"wl": wl, "cfg": SimConfig(**V2, time_model="linear",
                                                    linear_abc=(8.0, 0.05, 2e-4))},
        "lb_sjf_h100": {"wl": workload(1, 700, 25.0, cv=2.0),
                        "cfg": SimConfig(**V2, time_model="h100"), "time_model": H100_LLAMA3_8B},
        "lb_sjf_array_model": {"wl": wl, "cfg": SimConfig(**V2), "time_model": ArrayOnlyModel()},
        "lb_sjf_one_decode": {"wl": workload(3, 400, 7.5), "cfg": SimConfig(**{**V2,
                                                                               "n_decode": 1})},
        "srpt_recompute": {"wl": wl_tok, "cfg": SimConfig(**V2, **aging), "queue": "srpt",
                           "dispatch_len": const},
        "srpt_swap_dynamic": {"wl": wl_tok, "cfg": SimConfig(**V2, preempt_cost="swap",
                                                             repredict_every=4,
                                                             preempt_margin=5.0),
                              "queue": "srpt", "remaining": dyn, "dispatch": "jsq"},
        "srpt_kv_limited": {"wl": wl_tok, "cfg": SimConfig(**V2, kv_capacity_tokens=9000,
                                                           max_preemptions=1),
                            "queue": "srpt", "time_model": LinearTimeModel(9.0, 0.04, 1e-4)},
        # free prefill and link, constant iterations: many events at equal times
        "flat_ties_lb": {"wl": flat, "cfg": SimConfig(**V2, **free), "time_model": FLAT,
                         "dispatch_len": np.full(len(flat), 40.0)},
        "flat_ties_pow2": {"wl": flat, "cfg": SimConfig(**{**V2, "n_decode": 3}, **free),
                           "time_model": FLAT, "dispatch": "pow2", "seed": 5},
        "toy_short": {"wl": workload(4, 800, 85.0, cv=2.0, mean_log=4.0),
                      "cfg": SimConfig(**{**V2, "short_threshold": 50, "long_threshold": 200},
                                       **aging)},
    }


def _sha(arrays: list[np.ndarray], dtype: type) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=dtype).tobytes())
    return h.hexdigest()


def _figures_sha(figs: Any) -> str:
    return hashlib.sha256(json.dumps(figs, sort_keys=True).encode()).hexdigest()


def digest(args: dict[str, Any]) -> dict[str, Any]:
    args = dict(args)
    wl, cfg = args.pop("wl"), args.pop("cfg")
    res = simulate(wl, cfg, **args)
    out: dict[str, Any] = {
        "times_sha256": _sha([getattr(res, k) for k in TIMES], np.float64),
        "kv_ready_sha256": _sha([res.kv_ready_s], np.float64),
        "ints_sha256": _sha([getattr(res, k) for k in OTHERS[1:]], np.int64),
        "instance_stats": res.instance_stats,
        "timeline_sha256": None if res.timeline is None else _sha([res.timeline], np.float64),
        "figures_sha256": _figures_sha(run_figures(res, cfg.short_threshold,
                                                   cfg.long_threshold)),
        "done_sum": float(np.sum(res.done_s)),
        "done_max": float(np.max(res.done_s)),
        "admit_nan": int(np.isnan(res.admit_s).sum()),
        "preempted": int(res.preemptions.sum()),
    }
    return out


def predictions_digest() -> dict[str, Any]:
    """simulate_predictions on a toy-sized grid: every row's figures (run_figures over seeds)
    and pooled latency quantiles, and the predictor's score."""
    r = rows(5, 600, mean_log=4.5)
    cfg = SimConfig(**{**V2, "short_threshold": "q50", "long_threshold": "q90"},
                    starvation="aging", aging_alpha=1.0, n_requests=500, qps=None,
                    load_factor=1.1, arrival_cv=2.0)
    noisy = r["true"] * np.exp(np.random.default_rng(9).normal(0.0, 0.5, len(r["true"])))
    out = simulate_predictions(r["true"], r["pred"], r["prompt"], cfg, seeds=(0, 1),
                               extra_predictors={"noisy": noisy}, censored=r["censored"])
    pinned = {row: {"figures": entry["figures"], "e2e_quantiles": entry["e2e_quantiles"]}
              for row, entry in out["rows"].items()}
    return {"sha256": _figures_sha(pinned),
            "score": out["rows"]["predictor"]["score"]["e2e_mean_all"]["value"]}


def compute() -> dict[str, Any]:
    cases = {name: digest(args) for name, args in _cases().items()}
    return {"cases": cases, "simulate_predictions": predictions_digest()}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


@pytest.mark.parametrize("name", sorted(_cases()))
def test_simulation_is_bit_identical(name: str, golden: dict[str, Any]) -> None:
    assert digest(_cases()[name]) == golden["cases"][name]


def test_every_case_is_pinned(golden: dict[str, Any]) -> None:
    assert sorted(golden["cases"]) == sorted(_cases())


@pytest.mark.parametrize("model", [A100_LLAMA3_8B, LinearTimeModel(8.0, 0.05, 2e-4)])
def test_short_stretches_are_priced_as_numpy_prices_them(model: Any) -> None:
    """The engine prices short stretches in Python floats: the same times as `price`'s."""
    wl = workload(0, 10, 1.0)
    eng = _Engine(wl, SimConfig(**V2), model, "lb", "sjf", 0, False)
    rng = np.random.default_rng(0)
    for _ in range(300):
        batch, ctx = int(rng.integers(1, 300)), int(rng.integers(0, 500_000))
        n, start = int(rng.integers(1, 80)), float(rng.uniform(0, 1e4))
        want = (eng.price(batch, ctx, n) + start).tolist()
        assert eng.boundary_times(batch, ctx, n, start) == want


def test_least_loaded_is_the_exact_choice() -> None:
    """lb dispatch's approximate comparison picks what the exact outstanding figures pick,
    ties and near-ties included (the same keys in another order sum differently in numpy)."""
    wl = workload(0, 10, 1.0)
    eng = _Engine(wl, SimConfig(**{**V2, "n_decode": 3}), A100_LLAMA3_8B, "lb", "sjf", 0, False)
    rng = np.random.default_rng(1)
    for trial in range(3000):
        c = float(rng.choice([375.0, 379.5958498023716, 0.1 * rng.integers(1, 5000)]))
        base = int(rng.integers(0, 100_000))
        shared = [c - 1 + base + int(x) for x in rng.integers(0, 400, int(rng.integers(1, 40)))]
        k_b = base + int(rng.integers(0, 200))
        seg = [float(x) for x in np.cumsum(rng.uniform(0.01, 0.02, 50))]
        for inst in eng.dec:
            if trial % 3:  # independent instances
                n = int(rng.integers(0, 40))
                keys = [c - 1 + base + int(x) for x in rng.integers(0, 400, n)]
                k_b = base + int(rng.integers(0, 200))
            else:  # the same keys in other orders: ties up to rounding
                keys = list(rng.permutation(shared))
            inst.run_key = [float(x) for x in keys]
            inst.sorted_key = sorted(inst.run_key)
            inst.n_run = len(keys)
            inst.k_b = k_b
            inst.seg = seg
            inst.wait_pred = float(c * rng.integers(0, 3)) if trial % 2 else 0.0
        t = float(rng.uniform(0.0, 1.2))
        want = min(eng.dec, key=lambda d: eng.outstanding(d, t))
        assert eng.least_loaded(eng.dec, t) is want
        a, b = eng.dec[0], eng.dec[2]
        want = a if eng.outstanding(a, t) <= eng.outstanding(b, t) else b
        assert eng.least_loaded([a, b], t) is want


def test_simulate_predictions_is_bit_identical(golden: dict[str, Any]) -> None:
    assert predictions_digest() == golden["simulate_predictions"]


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/test_sim_bit_identical.py --write")
    FIXTURE.write_text(json.dumps(compute(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE}")
