"""What Python's garbage collector costs the default run, with the run's heap settled and without.

    python benchmarks/gc_cost_bench.py [--rounds 1] [overrides ...]

Each round runs the default run (`lenbench`, empty cache) twice in fresh processes: once as it
is, and once with `lenbench.runtime.heap`'s `hold` and `settle` made no-ops (the collector as
Python sets it). A `gc.callbacks` hook counts the run's own process's collections (forks not
included) and their seconds; the parent times the process from the end of the run to its exit,
the interpreter's last walk over the heap. The machine is shared: run it with nothing else busy
for figures worth quoting.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import gc, json, sys, time
stats = {"collections": 0, "seconds": 0.0, "full": 0, "full_seconds": 0.0}
started = [0.0]
def count(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
        return
    took = time.perf_counter() - started[0]
    stats["collections"] += 1
    stats["seconds"] += took
    if info["generation"] == 2:
        stats["full"] += 1
        stats["full_seconds"] += took
gc.callbacks.append(count)
import lenbench.cli as cli
if sys.argv[1] == "unsettled":
    cli.hold = cli.settle = lambda: None
sys.argv = ["lenbench", *sys.argv[2:]]
cli.main()
gc.callbacks.remove(count)
print("GC " + json.dumps(stats), flush=True)
print("END %.6f" % time.time(), flush=True)
"""


def one_run(mode: str, work: Path, overrides: list[str]) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD, mode,
                           f"++paths.cache_dir={work / 'cache'}", f"hydra.run.dir={work / 'run'}",
                           *overrides], cwd=work, env=env, capture_output=True, text=True,
                          check=False)
    exited = time.time()
    if proc.returncode != 0:
        raise SystemExit(f"the {mode} run failed:\n{proc.stderr[-3000:]}")
    lines = proc.stdout.splitlines()
    stats = json.loads(next(x for x in lines if x.startswith("GC "))[3:])
    ended = float(next(x for x in lines if x.startswith("END "))[4:])
    return {**stats, "exit_seconds": exited - ended, "wall": time.perf_counter() - start}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="lenbench overrides for both runs")
    args = ap.parse_args()
    print(f"{'round':>5} {'heap':>10} {'collections':>11} {'s':>6} {'full':>4} {'full s':>6} "
          f"{'exit s':>6} {'wall s':>6}")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for mode in ("unsettled", "settled"):
                work = Path(tmp) / f"{mode}-{i}"
                work.mkdir()
                r = one_run(mode, work, args.overrides)
                print(f"{i + 1:>5} {mode:>10} {r['collections']:>11} {r['seconds']:>6.2f} "
                      f"{r['full']:>4} {r['full_seconds']:>6.2f} {r['exit_seconds']:>6.2f} "
                      f"{r['wall']:>6.1f}", flush=True)


if __name__ == "__main__":
    main()
