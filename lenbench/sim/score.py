"""The scheduling score S = min(mean(gain), mean(oracle gain)) / mean(oracle gain), and when it
is given.

The score is a share of what SJF on the true lengths gains over the FCFS baseline. That oracle is
not the best order on a given draw: once requests arrive over time no fixed order is optimal on
every draw, and a key that coarsens the true lengths (ties among the long requests) can match or
beat it by chance, the more so when many lengths are tied at a generation cap. So a row's mean
gain counts only up to the oracle's mean gain on the same draws (`capped`), which makes the
oracle a ceiling by construction: no row scores above 1, the oracle scores exactly 1 and a
constant exactly 0. A row whose gain reaches the oracle's is recorded as such ("capped", with
the ratio it would have had in "uncapped"), and its interval keeps its lower end, so a row that
ties the oracle shows how far below it the draws allow. The cap is on the means, not seed by
seed: on a draw where the oracle loses, a per-seed cap would charge every row the oracle's loss.
The comparison rows (preemptive SRPT on true lengths may beat the non-preemptive oracle) are
scored without the cap.

A share of a gain only means something when there is a gain to share: the score is given only
when the oracle's mean gain over the simulator seeds is positive and, with two seeds or more, at
least MIN_GAIN_SE (2) standard errors of that mean (the seeds' standard deviation / sqrt(n)).
The gain's size against the baseline's figure does not decide: a figure over all requests holds
the decoding time no queue order changes, so a clear gain can be 1% of it. Otherwise the value is
None and "reason" says why, e.g. "no oracle gain: -3.1% of baseline" or "oracle gain +0.2% of
baseline, within 2 standard errors of 0 over 8 simulator seeds". What is left of the
denominator's noise shows in the score's interval (delta method).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lenbench.sim.metrics import ratio_interval

# How many standard errors (over simulator seeds) the oracle's mean gain must clear.
MIN_GAIN_SE = 2.0


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
    if gain.size >= 2:
        se = float(gain.std(ddof=1)) / math.sqrt(gain.size)
        if float(gain.mean()) < MIN_GAIN_SE * se:
            return (f"oracle gain {100 * share:+.1f}% of baseline, within {MIN_GAIN_SE:g} "
                    f"standard errors of 0 over {gain.size} simulator seeds")
    return None


def score_interval(gain: ArrayLike, oracle_gain: ArrayLike, baseline: ArrayLike, *,
                   capped: bool = False) -> dict[str, float | str | bool | None]:
    """The score mean(gain) / mean(oracle_gain) with its 95% interval (`ratio_interval`) and
    "reason" (None when the score is given; see `oracle_gain_problem`).

    `gain` = baseline - row and `oracle_gain` = baseline - oracle per seed (1-D over simulator
    seeds, or predictor seeds x simulator seeds); `baseline` per simulator seed. With `capped`
    (the headline score) the value is at most 1 and so are both ends of the interval;
    "uncapped" holds the plain ratio and "capped" whether the cap bound.
    """
    out: dict[str, float | str | bool | None] = dict(ratio_interval(gain, oracle_gain))
    if capped:
        value = out["value"]
        out["uncapped"] = value
        out["capped"] = bool(value is not None and value > 1)
        for key in ("value", "ci95_low", "ci95_high"):
            if out[key] is not None:
                out[key] = min(float(out[key]), 1.0)
    best = np.asarray(oracle_gain, dtype=np.float64)
    per_sim = best.mean(axis=0) if best.ndim == 2 else best
    reason = oracle_gain_problem(per_sim, baseline)
    if reason is not None:
        out.update(value=None, ci95_low=None, ci95_high=None)
        if capped:
            out.update(uncapped=None, capped=False)
    out["reason"] = reason
    return out


def capped_gains(gain: ArrayLike, oracle_gain: ArrayLike) -> NDArray[np.float64]:
    """A row's gains per simulator seed (its mean over predictor seeds when 2-D) as the capped
    score reads them: the oracle's own gains where the row's mean gain exceeds the oracle's
    (the score then is the oracle's, 1), its own otherwise."""
    g = np.asarray(gain, dtype=np.float64)
    g = g.mean(axis=0) if g.ndim == 2 else g
    best = np.broadcast_to(np.asarray(oracle_gain, dtype=np.float64), g.shape)
    keep = np.isfinite(g) & np.isfinite(best)
    if keep.any() and float(g[keep].mean()) > float(best[keep].mean()):
        return best.copy()
    return g


def paired_score_difference(gain_a: ArrayLike, gain_b: ArrayLike, oracle_gain: ArrayLike,
                            baseline: ArrayLike) -> dict[str, float | str | None]:
    """Capped score of row a minus capped score of row b on the same draws, with the score's
    95% interval on the paired per-seed differences (the draws are shared, so what they share
    cancels). `gain_*` per simulator seed, or predictor seeds x simulator seeds (compared by
    their means over runs); `oracle_gain` per simulator seed. A row whose gain exceeds the
    oracle's counts as the oracle (`capped_gains`), as its score does."""
    best = np.asarray(oracle_gain, dtype=np.float64)
    per_sim = best.mean(axis=0) if best.ndim == 2 else best
    a, b = capped_gains(gain_a, per_sim), capped_gains(gain_b, per_sim)
    out: dict[str, float | str | None] = dict(ratio_interval(a - b, per_sim))
    reason = oracle_gain_problem(per_sim, baseline)
    if reason is not None:
        out.update(value=None, ci95_low=None, ci95_high=None)
    out["reason"] = reason
    return out
