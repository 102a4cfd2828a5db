"""Value-of-prediction curves: latency against offered load, and the load the headline is at.

A scheduling score means little where no queue forms: below saturation a request rarely waits,
and even the oracle (SJF on the true lengths) gains a few milliseconds. So the same traffic is
served at each load of `cfg.sweep_loads` (factors of the estimated saturation rate) by
reference rows that bracket what prediction can be worth, beside the predictor:

- "fcfs": first come, first served (no prediction);
- "oracle": SJF on the true lengths (perfect ranking);
- "noisy C=0.7", ...: SJF on the true lengths times log-normal noise, its spread tuned so that
  Harrell's C of the noisy lengths on the rows is each of `cfg.sweep_noisy_c`: they map a
  ranking quality to latency, so a predictor's C-index reads off as seconds on one axis;
- "short prompt first": SJF on the prompt's length, what a scheduler knows without a
  predictor.

Every SJF row runs the policy's guard (none by default: plain SJF) with the same dispatcher and
the same draws (rows and arrivals per simulator seed and load), keyed by rank quantiles
(keys.py) as the score is. Loads above 1 are overload: the queue grows for the whole run, so
their figures hold for a run of `n_requests` requests, not for a steady state.

The headline's load (`cfg.headline_min_gain`): the lowest sweep load at which the oracle cuts
the score metric (the mean latency of all requests) by at least that share of FCFS's. None
when no load does: then no score is given.

The reference curves depend on the world's rows and the config alone, so they are simulated
once per process and shared by every predictor (memo.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lenbench.sim.capacity import resolve_qps
from lenbench.sim.config import SimConfig
from lenbench.sim.keys import rank_keys
from lenbench.sim.memo import Draw, digest, serve_all
from lenbench.sim.predictors import constant, noisy_oracle
from lenbench.sim.timing import TimeModel, get_time_model

# The figures each curve keeps at each load (seed means), and the one kept per seed as well.
SWEEP_FIGURES = ("e2e_mean_all", "e2e_p99_all", "ttft_mean_all", "e2e_mean_short",
                 "e2e_mean_long", "e2e_mean_capped", "e2e_p99_capped")
NOISE_SEED = 0  # the noisy oracles' noise: one stream for every world and run
# The noisy oracles of each world's rows, found once per process (a bisection over Harrell's C
# takes seconds on a few thousand rows; every predictor of a world uses the same ones).
_noisy_kept: dict[bytes, dict[str, dict[str, Any]]] = {}


def noisy_name(c_index: float) -> str:
    return f"noisy C={c_index:g}"


def noisy_oracles(true: ArrayLike, censored: ArrayLike | None, targets: Sequence[float],
                  seed: int = NOISE_SEED) -> dict[str, dict[str, Any]]:
    """For each target C-index, the true lengths times exp(N(0, sigma)) with sigma found by
    bisection so that Harrell's C of the noisy lengths on these rows (censored ones counted as
    the main table counts them) is the target, to 0.002: {name: {"pred", "sigma", "c_index"}}.
    One noise stream serves every sigma, so a larger sigma never ranks better by chance."""
    from lenbench.scoring.concordance import concordance_index

    y = np.asarray(true, dtype=np.float64)
    cut = None if censored is None else np.asarray(censored, dtype=bool)
    z = noisy_oracle(np.ones_like(y), 1.0, seed)  # exp(N(0, 1)): noise of unit spread

    def at(sigma: float) -> tuple[NDArray[np.float64], float]:
        pred = y * z ** sigma
        c = concordance_index(y, pred, cut)
        return pred, float("nan") if c is None else float(c)

    out: dict[str, dict[str, Any]] = {}
    for target in targets:
        lo, hi = 0.0, 1.0
        while at(hi)[1] > target and hi < 1e3:  # C falls towards 0.5 as sigma grows
            hi *= 2.0
        sigma = hi
        pred, c = at(sigma)
        for _ in range(60):
            if abs(c - target) <= 0.002:
                break
            sigma = (lo + hi) / 2.0
            pred, c = at(sigma)
            if c > target:
                lo = sigma
            else:
                hi = sigma
        out[noisy_name(target)] = {"pred": pred, "sigma": sigma, "c_index": c}
    return out


def _curve(served: list[dict[str, float | None]], loads: list[tuple[float, float]],
           n_seeds: int, metric: str) -> list[dict[str, Any]]:
    """One row's points from its simulations' figures (load by load, seed by seed):
    SWEEP_FIGURES as seed means, and the score metric per seed (for paired differences)."""
    points = []
    for i, (load, qps) in enumerate(loads):
        per_seed = served[i * n_seeds:(i + 1) * n_seeds]
        figures = {}
        for key in SWEEP_FIGURES:
            values = [f[key] for f in per_seed if f[key] is not None]
            figures[key] = float(np.mean(values)) if values else None
        points.append({"load_factor": load, "qps": qps, "figures": figures,
                       "per_seed": {metric: [f[metric] for f in per_seed]}})
    return points


def headline_load(references: dict[str, list[dict[str, Any]]], metric: str,
                  min_gain: float) -> tuple[float | None, list[float | None]]:
    """The lowest load at which the oracle's figure is at least `min_gain` below FCFS's, and
    the oracle's gain (a share of FCFS's figure) at every load."""
    gains: list[float | None] = []
    for fcfs, best in zip(references["fcfs"], references["oracle"]):
        base, row = fcfs["figures"].get(metric), best["figures"].get(metric)
        gains.append(None if base is None or row is None or base <= 0 else 1 - row / base)
    chosen = next((p["load_factor"] for p, g in zip(references["fcfs"], gains)
                   if g is not None and g >= min_gain), None)
    return chosen, gains


def load_curves(true_len: ArrayLike, pred_len: ArrayLike, prompt_len: ArrayLike | int,
                cfg: SimConfig, *, name: str, censored: ArrayLike | None = None,
                time_model: TimeModel | None = None) -> dict[str, Any]:
    """The value-of-prediction curves of `cfg.sweep_loads` (module doc) for predictor `name`.

    Returns {"loads", "seeds", "policy", "starvation", "score_metric", "figures",
    "references": {row: [point per load]}, "rows": {name: [point per load]}, "noisy": {row:
    {"sigma", "c_index"}}, "oracle_gain": [share per load], "oracle_gain_s": [seconds per
    load], "rule", "headline_load"}; a point is {"load_factor", "qps", "figures": {figure: seed
    mean}, "per_seed": {score metric: [per seed]}}.
    """
    if not cfg.sweep_loads:
        raise ValueError("load_curves needs cfg.sweep_loads")
    true = np.asarray(true_len, dtype=np.int64)
    prompt = np.ascontiguousarray(np.broadcast_to(np.asarray(prompt_len, dtype=np.int64),
                                                  true.shape))
    cut = np.zeros(true.shape, dtype=bool) if censored is None else \
        np.asarray(censored, dtype=bool)
    pred = np.asarray(pred_len, dtype=np.float64)
    if pred.shape != true.shape or cut.shape != true.shape:
        raise ValueError(f"pred_len and censored must have shape {true.shape}")
    model = time_model or get_time_model(cfg.time_model, cfg.linear_abc)
    seeds = list(cfg.seeds[:cfg.sweep_seeds] if cfg.sweep_seeds else cfg.seeds)
    thresholds = cfg.thresholds(true, cut)
    loads = [(float(lf), resolve_qps(cfg.replace(load_factor=float(lf), qps=None),
                                     float(prompt.mean()), float(true.mean()), model)[0])
             for lf in cfg.sweep_loads]
    flat = constant(true)
    key = digest((true, cut), (tuple(cfg.sweep_noisy_c), NOISE_SEED))
    if key not in _noisy_kept:
        _noisy_kept[key] = noisy_oracles(true, cut, cfg.sweep_noisy_c)
    noisy = _noisy_kept[key]
    tokens = {"fcfs": flat, "oracle": true.astype(np.float64),
              **{row: v["pred"] for row, v in noisy.items()},
              "short prompt first": prompt.astype(np.float64)}

    if name in tokens:
        raise ValueError(f"predictor name {name!r} clashes with a reference curve")
    curves = {**tokens, name: pred}  # every row of the sweep, served in one batch
    draws = [Draw(true, prompt, cut, rank_keys(values),
                  values if cfg.dispatch_uses_predictions else flat, cfg, model,
                  "fcfs" if row == "fcfs" else cfg.queue, qps, seed, thresholds)
             for row, values in curves.items() for _, qps in loads for seed in seeds]
    served = [figures for figures, _ in serve_all(draws)]
    per_row = len(loads) * len(seeds)
    points = {row: _curve(served[i * per_row:(i + 1) * per_row], loads, len(seeds),
                          cfg.score_metric) for i, row in enumerate(curves)}
    references = {row: points[row] for row in tokens}
    rows = {name: points[name]}
    metric = cfg.score_metric
    chosen, gains = headline_load(references, metric, cfg.headline_min_gain or 0.0)
    gain_s = [None if f["figures"].get(metric) is None or o["figures"].get(metric) is None
              else f["figures"][metric] - o["figures"][metric]
              for f, o in zip(references["fcfs"], references["oracle"])]
    rule = None if cfg.headline_min_gain is None else (
        f"the lowest sweep load at which the oracle cuts {metric} by at least "
        f"{100 * cfg.headline_min_gain:g}% of FCFS's")
    return {"loads": [lf for lf, _ in loads], "seeds": seeds, "policy": cfg.policy,
            "starvation": cfg.guard,
            "score_metric": metric, "figures": list(SWEEP_FIGURES),
            "n_requests": cfg.n_requests,
            "references": references, "rows": rows,
            "noisy": {row: {"sigma": v["sigma"], "c_index": v["c_index"]}
                      for row, v in noisy.items()},
            "oracle_gain": gains, "oracle_gain_s": gain_s, "rule": rule,
            "headline_load": chosen if cfg.headline_min_gain is not None else None}
