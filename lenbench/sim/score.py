"""The scheduling score S = mean(baseline - row) / mean(baseline - oracle), and when it is given.

A share of the oracle's gain only means something when there is a gain to share. If the oracle
is no faster than the baseline, the ratio flips sign (a predictor that harms would score above
0); if the oracle's gain is near zero, the ratio divides noise by almost nothing. So the score is
given only when the oracle's mean gain (over simulator seeds) is at least MIN_ORACLE_GAIN (2%)
of the baseline's mean figure. Otherwise the value is None and "reason" says why, e.g. "no
oracle gain: -3.1% of baseline" or "oracle gain 0.4% of baseline < 2%". What is left of the
denominator's noise shows in the score's interval (delta method).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from lenbench.sim.metrics import MIN_ORACLE_GAIN, ratio_interval


def oracle_gain_problem(oracle_gain: ArrayLike, baseline: ArrayLike) -> str | None:
    """Why no score can be given on these per-simulator-seed oracle gains (baseline - oracle)
    and baseline figures, in a few words; None when the oracle's gain is clear (module doc)."""
    gain = np.asarray(oracle_gain, dtype=np.float64)
    base = np.broadcast_to(np.asarray(baseline, dtype=np.float64), gain.shape)
    keep = np.isfinite(gain) & np.isfinite(base)
    gain, base = gain[keep], base[keep]
    if gain.size == 0:
        return "no simulator seed with finite figures"
    scale = abs(float(base.mean()))
    if scale == 0:
        return "baseline figure is 0"
    share = float(gain.mean()) / scale
    if share <= 0:
        return f"no oracle gain: {100 * share:+.1f}% of baseline"
    if share < MIN_ORACLE_GAIN:
        return f"oracle gain {100 * share:.1f}% of baseline < {100 * MIN_ORACLE_GAIN:g}%"
    return None


def score_interval(gain: ArrayLike, oracle_gain: ArrayLike, baseline: ArrayLike
                   ) -> dict[str, float | str | None]:
    """The score mean(gain) / mean(oracle_gain) with its 95% interval (`ratio_interval`) and
    "reason" (None when the score is given; see `oracle_gain_problem`).

    `gain` = baseline - row and `oracle_gain` = baseline - oracle per seed (1-D over simulator
    seeds, or predictor seeds x simulator seeds); `baseline` per simulator seed.
    """
    out: dict[str, float | str | None] = dict(ratio_interval(gain, oracle_gain))
    best = np.asarray(oracle_gain, dtype=np.float64)
    per_sim = best.mean(axis=0) if best.ndim == 2 else best
    reason = oracle_gain_problem(per_sim, baseline)
    if reason is not None:
        out.update(value=None, ci95_low=None, ci95_high=None)
    out["reason"] = reason
    return out
