"""Score a predictor by what it does to serving: the entry point of the evaluation pipeline.

Every predictor is compared on the same drawn traffic (same rows, same arrivals per seed)
against reference rows: the prediction-free baseline policy, the oracle and a constant
predictor, so that "how much of the oracle's gain does it capture" is a paired, seeded number.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lenbench.sim.capacity import resolve_qps
from lenbench.sim.config import SimConfig
from lenbench.sim.engine import simulate
from lenbench.sim.metrics import (
    aggregate,
    captured_share,
    class_masks,
    kendall_tau,
    run_figures,
)
from lenbench.sim.predictors import constant, noisy_oracle, oracle
from lenbench.sim.timing import TimeModel, get_time_model
from lenbench.sim.workload import Workload, draw_rows

REFERENCE_ROWS = ("baseline", "oracle", "constant")
SHARE_METRICS = ("e2e_p99_short", "e2e_p90_short", "e2e_mean_all")
HEADLINE_METRIC = "e2e_p99_short"


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
) -> dict[str, Any]:
    """Simulate serving with a predictor's predictions and the reference rows; return figures.

    Inputs are aligned per-row arrays, typically a predictor's test set: `true_len` (output
    tokens, >= 1), `pred_len` (the predictor's output, finite) and `prompt_len` (array or one
    int). `cfg` defaults to SimConfig(), which is the outlets_paper preset; for the toy world
    use conf/sim/default.yaml (`SimConfig.from_dict(OmegaConf.to_container(cfg.sim))`).
    `seeds` defaults to cfg.seeds.
    For each seed, `cfg.n_requests` rows are drawn with replacement and given arrivals at
    `cfg.qps` or at `cfg.load_factor` times the estimated saturation rate (capacity.py); the
    same draw serves every row below, so comparisons are paired.

    Rows (keys of result["rows"]):
      - "baseline": cfg.baseline_policy (default rr+fcfs), which ignores predictions;
      - `name`: the given predictions under cfg.policy (default lb+sjf);
      - "oracle": true lengths under cfg.policy (the upper bound);
      - "constant": one value for all (default the mean true length) under cfg.policy,
        i.e. the policy with no length information;
      - any `extra_predictors` (name -> predictions aligned with the rows), e.g. noisy oracles.

    Each row holds:
      - "figures": every figure of `metrics.run_figures` (e.g. "e2e_p99_short",
        "e2e_p99_long", "throughput_tok_s", "queue_delay_p99_short", "hol_inversion_rate";
        seconds and tokens/s) aggregated over seeds as {"mean", "ci95_low", "ci95_high",
        "n", "per_seed"};
      - "captured_share" (not for baseline): (baseline - row) / (baseline - oracle) for the
        SHARE_METRICS, computed per seed (paired) and aggregated, plus "of_means" from the
        seed means; 1 = the oracle's gain, 0 = none, negative = harm; None if undefined;
      - "price_of_misprediction": row / oracle for HEADLINE_METRIC (seed means);
      - "quality": Kendall tau and MAE of the row's predictions against `true_len`;
      - "e2e_quantiles": `quantile_points` evenly spaced quantiles of end-to-end latency per
        class (all/short/long), pooled over seeds, for CDF plots without per-request data.

    The result also carries "headline" (one flat dict per row for a leaderboard table),
    "qps", "saturation_qps", "load_factor" (qps / saturation), "seeds", "policy",
    "baseline_policy", "short_threshold"/"long_threshold" (resolved to tokens), "time_model",
    "config" (cfg.to_dict()) and "wall_s". All values are
    JSON-serialisable (undefined numbers are None).
    """
    cfg = cfg or SimConfig()
    seeds = tuple(cfg.seeds if seeds is None else seeds)
    if not seeds:
        raise ValueError("need at least one seed")
    true = np.asarray(true_len, dtype=np.int64)
    if true.ndim != 1 or len(true) == 0:
        raise ValueError("true_len must be a non-empty 1-D array")
    prompt = np.broadcast_to(np.asarray(prompt_len, dtype=np.int64), true.shape)
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
    policy_of = {row: (cfg.dispatch, cfg.queue) for row in row_names}
    policy_of["baseline"] = (cfg.baseline_dispatch, cfg.baseline_queue)
    pred_of = dict(predictions, baseline=predictions["constant"])
    short_thr, long_thr = cfg.thresholds(true)

    started = time.perf_counter()
    per_seed: dict[str, list[dict[str, float | None]]] = {row: [] for row in row_names}
    e2e_pool: dict[str, dict[str, list[np.ndarray]]] = {
        row: {"all": [], "short": [], "long": []} for row in row_names}
    for seed in seeds:
        idx, arrivals = draw_rows(len(true), cfg.n_requests, qps, seed, cfg.arrival_cv)
        masks = class_masks(true[idx], short_thr, long_thr)
        for row in row_names:
            wl = Workload(arrivals, prompt[idx], true[idx], pred_of[row][idx])
            dispatch, queue = policy_of[row]
            res = simulate(wl, cfg, time_model=model, dispatch=dispatch, queue=queue, seed=seed)
            per_seed[row].append(run_figures(res, short_thr, long_thr))
            e2e = res.done_s - wl.arrival_s
            for cls, mask in masks.items():
                e2e_pool[row][cls].append(e2e[mask])

    levels = np.linspace(0.0, 1.0, quantile_points) if quantile_points > 1 else None
    rows: dict[str, dict[str, Any]] = {}
    for row in row_names:
        figs = {key: aggregate([f[key] for f in per_seed[row]]) for key in per_seed[row][0]}
        entry: dict[str, Any] = {
            "policy": "+".join(policy_of[row]),
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

    for row in row_names:
        if row == "baseline":
            continue
        shares: dict[str, Any] = {}
        for metric in SHARE_METRICS:
            paired = [captured_share(b[metric], r[metric], o[metric]) for b, r, o in
                      zip(per_seed["baseline"], per_seed[row], per_seed["oracle"])]
            shares[metric] = aggregate(paired)
            shares[metric]["of_means"] = captured_share(
                rows["baseline"]["figures"][metric]["mean"], rows[row]["figures"][metric]["mean"],
                rows["oracle"]["figures"][metric]["mean"])
        rows[row]["captured_share"] = shares
        num = rows[row]["figures"][HEADLINE_METRIC]["mean"]
        den = rows["oracle"]["figures"][HEADLINE_METRIC]["mean"]
        rows[row]["price_of_misprediction"] = (num / den if num is not None and den else None)

    return {
        "policy": cfg.policy,
        "baseline_policy": cfg.baseline_policy,
        "qps": qps,
        "saturation_qps": sat,
        "load_factor": qps / sat,
        "n_requests": cfg.n_requests,
        "seeds": list(seeds),
        "short_threshold": short_thr,
        "long_threshold": long_thr,
        "time_model": getattr(model, "name", type(model).__name__),
        "config": cfg.to_dict(),
        "rows": rows,
        "headline": [_headline(row, rows[row]) for row in row_names],
        "wall_s": time.perf_counter() - started,
    }


def _quality(pred: np.ndarray, true: np.ndarray) -> dict[str, float | None]:
    return {"kendall_tau": kendall_tau(pred, true),
            "mae": float(np.mean(np.abs(pred - true)))}


def _quantiles(values: np.ndarray, levels: np.ndarray) -> list[float] | None:
    values = values[~np.isnan(values)]
    return np.quantile(values, levels).tolist() if values.size else None


def _headline(row: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """One flat leaderboard row: means and intervals of the figures that matter most."""
    figs = entry["figures"]
    out: dict[str, Any] = {"row": row, "policy": entry["policy"]}
    for key in ("e2e_p99_short", "e2e_p99_long", "e2e_mean_all", "throughput_tok_s",
                "hol_inversion_rate"):
        out[key] = figs[key]["mean"]
        out[f"{key}_ci95"] = [figs[key]["ci95_low"], figs[key]["ci95_high"]]
    share = entry.get("captured_share", {}).get(HEADLINE_METRIC)
    out["captured_share"] = None if share is None else share["of_means"]
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

