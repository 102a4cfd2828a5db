"""Time preemptive re-ranking with re-prediction every step: outlets_paper x 3 policies x 5 seeds.

The target: the 15 runs in under 10 s on one core. Run:
    python benchmarks/sim_repredict_bench.py [--seeds 5] [--every 1] [--json out.json]
Workload per seed as in sim_bench.py (1,914 requests, lognormal lengths with mean ~1,150 and cap
2,048, prompts of 4-50 tokens, Poisson arrivals at 100 QPS). Policies, all lb+srpt re-ranking
every `--every` iterations under the preset's preemption settings:
  static  - a static prediction L * exp(N(0, 0.5)), remaining = prediction - generated;
  dynamic - an estimate at every step t: (L - t) * f^(1 - t/L), f the row's static error, so
            the estimate sharpens as the answer unfolds (2.2M scored steps per seed);
  oracle  - remaining = L - t exactly.
Untimed context: lb+fcfs and lb+sjf (static prediction and oracle) on the same workloads give
each policy's score S = (fcfs - row) / (fcfs - sjf oracle) on the short-request mean latency.
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
    run_figures,
    short_prompts,
    simulate,
)
from lenbench.sim.remaining import RemainingEstimates

SIGMA = 0.5


def paper_preset() -> SimConfig:
    return SimConfig.from_dict(load_preset("sim", "outlets_paper"))


def workload(cfg: SimConfig, seed: int) -> Workload:
    """The workload of sim_bench.py for this seed (oracle predictions)."""
    rng = np.random.default_rng(seed)
    n = cfg.n_requests
    true = lognormal_lengths(n, rng)
    assert cfg.qps is not None
    return Workload(arrival_times(n, cfg.qps, rng), short_prompts(n, rng), true,
                    true.astype(np.float64))


def dynamic_estimates(true: np.ndarray, factor: np.ndarray) -> RemainingEstimates:
    """An estimate at every step t = 1 .. L-1 of every request, converging to L - t."""
    lengths = true - 1
    rows = np.repeat(np.arange(len(true)), lengths)
    starts = np.cumsum(lengths) - lengths
    t = np.arange(rows.size) - np.repeat(starts, lengths) + 1
    left = true[rows] - t
    rem = left * factor[rows] ** (left / true[rows])
    return RemainingEstimates(rows, t, rem, len(true))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--every", type=int, default=1, help="re-rank every this many steps")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    cfg = paper_preset().replace(repredict_every=args.every)
    cases = []
    for seed in range(args.seeds):
        wl = workload(cfg, seed)
        factor = np.exp(np.random.default_rng([seed, 7]).normal(0.0, SIGMA, len(wl)))
        static = wl.with_predictions(wl.true_len * factor)
        est = dynamic_estimates(wl.true_len, factor).for_requests(np.arange(len(wl)),
                                                                  static.pred_len)
        cases.append((wl, static, est))
    n_steps = sum(len(est.est) for _, _, est in cases)

    policies = {"static": lambda wl, st, est: (st, None),
                "dynamic": lambda wl, st, est: (st, est),
                "oracle": lambda wl, st, est: (wl, None)}
    figures: dict[str, list[dict[str, float | None]]] = {p: [] for p in policies}
    walls: dict[str, float] = dict.fromkeys(policies, 0.0)
    started = time.perf_counter()
    for policy, pick in policies.items():
        for seed, case in enumerate(cases):
            wl, est = pick(*case)
            t0 = time.perf_counter()
            res = simulate(wl, cfg, queue="srpt", seed=seed, remaining=est)
            walls[policy] += time.perf_counter() - t0
            figs = run_figures(res, cfg.short_threshold, cfg.long_threshold)
            figs["preemptions_per_request"] = float(res.preemptions.mean())
            figures[policy].append(figs)
    wall = time.perf_counter() - started
    n_runs = len(policies) * args.seeds
    print(f"outlets_paper, lb+srpt re-ranking every {cfg.repredict_every} step(s), cost "
          f"{cfg.preempt_cost}, margin {cfg.preempt_margin:g}, at most {cfg.max_preemptions} "
          f"preemptions per request; {n_steps:,} dynamic estimates over {args.seeds} seeds")
    print(f"{n_runs} runs ({len(policies)} policies x {args.seeds} seeds) on one core: "
          f"{wall:.2f} s wall, metrics included (simulation: "
          + ", ".join(f"{p} {w:.2f} s" for p, w in walls.items()) + ")")

    reference: dict[str, list[dict[str, float | None]]] = {"fcfs": [], "sjf": [], "sjf_oracle": []}
    for seed, (wl, static, _) in enumerate(cases):
        for row, (w, queue) in {"fcfs": (wl, "fcfs"), "sjf": (static, "sjf"),
                                "sjf_oracle": (wl, "sjf")}.items():
            res = simulate(w, cfg, queue=queue, seed=seed)
            reference[row].append(run_figures(res, cfg.short_threshold, cfg.long_threshold))

    def mean(rows: list[dict[str, float | None]], key: str) -> float:
        return float(aggregate([r[key] for r in rows])["mean"])

    key = "e2e_mean_short"
    base, best = mean(reference["fcfs"], key), mean(reference["sjf_oracle"], key)
    print(f"{'row':22s} {'short mean s':>12s} {'score':>6s} {'long P99 s':>10s} "
          f"{'preempt/req':>11s}")
    table = {f"lb+{r}": rows for r, rows in reference.items()}
    table.update({f"lb+srpt {p}": rows for p, rows in figures.items()})
    summary = {}
    for row, rows in table.items():
        short, long99 = mean(rows, key), mean(rows, "e2e_p99_long")
        pre = mean(rows, "preemptions_per_request") if "preemptions_per_request" in rows[0] else 0.0
        score = (base - short) / (base - best)
        summary[row] = {"e2e_mean_short": short, "score": score, "e2e_p99_long": long99,
                        "preemptions_per_request": pre}
        print(f"{row:22s} {short:12.2f} {score:6.2f} {long99:10.1f} {pre:11.3f}")
    if args.json:
        args.json.write_text(json.dumps({"wall_s": wall, "runs": n_runs, "walls": walls,
                                         "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
