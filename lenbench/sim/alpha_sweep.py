"""The scheduling score at several aging weights, on the draws of the headline score.

The aging weight alpha (quantiles per second; 0 = no guard, pure SJF) sets how much of SJF's gain
the policy keeps and how long a long request may wait, and a predictor's score moves with it: a
ranking that is right about the extremes and wrong in the middle loses less under a strong guard.
One alpha would make a ranking of predictors look firmer than it is, so the score is also given
at each of `cfg.score_alphas`: the oracle and the predictor are served again with that weight on
the same draws (same rows, arrivals and dispatcher per simulator seed) and scored against the
same FCFS baseline, which does not depend on alpha, with the headline's cap and interval
(score.py). The constant row needs no run: its SJF order is FCFS order at any alpha.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lenbench.sim.config import SimConfig
from lenbench.sim.keys import rank_keys
from lenbench.sim.memo import Draw, serve_all
from lenbench.sim.predictors import constant
from lenbench.sim.score import score_interval
from lenbench.sim.timing import TimeModel, get_time_model

# Figures kept per simulator seed at each alpha, beside the score metric: what the guard buys.
ALPHA_FIGURES = ("e2e_mean_all", "e2e_mean_short", "e2e_p99_long", "e2e_mean_capped",
                 "e2e_p99_capped")


def with_alpha(cfg: SimConfig, alpha: float) -> SimConfig:
    """`cfg` with aging at `alpha` quantiles per second (no guard at 0)."""
    if alpha == 0:
        return cfg.replace(starvation="none", aging_alpha=0.0, t_starve_s=None)
    return cfg.replace(starvation="aging", aging_alpha=float(alpha))


def score_by_alpha(true_len: ArrayLike, pred_len: ArrayLike, prompt_len: ArrayLike | int,
                   cfg: SimConfig, *, name: str, reference: Mapping[str, Any],
                   censored: ArrayLike | None = None, alphas: Sequence[float] | None = None,
                   time_model: TimeModel | None = None) -> dict[str, Any]:
    """The score of row `name` at each aging weight, on the draws of `reference`.

    `reference` is `simulate_predictions`' result for these inputs and `cfg` (its baseline's
    per-seed figures, draws and class thresholds are reused; at the headline's own weight its
    oracle and predictor figures too). Returns {"score_metric", "alphas", "entries": [{
    "aging_alpha", "starvation", "rows": {"oracle": {"per_seed"}, name: {"per_seed", "score"}}}],
    "wall_s"}; "per_seed" maps the score metric and ALPHA_FIGURES to one value per simulator
    seed, and "score" is `score.score_interval` with the cap.
    """
    alphas = tuple(cfg.score_alphas if alphas is None else alphas)
    true = np.asarray(true_len, dtype=np.int64)
    pred = np.asarray(pred_len, dtype=np.float64)
    prompt = np.broadcast_to(np.asarray(prompt_len, dtype=np.int64), true.shape)
    cut = np.zeros(true.shape, dtype=bool) if censored is None else \
        np.asarray(censored, dtype=bool)
    if pred.shape != true.shape or cut.shape != true.shape:
        raise ValueError(f"pred_len and censored must have shape {true.shape}")
    heads = {h["row"]: h for h in reference["headline"]}
    if name not in heads:
        raise ValueError(f"the reference result has no row {name!r}")
    metric = str(reference["score_metric"])
    keys = (metric, *(k for k in ALPHA_FIGURES if k != metric))
    seeds, qps = list(reference["seeds"]), float(reference["qps"])
    short_thr, long_thr = reference["short_threshold"], reference["long_threshold"]
    model = time_model or get_time_model(cfg.time_model, cfg.linear_abc)
    tokens = {"oracle": true.astype(np.float64), name: pred}  # what lb/pow2 may balance on
    key_of = {row: rank_keys(values) for row, values in tokens.items()}  # what SJF orders by
    balance = None if cfg.dispatch_uses_predictions else constant(true)
    base = np.array([np.nan if v is None else float(v)
                     for v in heads["baseline"]["per_seed"][metric]])

    started = time.perf_counter()
    entries = []
    for alpha in alphas:
        run_cfg = with_alpha(cfg, alpha)
        rows: dict[str, dict[str, Any]] = {}
        if run_cfg.starvation == cfg.starvation and run_cfg.aging_alpha == cfg.aging_alpha \
                and all(k in heads[r]["per_seed"] for r in key_of for k in keys):
            for row in key_of:  # the headline's own weight: its runs, not new ones
                rows[row] = {"per_seed": {k: list(heads[row]["per_seed"][k]) for k in keys}}
        else:
            figs: dict[str, list[dict[str, float | None]]] = {row: [] for row in key_of}
            draws = [Draw(true, prompt, cut, key, tokens[row] if balance is None else balance,
                          run_cfg, model, run_cfg.queue, qps, seed, (short_thr, long_thr))
                     for seed in seeds for row, key in key_of.items()]
            served = iter(serve_all(draws))
            for _ in seeds:
                for row in key_of:
                    figs[row].append(next(served)[0])
            for row, per in figs.items():
                rows[row] = {"per_seed": {k: [f[k] for f in per] for k in keys}}

        own, best = (np.array([np.nan if v is None else float(v)
                               for v in rows[row]["per_seed"][metric]]) for row in (name, "oracle"))
        rows[name]["score"] = score_interval(base - own, base - best, base, capped=True)
        entries.append({"aging_alpha": float(alpha), "starvation": run_cfg.guard,
                        "rows": rows})
    return {"score_metric": metric, "alphas": [float(a) for a in alphas], "entries": entries,
            "wall_s": time.perf_counter() - started}
