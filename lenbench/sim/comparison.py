"""What a predictor's dynamic and distributional outputs add to scheduling, on paired draws.

`compare_policies` serves the same drawn traffic as `simulate_predictions` (same rows, arrivals
and dispatcher per simulator seed) under more policies than static SJF, and scores each with the
same S = (baseline - row) / (baseline - oracle) against the same baseline (FCFS) and oracle (SJF
on true lengths), so the rows are directly comparable with the scheduling table:

- static_sjf: today's row, SJF by the static prediction (taken from the reference result),
  scored like the headline (its mean gain counts up to the oracle's); the other rows uncapped;
- static_preemptive: queue srpt with the static prediction minus the tokens generated, which
  isolates what preemption alone does with a static predictor;
- dynamic_preemptive: queue srpt with the predictor's dynamic remaining-length estimates
  (latest scored step at or before t, minus the tokens since; remaining.py);
- distributional: SJF by a key of the predicted length distribution (cfg.order_by: the
  `order_quantile` quantile, or mean + tail_beta * (q0.9 - q0.5), which delays requests whose
  predicted upper tail is long), with the configured starvation guard; like every SJF row it is
  keyed by the statistic's rank quantiles on the test rows (keys.py), so an upper quantile,
  larger than the point prediction, does not weaken the aging guard;
- oracle_preemptive: srpt on true lengths (remaining L - t exactly), the SRPT bound; it may
  score above 1, because the oracle of the score does not preempt.

Preemptive rows charge their preemption cost in simulated time (preemption.py) and report
preemptions per request. They order by remaining tokens (total minus the tokens generated), so
they keep the predictions' units: a scaled copy of a predictor may score differently there. Their
aging credit is aging_alpha times keys.tokens_per_quantile of the test rows' true lengths.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.sim.config import SCORE_METRICS, SimConfig
from lenbench.sim.evaluate import CHANGE_METRICS, HEADLINE_FIGURES, simulate_predictions
from lenbench.sim.keys import rank_keys, tokens_per_quantile
from lenbench.sim.metrics import aggregate, ratio_interval, run_figures
from lenbench.sim.predictors import constant
from lenbench.sim.remaining import RemainingEstimates
from lenbench.sim.run import simulate
from lenbench.sim.score import score_interval
from lenbench.sim.timing import TimeModel, get_time_model
from lenbench.sim.workload import Workload, draw_rows

COMPARISON_ROWS = ("static_sjf", "static_preemptive", "dynamic_preemptive", "distributional",
                   "oracle_preemptive")
PREEMPTION_FIGURES = ("preemptions_per_request", "preempted_share")
COMPARISON_DEFINITION = (
    "rows on the draws of the scheduling score, each scored (baseline - row) / (baseline - "
    "oracle) of {metric} with the score's baseline ({baseline}) and oracle ({policy} on true "
    "lengths): static_sjf = the predictor's row; static_preemptive = srpt on the static "
    "prediction minus generated tokens; dynamic_preemptive = srpt on the dynamic remaining "
    "estimates; distributional = {policy} ordered by the rank quantiles of {order}; "
    "oracle_preemptive = srpt on true lengths (the SRPT bound). srpt keys are remaining tokens "
    "(aging {aging}); srpt re-ranks every {every} iteration(s), margin {margin:g} tokens, at "
    "most {cap} preemption(s) per request, cost: {cost}")


def order_description(cfg: SimConfig) -> str:
    """The distributional row's ordering rule in words."""
    if cfg.order_by == "quantile":
        return f"the predicted q{cfg.order_quantile:g} quantile"
    if cfg.order_by == "tail":
        return f"mean + {cfg.tail_beta:g} * (q0.9 - q0.5) of the predicted distribution"
    return "the point prediction"


def distribution_key(quantiles: ArrayLike, cfg: SimConfig,
                     levels: ArrayLike = QUANTILE_LEVELS) -> NDArray[np.float64] | None:
    """Per-row queue key from predicted quantiles ((n, Q) at `levels`) by cfg.order_by, read
    through `LengthDistribution` (linear between levels, no mass beyond the outermost); None
    for order_by "point"."""
    if cfg.order_by == "point":
        return None
    dist = LengthDistribution.from_quantiles(levels, quantiles)
    if cfg.order_by == "quantile":
        return dist.quantile([cfg.order_quantile])[:, 0]
    q50, q90 = dist.quantile([0.5, 0.9]).T
    return dist.mean() + cfg.tail_beta * (q90 - q50)


def compare_policies(
    true_len: ArrayLike,
    pred_len: ArrayLike,
    prompt_len: ArrayLike | int,
    cfg: SimConfig,
    *,
    name: str = "predictor",
    reference: Mapping[str, Any] | None = None,
    remaining: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
    quantiles: ArrayLike | None = None,
    time_model: TimeModel | None = None,
) -> dict[str, Any]:
    """Score static SJF, preemptive, distributional and SRPT-bound rows on paired draws.

    `true_len`, `pred_len`, `prompt_len` as for `simulate_predictions`; `reference` is its
    result for these inputs and `cfg` (row `name`; computed here when None), whose baseline,
    oracle and predictor per-seed figures are reused. `remaining` = (step_row, step_t, rem):
    dynamic remaining estimates per test row at scored steps; `quantiles`: (n, Q) predicted
    quantiles at QUANTILE_LEVELS. A row whose input is missing is listed in "skipped".

    Each row: "policy", "score" and "change" (as in simulate_predictions, against the same
    baseline and oracle), "figures" (seed aggregates of the headline figures and of
    PREEMPTION_FIGURES) and "per_seed" (per simulator seed, for pooling predictor seeds).
    """
    true = np.asarray(true_len, dtype=np.int64)
    pred = np.asarray(pred_len, dtype=np.float64)
    prompt = np.broadcast_to(np.asarray(prompt_len, dtype=np.int64), true.shape)
    if pred.shape != true.shape:
        raise ValueError(f"pred_len has shape {pred.shape}, expected {true.shape}")
    model = time_model or get_time_model(cfg.time_model, cfg.linear_abc)
    if reference is None:
        reference = simulate_predictions(true, pred, prompt, cfg, name=name, time_model=model,
                                         quantile_points=0)
    heads = {h["row"]: h for h in reference["headline"]}
    if name not in heads:
        raise ValueError(f"the reference result has no row {name!r}")
    seeds, qps = list(reference["seeds"]), float(reference["qps"])
    short_thr, long_thr = reference["short_threshold"], reference["long_threshold"]

    # row -> (queue, what the queue orders by, the values in tokens, dynamic estimates)
    runs: dict[str, tuple[str, NDArray[np.float64], NDArray[np.float64], Any]] = {
        "static_preemptive": ("srpt", pred, pred, None)}
    skipped: dict[str, str] = {}
    if remaining is not None:
        runs["dynamic_preemptive"] = ("srpt", pred, pred,
                                      RemainingEstimates(*remaining, len(true)))
    else:
        skipped["dynamic_preemptive"] = "the predictor has no dynamic predictions"
    key = None if quantiles is None else distribution_key(quantiles, cfg)
    if key is not None:
        if key.shape != true.shape:
            raise ValueError(f"quantiles give {key.shape[0]} keys for {true.size} rows")
        if not np.all(np.isfinite(key)):
            raise ValueError("quantiles must give finite keys")
        runs["distributional"] = (cfg.queue, rank_keys(key), key, None)
    else:
        skipped["distributional"] = ("the predictor has no predicted distribution"
                                     if quantiles is None else "order_by is point")
    runs["oracle_preemptive"] = ("srpt", true.astype(np.float64), true.astype(np.float64), None)
    balance = None if cfg.dispatch_uses_predictions else constant(true)
    scale = tokens_per_quantile(true)  # srpt's aging credit in tokens per second of age

    started = time.perf_counter()
    per_seed: dict[str, list[dict[str, float | None]]] = {row: [] for row in runs}
    for seed in seeds:
        idx, arrivals = draw_rows(len(true), cfg.n_requests, qps, seed, cfg.arrival_cv)
        for row, (queue, values, tokens, est) in runs.items():
            wl = Workload(arrivals, prompt[idx], true[idx], values[idx])
            res = simulate(wl, cfg, time_model=model, dispatch=cfg.dispatch, queue=queue,
                           seed=seed, dispatch_len=(tokens if balance is None else balance)[idx],
                           remaining=None if est is None else est.for_requests(idx, values[idx]),
                           token_scale=scale)
            figs = run_figures(res, short_thr, long_thr)
            counts = res.preemptions if res.preemptions is not None else np.zeros(len(wl))
            figs["preemptions_per_request"] = float(counts.mean())
            figs["preempted_share"] = float((counts > 0).mean())
            per_seed[row].append(figs)

    def ref_seeds(row: str, key: str) -> NDArray[np.float64]:
        return np.array([np.nan if v is None else float(v)
                         for v in heads[row]["per_seed"][key]])

    keys = tuple(HEADLINE_FIGURES) + PREEMPTION_FIGURES
    rows: dict[str, dict[str, Any]] = {"static_sjf": {
        "policy": heads[name]["policy"],
        "per_seed": {k: list(heads[name]["per_seed"][k]) for k in HEADLINE_FIGURES}
        | {k: [0.0] * len(seeds) for k in PREEMPTION_FIGURES}}}
    for row, figs in per_seed.items():
        rows[row] = {"policy": f"{cfg.dispatch}+{runs[row][0]}",
                     "per_seed": {k: [f[k] for f in figs] for k in keys}}
    for row, entry in rows.items():
        values = {k: np.array([np.nan if v is None else float(v) for v in vs])
                  for k, vs in entry["per_seed"].items()}
        entry["figures"] = {k: aggregate(entry["per_seed"][k]) for k in keys}
        entry["score"] = {}
        for metric in SCORE_METRICS:
            base = ref_seeds("baseline", metric)
            gain, oracle_gain = base - values[metric], base - ref_seeds("oracle", metric)
            entry["score"][metric] = score_interval(gain, oracle_gain, base,
                                                    capped=row == "static_sjf")
        entry["change"] = {metric: ratio_interval(values[metric] - ref_seeds("baseline", metric),
                                                  ref_seeds("baseline", metric))
                           for metric in CHANGE_METRICS}
    return {
        "score_metric": cfg.score_metric,
        "definition": COMPARISON_DEFINITION.format(
            metric=cfg.score_metric, baseline=cfg.baseline_policy, policy=cfg.policy,
            order=order_description(cfg), every=cfg.repredict_every, margin=cfg.preempt_margin,
            cap=cfg.max_preemptions, cost=_cost_text(cfg),
            aging=(f"{cfg.aging_alpha * scale:.4g} tokens/s = {cfg.aging_alpha:g} quantile/s x "
                   f"{scale:.4g} tokens per quantile" if cfg.starvation == "aging" else "none")),
        "repredict_every": cfg.repredict_every,
        "preempt_margin": cfg.preempt_margin,
        "preempt_cost": cfg.preempt_cost,
        "max_preemptions": cfg.max_preemptions,
        "order_by": order_description(cfg),
        "seeds": seeds,
        "rows": {row: rows[row] for row in COMPARISON_ROWS if row in rows},
        "skipped": skipped,
        "wall_s": time.perf_counter() - started,
    }


def _cost_text(cfg: SimConfig) -> str:
    if cfg.preempt_cost == "swap":
        return (f"swap (KV out and back in at {cfg.kv_bytes_per_token} B/token over "
                f"{cfg.swap_bandwidth_gb_s:g} GB/s)")
    return "recompute (KV dropped; prompt + generated tokens prefilled again on resume)"
