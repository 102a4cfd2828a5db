"""Simulations per second of the serving simulator, optionally against a baseline commit.

Workloads are what the scheduling score runs: 2,000 requests drawn (as
`simulate_predictions` draws them) from the stored test rows of a committed result, on the
cluster of the toy world's sim preset (conf/sim/default.yaml: lb dispatch, 1 prefill + 2
decode instances of 32 slots, A100 table, bursty arrivals; fixed below, so that both packages
run the same configuration whatever their presets say), at several loads relative to
saturation (`load_factor`), queues fcfs (the baseline row) and sjf (rank-quantile keys of the
stored predictions, aging at --aging quantiles per second), a few seeds. Worlds: "toy"
(toyworld rows, answers of ~50 tokens) and "v2" (sharegpt_wheel rows, ~375 tokens).

With --baseline-commit the package of that commit (extracted with `git archive`, the working
tree untouched) runs in a second worker process; the two workers take turns on each case, so
that machine load drifts hit both alike, and the table gives sims/s of each and their ratio
(median over rounds). The workers also hash every run's timestamps: "identical" says whether
the two packages produced bit-identical results.

    python benchmarks/sim_speed_bench.py --baseline-commit e0961db [--rounds 3] [--figures]

Figures: with --figures each simulation is followed by `metrics.run_figures` (what every scored
run pays), timed apart. --profile N profiles N rounds of the current code instead (cProfile).
Timings are CPU time of the worker processes by default (--clock wall for elapsed time).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ROWS = {
    "toy": "leaderboard/results/toyworld/toy/tfidf_ridge/8759d90e5f49-fbfa23c6.json",
    "v2": "leaderboard/results/sharegpt_wheel/smollm2-135m-instruct/mlp_probe/"
          "7e12219939c8-1a338e34.json",
}
# SimConfig fields (those that differ from its defaults) of the benchmark's cluster and traffic.
SIM = {"n_decode": 2, "max_num_seqs": 32, "n_requests": 2000, "qps": None, "load_factor": 0.85,
       "arrival_cv": 2.0, "short_threshold": "q50", "long_threshold": "q90"}


# ------------------------------------------------------------------------------------- worker
class Worker:
    """Builds the workloads with one copy of the package and runs them on request."""

    def __init__(self, root: str, spec: dict[str, Any]) -> None:
        sys.path.insert(0, root)
        import numpy as np

        import lenbench.sim as sim
        from lenbench.sim.capacity import resolve_qps
        from lenbench.sim.keys import rank_keys
        from lenbench.sim.metrics import run_figures
        from lenbench.sim.workload import draw_rows

        where = Path(sim.__file__).resolve()
        if not where.is_relative_to(Path(root).resolve()):
            raise RuntimeError(f"lenbench.sim imported from {where}, not from {root}")
        self.np, self.sim, self.run_figures = np, sim, run_figures
        fields = dict(SIM)
        if spec["aging"] > 0:
            fields.update(starvation="aging", aging_alpha=float(spec["aging"]))
        if spec.get("n_requests"):
            fields["n_requests"] = int(spec["n_requests"])
        base = sim.SimConfig.from_dict(fields)
        self.cases: dict[str, list[tuple[Any, Any, Any, int, Any]]] = {}
        for world in spec["worlds"]:
            pred = spec["rows"][world]
            true = np.asarray(pred["true"], dtype=np.int64)
            prompt = np.asarray(pred["prompt_len"], dtype=np.int64)
            cut = np.asarray(pred["censored"], dtype=bool)
            keys = rank_keys(np.asarray(pred["pred"], dtype=np.float64))
            balance = np.full(true.shape, float(true.mean()))  # the constant reference row
            flat = np.full(true.shape, 0.5)                    # fcfs rows: one key for all
            thresholds = base.thresholds(true, cut)
            for queue in spec["queues"]:
                runs = []
                for load in spec["loads"]:
                    cfg = base.replace(load_factor=float(load), queue=queue)
                    model = sim.get_time_model(cfg.time_model, cfg.linear_abc)
                    qps, _ = resolve_qps(cfg, float(prompt.mean()), float(true.mean()), model)
                    for seed in spec["seeds"]:
                        idx, arrivals = draw_rows(len(true), cfg.n_requests, qps, seed,
                                                  cfg.arrival_cv)
                        wl = sim.Workload(arrivals, prompt[idx], true[idx],
                                          (keys if queue == "sjf" else flat)[idx], cut[idx])
                        runs.append((wl, cfg, balance[idx], seed, thresholds))
                self.cases[f"{world} {queue}"] = runs

    def run(self, case: str, figures: bool, clock: str) -> dict[str, Any]:
        simulate = self.sim.simulate
        perf = time.process_time if clock == "cpu" else time.perf_counter
        t_sim = t_fig = 0.0
        digest = hashlib.sha256()
        for wl, cfg, balance, seed, (short, long) in self.cases[case]:
            start = perf()
            res = simulate(wl, cfg, seed=seed, dispatch_len=balance)
            t_sim += perf() - start
            if figures:
                start = perf()
                figs = self.run_figures(res, short, long)
                t_fig += perf() - start
                digest.update(json.dumps(figs, sort_keys=True).encode())
            for arr in (res.done_s, res.first_token_s, res.admit_s, res.kv_ready_s):
                digest.update(arr.tobytes())
        return {"n": len(self.cases[case]), "t_sim": t_sim, "t_fig": t_fig,
                "sha256": digest.hexdigest()}


def worker_main(root: str) -> None:
    spec = json.loads(sys.stdin.readline())
    worker = Worker(root, spec)
    print(json.dumps({"cases": list(worker.cases)}), flush=True)
    for line in sys.stdin:
        msg = json.loads(line)
        print(json.dumps(worker.run(msg["case"], msg["figures"], msg["clock"])), flush=True)


# ------------------------------------------------------------------------------------- driver
class Client:
    def __init__(self, label: str, root: Path, spec: dict[str, Any]) -> None:
        self.label = label
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", str(root)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=REPO)
        self.cases = self.ask(spec)["cases"]

    def ask(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.label} died")
        return json.loads(line)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def committed_rows(rev: str, worlds: list[str]) -> dict[str, dict[str, list[Any]]]:
    """The test rows (true, pred, prompt_len, censored) of each world's result as committed at
    `rev`, so that both packages, and runs on other days, read the same rows."""
    out = {}
    for world in worlds:
        text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{ROWS[world]}"],
                              check=True, capture_output=True, text=True).stdout
        pred = json.loads(text)["predictions"]
        out[world] = {k: pred[k] for k in ("true", "pred", "prompt_len", "censored")}
    return out


def extract(commit: str, into: Path) -> Path:
    """The package of `commit` under `into` (git archive: no checkout, no worktree)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "lenbench"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def profile(root: Path, spec: dict[str, Any], rounds: int, figures: bool, top: int) -> None:
    import cProfile
    import pstats

    worker = Worker(str(root), spec)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(rounds):
        for case in worker.cases:
            worker.run(case, figures, "wall")
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline-commit", default=None,
                        help="also time the package of this commit, alternating with the "
                             "working tree's")
    parser.add_argument("--baseline-tree", type=Path, default=None,
                        help="or time the package under this folder (holding lenbench/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worlds", default="toy,v2")
    parser.add_argument("--queues", default="fcfs,sjf")
    parser.add_argument("--loads", default="0.5,0.85,1.1,1.4")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--rows-rev", default="HEAD",
                        help="the commit whose stored result files give the test rows")
    parser.add_argument("--n-requests", type=int, default=None,
                        help=f"requests per simulation (default {SIM['n_requests']})")
    parser.add_argument("--aging", type=float, default=1.0,
                        help="sjf's aging weight in quantiles per second (0: no guard)")
    parser.add_argument("--figures", action="store_true",
                        help="run metrics.run_figures after each simulation (timed apart)")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="time by the process's CPU time (steadier on a shared machine) or "
                             "by the wall clock")
    parser.add_argument("--profile", type=int, default=0, metavar="ROUNDS",
                        help="cProfile ROUNDS rounds of the working tree's code (or "
                             "--baseline-tree's) and exit")
    parser.add_argument("--json", type=Path, default=None, help="write the timings here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker_main(args.worker)
        return
    spec = {"worlds": args.worlds.split(","), "queues": args.queues.split(","),
            "loads": [float(x) for x in args.loads.split(",")],
            "seeds": [int(x) for x in args.seeds.split(",")], "n_requests": args.n_requests,
            "aging": args.aging}
    spec["rows"] = committed_rows(args.rows_rev, spec["worlds"])
    if args.profile:
        profile(args.baseline_tree or REPO, spec, args.profile, args.figures, 30)
        return

    with tempfile.TemporaryDirectory(prefix="sim_speed_") as tmp:
        clients = [Client("current", REPO, spec)]
        if args.baseline_commit:
            root = extract(args.baseline_commit, Path(tmp))
            clients.insert(0, Client(f"base {args.baseline_commit}", root, spec))
        elif args.baseline_tree:
            clients.insert(0, Client(f"base {args.baseline_tree.name}",
                                     args.baseline_tree.resolve(), spec))
        times: dict[str, dict[str, list[dict[str, Any]]]] = {
            c.label: {case: [] for case in c.cases} for c in clients}
        for rnd in range(args.rounds):
            order = clients if rnd % 2 == 0 else clients[::-1]
            for case in clients[0].cases:
                for client in order:
                    times[client.label][case].append(
                        client.ask({"case": case, "figures": args.figures,
                                    "clock": args.clock}))
        for client in clients:
            client.close()

    extra = "; +fig: simulate + run_figures" if args.figures else ""
    print(f"{args.rounds} rounds, loads {args.loads} x seeds {args.seeds} per case, "
          f"median sims/s by {args.clock} time (simulate only{extra})")
    labels = [c.label for c in clients]
    header = f"{'case':10s}" + "".join(f"{label:>22s}" for label in labels)
    if len(clients) == 2:
        header += f"{'ratio':>8s}{'identical':>11s}"
    print(header)
    summary: dict[str, Any] = {}
    for case in clients[0].cases:
        cells, rates = [], []
        for label in labels:
            runs = times[label][case]
            rate = statistics.median(r["n"] / r["t_sim"] for r in runs)
            full = statistics.median(r["n"] / (r["t_sim"] + r["t_fig"]) for r in runs)
            rates.append((rate, full))
            cells.append(f"{rate:8.1f}" + (f" ({full:6.1f} +fig)" if args.figures else ""))
            summary.setdefault(case, {})[label] = {"sims_per_s": rate,
                                                   "with_figures_per_s": full, "runs": runs}
        line = f"{case:10s}" + "".join(f"{cell:>22s}" for cell in cells)
        if len(clients) == 2:
            ratios = [b["t_sim"] / c["t_sim"] for b, c in zip(times[labels[0]][case],
                                                             times[labels[1]][case])]
            same = {r["sha256"] for label in labels for r in times[label][case]}
            line += f"{statistics.median(ratios):7.2f}x{'yes' if len(same) == 1 else 'NO':>11s}"
            if args.figures:
                full_ratio = statistics.median(
                    (b["t_sim"] + b["t_fig"]) / (c["t_sim"] + c["t_fig"])
                    for b, c in zip(times[labels[0]][case], times[labels[1]][case]))
                line += f"  (+fig {full_ratio:.2f}x)"
        print(line)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
