"""A result's scheduling block, from a predictor's test predictions: at run time, or again later.

The simulator reads nothing of a predictor but its test predictions (and, for the comparison
rows, its dynamic estimates and predicted distributions): the rows' true lengths, censored
flags and prompt lengths fix the traffic, the sim config fixes the cluster and the draws. So the
scheduling block of a result can be recomputed from what the result stores, when the scoring
rule changes, without refitting the predictor (`rescore_scheduling`). Results store the prompt
lengths from the protocol that made the score's ceiling the oracle; for older ones the caller
supplies them from the world's labels (`python -m lenbench.rescore_scheduling`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lenbench.sim.alpha_sweep import score_by_alpha
from lenbench.sim.comparison import compare_policies
from lenbench.sim.config import SCORE_METRICS, SimConfig
from lenbench.sim.evaluate import REFERENCE_ROWS, simulate_predictions
from lenbench.sim.sweep import load_curves

__all__ = ["PROTOCOL_SETTINGS", "predictor_row", "protocol_settings", "rescorable_config",
           "rescore_scheduling", "scheduling_record"]


def predictor_row(name: str) -> str:
    """The row name of a predictor in its scheduling block (never a reference row's)."""
    return name if name not in REFERENCE_ROWS else f"{name} (predictor)"


def scheduling_record(true: ArrayLike, pred: ArrayLike, prompt_len: ArrayLike, name: str,
                      cfg: SimConfig, *, censored: ArrayLike | None = None,
                      remaining: tuple[ArrayLike, ArrayLike, ArrayLike] | None = None,
                      quantiles: ArrayLike | None = None) -> dict[str, Any]:
    """The scheduling block of one predictor's result: `simulate_predictions` (the headline
    score and its reference rows), "by_alpha" (`score_by_alpha`, when cfg.score_alphas is set)
    and, with cfg.compare, "comparison" (`compare_policies`; `remaining` = (step_row, step_t,
    rem) dynamic estimates, `quantiles` at QUANTILE_LEVELS), all on the same draws."""
    row = predictor_row(name)
    pred = np.maximum(np.asarray(pred, dtype=np.float64), 1.0)
    sweep = None
    if cfg.sweep_loads:
        sweep = load_curves(true, pred, prompt_len, cfg, name=row, censored=censored)
        if cfg.headline_min_gain is not None:  # the headline at the load the rule picks
            load = sweep["headline_load"] or cfg.sweep_loads[-1]
            cfg = cfg.replace(load_factor=float(load), qps=None)
    out = simulate_predictions(true, pred, prompt_len, cfg, name=row, censored=censored)
    if sweep is not None:
        out["sweep"] = sweep
    if cfg.score_alphas:
        out["by_alpha"] = score_by_alpha(true, pred, prompt_len, cfg, name=row, reference=out,
                                         censored=censored)
    if cfg.compare:
        out["comparison"] = compare_policies(true, pred, prompt_len, cfg, name=row,
                                             reference=out, remaining=remaining,
                                             quantiles=quantiles)
    if sweep is not None and cfg.headline_min_gain is not None and sweep["headline_load"] is None:
        withhold_scores(out, no_queueing_reason(sweep, cfg.headline_min_gain))
    return out


def no_queueing_reason(sweep: Mapping[str, Any], min_gain: float) -> str:
    """Why a record carries no score: no load of its sweep gives the oracle a real gain."""
    gains = [g for g in sweep["oracle_gain"] if g is not None]
    best = f"; at most {100 * max(gains):.1f}%" if gains else ""
    loads = sweep["loads"]
    return (f"no load from {loads[0]:g} to {loads[-1]:g} times the saturation rate gives the "
            f"oracle a gain of {100 * min_gain:g}% of FCFS's mean latency{best}: prediction "
            "hardly changes latency in this setting")


def withhold_scores(record: dict[str, Any], reason: str) -> None:
    """Blank every score of a scheduling record (headline, rows, aging weights), giving
    `reason`: a share of a gain that does not matter is not published."""
    blank = {"value": None, "ci95_low": None, "ci95_high": None, "reason": reason}
    for entry in record.get("rows", {}).values():
        for score in (entry.get("score") or {}).values():
            score.update(blank)
    for head in record.get("headline", []):
        if "score" in head:
            head.update(score=None, score_ci95=None, score_reason=reason)
    for entry in (record.get("by_alpha") or {}).get("entries", []):
        for row in entry["rows"].values():
            if "score" in row:
                row["score"].update(blank)
    record["score_withheld"] = reason


def rescorable_config(record: Mapping[str, Any]) -> dict[str, Any]:
    """The sim config of a scheduling block that can be recomputed from stored predictions;
    ValueError (one line naming the field) for one that cannot."""
    config = dict(record.get("config") or {})
    if not config:
        raise ValueError("scheduling.config: missing; the record cannot be rescored")
    if config.get("compare"):
        raise ValueError("scheduling.config.compare: the comparison rows need the predictor's "
                         "dynamic estimates, which a result does not store; rerun the predictor")
    return config


# The settings the scheduling protocol fixes: the headline's policy and guard, its latency
# figure, the load rule and the sweep. A rescored record takes them from today's preset; its
# cluster, simulator seeds, draws and classes stay its own.
PROTOCOL_SETTINGS = ("starvation", "aging_alpha", "t_starve_s", "score_metric", "score_alphas",
                     "sweep_loads", "sweep_seeds", "sweep_noisy_c", "headline_min_gain")


def protocol_settings(cfg: SimConfig) -> dict[str, Any]:
    """`cfg`'s PROTOCOL_SETTINGS, as a rescore applies them."""
    return {key: value for key, value in cfg.to_dict().items() if key in PROTOCOL_SETTINGS}


def rescore_scheduling(record: Mapping[str, Any], name: str, true: ArrayLike, pred: ArrayLike,
                       prompt_len: ArrayLike, censored: ArrayLike | None, *,
                       score_alphas: Sequence[float] | None = None,
                       score_metric: str = SCORE_METRICS[0],
                       protocol: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """`record` (a result's scheduling block) recomputed under today's score from the stored
    test predictions: the same sim config and simulator seeds, so the same draws, with
    `score_metric` (default: the protocol's) and, when the record has none, `score_alphas`;
    `protocol` (`protocol_settings` of today's preset) replaces those settings of the record.

    A record with a comparison (sim.compare) is refused: its dynamic estimates are not stored.
    """
    config = rescorable_config(record)
    config["score_metric"] = score_metric
    if not config.get("score_alphas") and score_alphas is not None:
        config["score_alphas"] = [float(a) for a in score_alphas]
    config.update(protocol or {})
    cfg = SimConfig.from_dict(config)
    return scheduling_record(true, pred, prompt_len, name, cfg, censored=censored)
