"""Time the outlets_paper preset x 3 policies x 5 seeds on one CPU core; print key figures.

The target: the whole grid in under 10 s on one core. Run:
    python benchmarks/sim_bench.py [--seeds 5] [--json out.json]
Workload per seed: 1,914 requests, lognormal output lengths (mean ~1,150, cap 2,048), prompts of
4-50 tokens, Poisson arrivals at 100 QPS, oracle predictions.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import json
import time
from pathlib import Path

import numpy as np

from lenbench.configs import load_preset
from lenbench.sim import (
    SimConfig,
    Workload,
    aggregate,
    arrival_times,
    lognormal_lengths,
    noisy_oracle,
    run_figures,
    short_prompts,
    simulate,
    simulate_predictions,
)

POLICIES = (("rr", "fcfs"), ("jsq", "fcfs"), ("lb", "sjf"))
KEYS = ("e2e_p99_short", "e2e_p99_long", "e2e_mean_all", "throughput_tok_s",
        "hol_inversion_rate")


def paper_preset() -> SimConfig:
    return SimConfig.from_dict(load_preset("sim", "outlets_paper"))


def workload(cfg: SimConfig, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    n = cfg.n_requests
    true = lognormal_lengths(n, rng)
    assert cfg.qps is not None
    return Workload(arrival_times(n, cfg.qps, rng), short_prompts(n, rng), true,
                    true.astype(np.float64))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cfg = paper_preset()
    workloads = [workload(cfg, seed) for seed in range(args.seeds)]

    started = time.perf_counter()
    figures: dict[str, list[dict[str, float | None]]] = {}
    for dispatch, queue in POLICIES:
        runs = figures.setdefault(f"{dispatch}+{queue}", [])
        for seed, wl in enumerate(workloads):
            res = simulate(wl, cfg, dispatch=dispatch, queue=queue, seed=seed)
            runs.append(run_figures(res, cfg.short_threshold, cfg.long_threshold))
    wall = time.perf_counter() - started
    n_runs = len(POLICIES) * args.seeds
    print(f"outlets_paper: {cfg.n_prefill}P/{cfg.n_decode}D, {cfg.max_num_seqs} slots, "
          f"{cfg.n_requests} requests at {cfg.qps} QPS, mean output "
          f"{np.mean([w.true_len.mean() for w in workloads]):.0f} tokens")
    print(f"{n_runs} runs ({len(POLICIES)} policies x {args.seeds} seeds) on one core: "
          f"{wall:.2f} s wall ({wall / n_runs * 1000:.0f} ms per run, metrics included)")

    summary = {policy: {k: aggregate([r[k] for r in runs]) for k in KEYS}
               for policy, runs in figures.items()}
    base = summary["rr+fcfs"]
    print(f"{'policy':10s} {'short P99 s':>18s} {'long P99 s':>18s} {'mean s':>8s} "
          f"{'tok/s':>8s} {'HOL inv':>8s}")
    for policy, agg in summary.items():
        def cell(key: str, agg: dict = agg) -> str:
            mean, lo, hi = agg[key]["mean"], agg[key]["ci95_low"], agg[key]["ci95_high"]
            half = (hi - lo) / 2 if lo is not None else float("nan")
            return f"{mean:7.1f} +-{half:4.1f}"
        print(f"{policy:10s} {cell('e2e_p99_short'):>18s} {cell('e2e_p99_long'):>18s} "
              f"{agg['e2e_mean_all']['mean']:8.1f} {agg['throughput_tok_s']['mean']:8.0f} "
              f"{agg['hol_inversion_rate']['mean']:8.3f}")
    lb = summary["lb+sjf"]
    short_cut = 1 - lb["e2e_p99_short"]["mean"] / base["e2e_p99_short"]["mean"]
    long_change = lb["e2e_p99_long"]["mean"] / base["e2e_p99_long"]["mean"] - 1
    thr_change = lb["throughput_tok_s"]["mean"] / base["throughput_tok_s"]["mean"] - 1
    print(f"LB+SJF vs RR+FCFS: short P99 {-short_cut:+.1%}, long P99 {long_change:+.1%}, "
          f"throughput {thr_change:+.1%}")

    # Scores of noisy oracles against lb+fcfs, on rows drawn from a lognormal pool (not timed
    # above).
    rng = np.random.default_rng(12345)
    pool = lognormal_lengths(20_000, rng)
    prompts = short_prompts(len(pool), rng)
    extra = {f"noisy_{s:g}": noisy_oracle(pool, s, seed=i) for i, s in enumerate((0.5, 1.0), 1)}
    started = time.perf_counter()
    res = simulate_predictions(pool, noisy_oracle(pool, 0.2, seed=0), prompts, cfg,
                               seeds=range(args.seeds), name="noisy_0.2",
                               extra_predictors=extra)
    print(f"simulate_predictions ({len(res['rows'])} rows x {args.seeds} seeds): "
          f"{time.perf_counter() - started:.2f} s")
    for row in res["headline"]:
        share = row["score"]
        tau = row["kendall_tau"]
        print(f"  {row['row']:10s} {row['policy']:8s} short P99 {row['e2e_p99_short']:6.1f} s  "
              f"score ({row['score_metric']}) {'-' if share is None else f'{share:5.2f}':>5s}  "
              f"tau {'-' if tau is None else f'{tau:5.2f}':>5s}")
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "runs": n_runs, "summary": summary,
                                         "simulate_predictions": res["headline"]}, indent=1))


if __name__ == "__main__":
    main()
