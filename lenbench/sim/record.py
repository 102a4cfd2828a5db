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

__all__ = ["predictor_row", "rescorable_config", "rescore_scheduling", "scheduling_record"]


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
    out = simulate_predictions(true, pred, prompt_len, cfg, name=row, censored=censored)
    if cfg.score_alphas:
        out["by_alpha"] = score_by_alpha(true, pred, prompt_len, cfg, name=row, reference=out,
                                         censored=censored)
    if cfg.compare:
        out["comparison"] = compare_policies(true, pred, prompt_len, cfg, name=row,
                                             reference=out, remaining=remaining,
                                             quantiles=quantiles)
    return out


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


def rescore_scheduling(record: Mapping[str, Any], name: str, true: ArrayLike, pred: ArrayLike,
                       prompt_len: ArrayLike, censored: ArrayLike | None, *,
                       score_alphas: Sequence[float] | None = None,
                       score_metric: str = SCORE_METRICS[0]) -> dict[str, Any]:
    """`record` (a result's scheduling block) recomputed under today's score from the stored
    test predictions: the same sim config and simulator seeds, so the same draws, with
    `score_metric` (default: the protocol's) and, when the record has none, `score_alphas`.

    A record with a comparison (sim.compare) is refused: its dynamic estimates are not stored.
    """
    config = rescorable_config(record)
    config["score_metric"] = score_metric
    if not config.get("score_alphas") and score_alphas is not None:
        config["score_alphas"] = [float(a) for a in score_alphas]
    cfg = SimConfig.from_dict(config)
    return scheduling_record(true, pred, prompt_len, name, cfg, censored=censored)
