"""Add the median decoding to stored results of distribution predictors, from their quantiles.

    python -m lenbench.results.add_median leaderboard/results [more folders or files]

    python -m lenbench.results.add_median DIR --dry-run

A distribution predictor (a 50-bin classifier, a quantile head) is scored by its point
prediction (`predict`, often the distribution's argmax or mean); the median of its predicted
distribution is the point that minimises the absolute error, and a run now scores it as the
variant "median" (`lenbench.evaluate`). A result written before that stores the distribution's
quantiles at QUANTILE_LEVELS, clipped to [1, cap] as scored, and so its median: this tool scores
that column exactly as a run scores a variant (the result's bootstrap settings and seed, its
censored rows and cap) and writes it into `metrics.variants.median`, with nothing run again. A
file that already has the variant, has no stored quantiles, or whose median is its point
prediction is left as it is. Each file's MAE is printed beside the point prediction's.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from lenbench.results.model import MEDIAN_VARIANT, Predictions
from lenbench.results.provenance import utc_now
from lenbench.results.rescore import stored_bootstrap
from lenbench.results.store import add_to_results
from lenbench.scoring.metrics import static_metrics

log = logging.getLogger("lenbench.results.add_median")


def median_variant(result: dict[str, Any]) -> dict[str, Any] | None:
    """The figures of a result's median decoding, scored as a run scores a variant, or None
    where the file cannot or need not have them."""
    metrics = result.get("metrics") or {}
    stored = result.get("predictions")
    if result.get("kind") != "predictor" or MEDIAN_VARIANT in (metrics.get("variants") or {}) \
            or not isinstance(stored, dict) or metrics.get("static") is None:
        return None
    preds = Predictions.from_mapping(stored)
    median = None if preds is None else preds.decoded(MEDIAN_VARIANT)
    if median is None or preds.prompt_id is None:
        return None
    values = np.asarray(median.pred, dtype=np.float64)
    if np.array_equal(values, np.asarray(preds.pred, dtype=np.float64)):
        return None
    n_boot, ci, seed = stored_bootstrap(result)
    cap = metrics["static"].get("length_cap")
    figures = static_metrics(np.asarray(preds.true), values, np.asarray(preds.prompt_id),
                             n_boot=n_boot, seed=seed, ci=ci,
                             censored=np.asarray(preds.censored or [False] * len(values),
                                                 dtype=bool), cap=cap)
    # the stored quantiles were clipped to [1, cap] already: nothing left to clip
    return {**figures, "n_clipped_low": 0, "n_clipped_high": 0, "length_cap": cap}


def add_median(result: dict[str, Any], figures: dict[str, Any]) -> dict[str, Any]:
    """A copy of `result` with the median variant's figures and predictions, and a note of
    when and from what they were added."""
    new = json.loads(json.dumps(result))
    new["metrics"].setdefault("variants", {})[MEDIAN_VARIANT] = figures
    preds = Predictions.from_mapping(new["predictions"])
    new["predictions"].setdefault("variants", {})[MEDIAN_VARIANT] = list(
        preds.decoded(MEDIAN_VARIANT).pred)
    new.setdefault("rescored", {})["variants"] = {
        "at": utc_now(), "added": [MEDIAN_VARIANT],
        "from": "predictions.quantiles at level 0.5 (the predicted distribution's median)"}
    return new


def main(argv: Sequence[str] | None = None) -> int:
    dry_run = "--dry-run" in (sys.argv[1:] if argv is None else argv)

    def change(result: dict) -> tuple[dict, str] | None:
        figures = median_variant(result)
        if figures is None:
            return None
        return add_median(result, figures), (
            f"{result['predictor']['name']} MAE {result['metrics']['static']['mae']:.1f}, "
            f"its median {figures['mae']:.1f}")

    added = add_to_results(argv, "python -m lenbench.results.add_median",
                           "Add the median decoding (metrics.variants.median) to result files "
                           "of distribution predictors, from their stored quantiles, in place.",
                           change)
    log.info("%d file(s) %s the median decoding", added, "would get" if dry_run else "got")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
