"""The default run's wall time beside an earlier commit's, alternating, each from an empty cache.

    python benchmarks/default_run_bench.py --baseline-commit 3093577 --rounds 4

Each round runs `lenbench` (the default suite on the toy world, nothing cached) once with the
earlier commit's code (a git worktree put on the interpreter's path) and once with this
checkout's, in the same environment, and times each process from start to exit. The machine is
shared, so the runs alternate and the summary gives each side's median and the ratio of the
medians; run it with nothing else busy for figures worth quoting.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUN = ("import sys; from lenbench.cli import main; "
       "sys.argv = ['lenbench', *sys.argv[1:]]; main()")


def timed_run(code_dir: Path, work: Path) -> float:
    """Seconds of one default run with the package in `code_dir`, caching into `work`."""
    env = {**os.environ, "PYTHONPATH": str(code_dir), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN, f"++paths.cache_dir={work / 'cache'}",
                           f"hydra.run.dir={work / 'run'}"], cwd=work, env=env,
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"the run with {code_dir} failed:\n{proc.stderr[-3000:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-commit", required=True)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(base),
                        args.baseline_commit], check=True, capture_output=True)
        try:
            times: dict[str, list[float]] = {"baseline": [], "current": []}
            for i in range(args.rounds):
                for side, code in (("baseline", base), ("current", REPO)):
                    work = Path(tmp) / f"{side}-{i}"
                    work.mkdir()
                    times[side].append(timed_run(code, work))
                    print(f"round {i + 1} {side:8s} {times[side][-1]:6.1f} s", flush=True)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)],
                           check=False, capture_output=True)
    med = {side: statistics.median(t) for side, t in times.items()}
    print(f"median: {args.baseline_commit} {med['baseline']:.1f} s, this checkout "
          f"{med['current']:.1f} s, ratio {med['current'] / med['baseline']:.2f}")


if __name__ == "__main__":
    main()
