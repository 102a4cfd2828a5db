"""Score a predictor by what it does to serving: the entry point of the evaluation pipeline.

Every predictor is compared on the same drawn traffic (same rows, same arrivals per seed)
against reference rows, and every row uses the same dispatcher: the baseline admits in FCFS
order, the predictor, oracle and constant rows in SJF order of their predictions, so that a
row's gain over the baseline comes from its queue order alone. The SJF key of every row is its
predictions' mid-rank quantile on the test rows (keys.py): the order, and the weight of the
aging term against it, depend on a predictor's ranking and not on its units, so scaled copies
of a predictor score the same and inflating the oracle's lengths cannot beat it.

The scheduling score of a row is S = (baseline - row) / (baseline - oracle) on one latency
figure (cfg.score_metric, by default the mean end-to-end latency of all requests), with
numerator and denominator averaged over simulator seeds (paired: one draw per seed serves every
row) and the row's mean gain counted up to the oracle's. A constant prediction's SJF
order is FCFS order (ties break by arrival) and dispatch does not read predictions, so the
constant row scores exactly 0 and the oracle exactly 1, and no row scores above 1 (score.py).
The 95% interval is a Student-t interval over simulator seeds on the linearised ratio (delta
method; `metrics.ratio_interval`). No score is given, with the reason, when the oracle's gain
is not clear (score.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lenbench.sim.capacity import resolve_qps
from lenbench.sim.config import SCORE_METRICS, SimConfig
from lenbench.sim.keys import rank_keys
from lenbench.sim.memo import Draw, serve_all
from lenbench.sim.metrics import (
    aggregate,
    class_masks,
    kendall_tau,
    ratio_interval,
)
from lenbench.sim.predictors import constant, noisy_oracle, oracle
from lenbench.sim.score import score_interval
from lenbench.sim.timing import TimeModel, get_time_model
from lenbench.sim.workload import draw_rows

REFERENCE_ROWS = ("baseline", "oracle", "constant")
# Relative changes against the baseline reported for every row (short, long and capped classes).
CHANGE_METRICS = ("e2e_mean_short", "e2e_p90_short", "e2e_p99_short", "e2e_mean_long",
                  "e2e_p99_long", "e2e_mean_capped", "e2e_p99_capped", "e2e_mean_all")
# Figures whose per-seed values each headline entry carries (for pooling predictor seeds).
HEADLINE_FIGURES = tuple(dict.fromkeys(CHANGE_METRICS + SCORE_METRICS)) + (
    "throughput_tok_s", "hol_inversion_rate")
SCORE_DEFINITION = ("(baseline - predictor) / (baseline - oracle) of {metric}, seed means, the "
                    "predictor's mean gain counted up to the oracle's (at most 1); "
                    "baseline: {baseline} (same dispatcher, FCFS); predictor, oracle (true "
                    "lengths) and constant: {policy} keyed by each row's rank quantiles")
QUEUE_KEY = ("each row's predictions as mid-rank quantiles on the test rows (ranking only, no "
             "units); aging_alpha in quantiles per second")
SCORE_INTERVAL = ("95% Student-t interval over simulator seeds on the linearised ratio "
                  "(delta method)")


def simulate_predictions(
    true_len: ArrayLike,
    pred_len: ArrayLike,
    prompt_len: ArrayLike | int,
    cfg: SimConfig | None = None,
    seeds: Sequence[int] | None = None,
    *,
    name: str = "predictor",
    extra_predictors: Mapping[str, ArrayLike] | None = None,
    constant_value: float | None = None,
    time_model: TimeModel | None = None,
    quantile_points: int = 101,
    censored: ArrayLike | None = None,
) -> dict[str, Any]:
    """Simulate serving with a predictor's predictions and the reference rows; return figures.

    Inputs are aligned per-row arrays, typically a predictor's test set: `true_len` (output
    tokens, >= 1), `pred_len` (the predictor's output, finite), `prompt_len` (array or one
    int) and `censored` (rows cut at the length cap; they form the capped class, not the long
    one, and "qNN" class thresholds are read from the other rows' lengths; default none). `cfg`
    defaults to SimConfig(), which is the outlets_paper preset; for the toy world use
    conf/sim/default.yaml (`SimConfig.from_dict(OmegaConf.to_container(cfg.sim))`).
    `seeds` defaults to cfg.seeds.
    For each seed, `cfg.n_requests` rows are drawn with replacement and given arrivals at
    `cfg.qps` or at `cfg.load_factor` times the estimated saturation rate (capacity.py); the
    same draw serves every row below, so comparisons are paired.

    Rows (keys of result["rows"]), all with cfg.dispatch; unless
    cfg.dispatch_uses_predictions, lb/pow2 balance on the constant value for every row, so
    that rows differ in queue order only:
      - "baseline": cfg.baseline_policy (cfg.dispatch + FCFS), which ignores predictions;
      - `name`: the given predictions under cfg.policy (default lb+sjf, with cfg's guard);
      - "oracle": true lengths under cfg.policy (the reference gain: score 1);
      - "constant": one value for all (default the mean true length) under cfg.policy; its
        SJF order is FCFS order, so it reproduces the baseline run exactly (score 0);
      - any `extra_predictors` (name -> predictions aligned with the rows), e.g. noisy oracles.

    Each row holds:
      - "figures": every figure of `metrics.run_figures` (e.g. "e2e_p99_short",
        "e2e_mean_long", "throughput_tok_s", "queue_delay_p99_short", "hol_inversion_rate";
        seconds and tokens/s) aggregated over seeds as {"mean", "ci95_low", "ci95_high",
        "n", "per_seed"} (t-intervals over seeds);
      - "score" (not for baseline): for each of SCORE_METRICS, (baseline - row) /
        (baseline - oracle) of the seed means, at most 1 (the row's mean gain counts up to
        the oracle's), with its 95% t-interval over seeds (`score.score_interval`) as {"value",
        "ci95_low", "ci95_high", "n_sim_seeds", "n_pred_seeds", "reason", "uncapped",
        "capped", "per_seed"}; 1 = the oracle's gain (the most a row can score), 0 = none,
        negative = harm; value None, with the reason, when the oracle's gain is not clear
        (score.py);
      - "change" (not for baseline): for each of CHANGE_METRICS, row / baseline - 1 of the
        seed means with its 95% interval (same method), e.g. the long-request P99 change;
      - "quality": Kendall tau and MAE of the row's predictions (tokens) against `true_len`;
      - "e2e_quantiles": `quantile_points` evenly spaced quantiles of end-to-end latency per
        class (all/short/long/capped), pooled over seeds, for CDF plots without per-request data.

    The result also carries "score_metric", "score_definition", "score_interval",
    "headline" (one flat dict per row for a leaderboard table, with the per-seed values of
    HEADLINE_FIGURES so that a leaderboard can pool predictor seeds), "qps",
    "saturation_qps", "load_factor" (qps / saturation), "seeds", "policy", "baseline_policy",
    "starvation" (the guard, e.g. "aging (alpha 1 quantile/s)"), "queue_key" (what the
    queue orders by), "short_threshold"/"long_threshold" (resolved to tokens),
    "class_shares" (the share of the test rows in the short, long and capped classes),
    "time_model", "config" (cfg.to_dict()) and "wall_s". All values are JSON-serialisable
    (undefined numbers are None).
    """
    cfg = cfg or SimConfig()
    if cfg.queue == "srpt":
        raise ValueError("sim.queue must be sjf or fcfs for the scheduling score (srpt keys are "
                         "remaining tokens, which depend on prediction scale); preemptive rows "
                         "are scored by sim.compare=true")
    seeds = tuple(cfg.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("need at least one seed")
    true = np.asarray(true_len, dtype=np.int64)
    if true.ndim != 1 or len(true) == 0:
        raise ValueError("true_len must be a non-empty 1-D array")
    prompt = np.broadcast_to(np.asarray(prompt_len, dtype=np.int64), true.shape)
    cut = np.zeros(true.shape, dtype=bool) if censored is None else \
        np.asarray(censored, dtype=bool)
    if cut.shape != true.shape:
        raise ValueError(f"censored has shape {cut.shape}, expected {true.shape}")
    predictions: dict[str, np.ndarray] = {name: np.asarray(pred_len, dtype=np.float64)}
    for extra_name, extra in (extra_predictors or {}).items():
        predictions[extra_name] = np.asarray(extra, dtype=np.float64)
    clash = set(predictions) & set(REFERENCE_ROWS)
    if clash:
        raise ValueError(f"predictor names clash with reference rows: {sorted(clash)}")
    predictions["oracle"] = oracle(true)
    predictions["constant"] = constant(true, constant_value)
    for row, arr in predictions.items():
        if arr.shape != true.shape:
            raise ValueError(f"predictions {row!r} have shape {arr.shape}, expected {true.shape}")

    model = time_model or get_time_model(cfg.time_model, cfg.linear_abc)
    qps, sat = resolve_qps(cfg, float(prompt.mean()), float(true.mean()), model)
    row_names = ["baseline", name, "oracle", "constant"] + \
        [n for n in predictions if n not in (name, "oracle", "constant")]
    queue_of = dict.fromkeys(row_names, cfg.queue)
    queue_of["baseline"] = "fcfs"
    pred_of = dict(predictions, baseline=predictions["constant"])
    for row, arr in pred_of.items():
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"predictions {row!r} must be finite")
    key_of = {row: rank_keys(arr) for row, arr in pred_of.items()}  # what SJF orders by
    # What lb/pow2 balance on: one value for all (prediction-free), or each row's predictions
    # (tokens).
    balance = None if cfg.dispatch_uses_predictions else predictions["constant"]
    short_thr, long_thr = cfg.thresholds(true, cut)
    shares = {cls: float(mask.mean())
              for cls, mask in class_masks(true, short_thr, long_thr, cut).items()
              if cls != "all"}

    started = time.perf_counter()
    per_seed: dict[str, list[dict[str, float | None]]] = {row: [] for row in row_names}
    e2e_pool: dict[str, dict[str, list[np.ndarray]]] = {
        row: {"all": [], "short": [], "long": [], "capped": []} for row in row_names}
    draws = [Draw(true, prompt, cut, key_of[row], pred_of[row] if balance is None else balance,
                  cfg, model, queue_of[row], qps, seed, (short_thr, long_thr))
             for seed in seeds for row in row_names]
    served = iter(serve_all(draws))
    for seed in seeds:
        idx, _ = draw_rows(len(true), cfg.n_requests, qps, seed, cfg.arrival_cv)
        masks = class_masks(true[idx], short_thr, long_thr, cut[idx])
        for row in row_names:
            figures, e2e = next(served)
            per_seed[row].append(figures)
            for cls, mask in masks.items():
                e2e_pool[row][cls].append(e2e[mask])

    levels = np.linspace(0.0, 1.0, quantile_points) if quantile_points > 1 else None
    rows: dict[str, dict[str, Any]] = {}
    for row in row_names:
        figs = {key: aggregate([f[key] for f in per_seed[row]]) for key in per_seed[row][0]}
        entry: dict[str, Any] = {
            "policy": f"{cfg.dispatch}+{queue_of[row]}",
            "predictor": "none" if row == "baseline" else row,
            "figures": figs,
        }
        if row != "baseline":
            entry["quality"] = _quality(pred_of[row], true)
        if levels is not None:
            entry["e2e_quantiles"] = {
                "levels": levels.tolist(),
                **{cls: _quantiles(np.concatenate(parts), levels)
                   for cls, parts in e2e_pool[row].items()}}
        rows[row] = entry

    def seed_values(row: str, metric: str) -> np.ndarray:
        return np.array([np.nan if f[metric] is None else f[metric] for f in per_seed[row]])

    for row in row_names:
        if row == "baseline":
            continue
        scores: dict[str, Any] = {}
        for metric in SCORE_METRICS:
            base = seed_values("baseline", metric)
            gain, oracle_gain = base - seed_values(row, metric), base - seed_values("oracle",
                                                                                    metric)
            scores[metric] = score_interval(gain, oracle_gain, base, capped=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                paired = np.where(oracle_gain > 0, np.minimum(gain / oracle_gain, 1.0), np.nan)
            scores[metric]["per_seed"] = [float(v) if np.isfinite(v) else None for v in paired]
        rows[row]["score"] = scores
        changes: dict[str, Any] = {}
        for metric in CHANGE_METRICS:
            base = seed_values("baseline", metric)
            changes[metric] = ratio_interval(seed_values(row, metric) - base, base)
        rows[row]["change"] = changes

    return {
        "policy": cfg.policy,
        "baseline_policy": cfg.baseline_policy,
        "starvation": cfg.guard,
        "queue_key": QUEUE_KEY,
        "score_metric": cfg.score_metric,
        "score_definition": SCORE_DEFINITION.format(metric=cfg.score_metric,
                                                    baseline=cfg.baseline_policy,
                                                    policy=cfg.policy),
        "score_interval": SCORE_INTERVAL,
        "qps": qps,
        "saturation_qps": sat,
        "load_factor": qps / sat,
        "n_requests": cfg.n_requests,
        "seeds": list(seeds),
        "short_threshold": short_thr,
        "long_threshold": long_thr,
        "class_shares": shares,
        "time_model": getattr(model, "name", type(model).__name__),
        "config": cfg.to_dict(),
        "rows": rows,
        "headline": [_headline(row, rows[row], cfg.score_metric) for row in row_names],
        "wall_s": time.perf_counter() - started,
    }


def _quality(pred: np.ndarray, true: np.ndarray) -> dict[str, float | None]:
    return {"kendall_tau": kendall_tau(pred, true),
            "mae": float(np.mean(np.abs(pred - true)))}


def _quantiles(values: np.ndarray, levels: np.ndarray) -> list[float] | None:
    values = values[~np.isnan(values)]
    return np.quantile(values, levels).tolist() if values.size else None


def _headline(row: str, entry: Mapping[str, Any], metric: str) -> dict[str, Any]:
    """One flat leaderboard row: seed means and intervals of the figures that matter most, the
    score on `metric`, the changes against the baseline, and per-seed values for pooling."""
    figs = entry["figures"]
    out: dict[str, Any] = {"row": row, "policy": entry["policy"]}
    for key in HEADLINE_FIGURES:
        out[key] = figs[key]["mean"]
        out[f"{key}_ci95"] = [figs[key]["ci95_low"], figs[key]["ci95_high"]]
    score = entry.get("score", {}).get(metric)
    out["score_metric"] = metric
    out["score"] = None if score is None else score["value"]
    out["score_ci95"] = None if score is None else [score["ci95_low"], score["ci95_high"]]
    out["score_reason"] = None if score is None else score.get("reason")
    for key, change in entry.get("change", {}).items():
        out[f"{key}_change"] = change["value"]
        out[f"{key}_change_ci95"] = [change["ci95_low"], change["ci95_high"]]
    out["per_seed"] = {key: figs[key]["per_seed"] for key in HEADLINE_FIGURES}
    out["kendall_tau"] = entry.get("quality", {}).get("kendall_tau")
    return out


def load_sweep(true_len: ArrayLike, pred_len: ArrayLike, prompt_len: ArrayLike | int,
               cfg: SimConfig, load_factors: Sequence[float],
               seeds: Sequence[int] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
    """`simulate_predictions` at each load factor (relative to saturation); for the
    P99-versus-load plot. Extra keyword arguments pass through."""
    return [simulate_predictions(true_len, pred_len, prompt_len,
                                 cfg.replace(load_factor=float(lf)), seeds, **kwargs)
            for lf in load_factors]


def noisy_oracle_sweep(true_len: ArrayLike, prompt_len: ArrayLike | int, cfg: SimConfig,
                       sigmas: Sequence[float], seeds: Sequence[int] | None = None,
                       noise_seed: int = 0, **kwargs: Any) -> dict[str, Any]:
    """One `simulate_predictions` call whose extra rows are noisy oracles `noisy_<sigma>`,
    tracing scheduling quality against ranking quality (Kendall tau)."""
    true = np.asarray(true_len)
    extra = {f"noisy_{s:g}": noisy_oracle(true, s, noise_seed + i)
             for i, s in enumerate(sigmas) if s > 0}
    first = next(iter(extra)) if extra else None
    if first is None:
        return simulate_predictions(true, oracle(true), prompt_len, cfg, seeds,
                                    name="exact", **kwargs)
    main = extra.pop(first)
    return simulate_predictions(true, main, prompt_len, cfg, seeds, name=first,
                                extra_predictors=extra, **kwargs)

