"""Prediction hygiene: what the harness does with a predictor's raw numbers before scoring them.

A non-finite prediction is a bug in the predictor, not a large error, so it fails the run with a
message naming the predictor and the count (scoring the finite rest would rank it on other rows).
Values outside what the protocol allows are clipped and counted, so the table can say how often
a predictor needed it: a total length is at least 1 token and at most the length cap (the
generation cap, or an imported trace's cap); a remaining length at step t is at least 1 and at
most cap - t.
"""

from __future__ import annotations

import numpy as np


class NonFinitePredictions(ValueError):
    """A predictor returned NaN or infinity."""


def clean_predictions(values: np.ndarray, name: str, method: str,
                      upper: float | np.ndarray | None) -> tuple[np.ndarray, dict[str, int]]:
    """Clip `values` to [1, upper]; raise `NonFinitePredictions` if any is NaN or infinite.

    Returns the clipped values and the counts {"n_clipped_low", "n_clipped_high"}.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    bad = ~np.isfinite(values)
    if bad.any():
        raise NonFinitePredictions(
            f"{name}.{method} returned {int(bad.sum())} non-finite values (NaN or inf) among "
            f"{values.size}; fix the predictor (no row is scored when any prediction is missing)")
    high = np.inf if upper is None else np.maximum(np.asarray(upper, dtype=np.float64), 1.0)
    counts = {"n_clipped_low": int((values < 1).sum()),
              "n_clipped_high": int((values > high).sum())}
    return np.clip(values, 1.0, high), counts
