"""The audit of what was scored against the prediction it audits: extra time as a ratio, side by
side for a cheap predictor and a generating one, on the toy world.

Each predictor runs through the harness (`evaluate_predictor`: fit, the scored calls, the audit)
on the shipped toy world, `--repeats` times with a fresh audit seed each; the table shows, per
run, the rows the audit changed, their share of the test rows and steps, the power against a
leak on 3% of rows, the scored prediction time, the audit's re-prediction time and its whole
time (copy of the fitted state, changed view, re-prediction, comparison), and the two ratios.
Run from the repository root (the first run builds the toy world's features stage, about a
minute, into the usual cache):

    PYTHONPATH=. python benchmarks/audit_cost_bench.py [--predictors mlp_probe,pia] [--repeats 2]
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import logging
import time

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lenbench.cli import CONF_DIR
from lenbench.configs import RunConfig
from lenbench.contract.instantiate import instantiate_predictor
from lenbench.evaluate import evaluate_predictor
from lenbench.pipeline import prepare_world

COLUMNS = ("predictor", "run", "test rows", "changed", "share", "steps", "power", "scored s",
           "re-predict s", "audit s", "re-predict/scored", "audit/scored", "passed")


def config(name: str, overrides: list[str]) -> RunConfig:
    with initialize_config_dir(CONF_DIR, version_base=None):
        cfg = compose("config", overrides=[f"predictor={name}", "sim.enabled=false",
                                           "eval.n_boot=50", "progress=false", *overrides])
    return RunConfig.from_composed(OmegaConf.to_container(cfg, resolve=True))


def row(name: str, run: int, audit: dict) -> tuple:
    steps = audit.get("steps_share")
    return (name, run, audit["n_rows"], audit["checked_rows"], f"{audit['share']:.1%}",
            "—" if steps is None else f"{steps:.1%}", f"{audit['power']:.3f}",
            f"{audit['scored_seconds']:.3f}", f"{audit['repredict_seconds']:.3f}",
            f"{audit['seconds']:.3f}", f"{audit['repredict_cost']:.2f}",
            f"{audit['extra_cost']:.2f}", audit["passed"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--predictors", default="mlp_probe,pia",
                    help="comma-separated presets (default: a cheap one, a generating one)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per predictor (fresh audit seeds)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="config overrides, e.g. dataset.limit=400")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    names = args.predictors.split(",")
    cfgs = {name: config(name, args.overrides) for name in names}
    predictors = {name: instantiate_predictor(cfg.predictor) for name, cfg in cfgs.items()}
    started = time.perf_counter()
    world = prepare_world(cfgs[names[0]], need_features=True, progress=False,
                          needs=[p.needs for p in predictors.values()])
    print(f"toy world ready in {time.perf_counter() - started:.1f} s: "
          f"{len(world.rows('test'))} test rows; torch threads {args.threads}")
    rows = []
    for run in range(args.repeats):  # alternating predictors: load drifts hit both alike
        for name in names:
            pred = predictors[name] if run == 0 else instantiate_predictor(cfgs[name].predictor)
            result = evaluate_predictor(pred, name, cfgs[name].predictor, world, cfgs[name],
                                        seed=0)
            rows.append(row(name, run, result["causality"]))
            print("  " + "  ".join(str(x) for x in rows[-1]), flush=True)
    widths = [max(len(str(x)) for x in col) for col in zip(COLUMNS, *rows)]
    print()
    for line in (COLUMNS, *rows):
        print("  ".join(str(x).rjust(w) for x, w in zip(line, widths)))


if __name__ == "__main__":
    main()
