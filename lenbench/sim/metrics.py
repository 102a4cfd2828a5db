"""Scheduling metrics of a run and their aggregation over seeds.

`run_figures` flattens one run into named numbers such as `e2e_p99_short` so that rows of a
leaderboard table, captured shares and seed aggregates all address figures the same way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lenbench.sim.result import SimResult

METRICS = ("e2e", "ttft", "queue_delay", "tpot", "norm_latency")
STATS = ("p50", "p90", "p99", "mean")
CLASSES = ("all", "short", "long", "capped")
# A share of the oracle's gain is given only when the oracle gains at least this share of the
# baseline's figure (score.py).
MIN_ORACLE_GAIN = 0.02

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom.
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def request_metrics(res: SimResult) -> dict[str, NDArray[np.float64]]:
    """Per-request latencies in seconds (TPOT per output token after the first; NaN where
    undefined, e.g. queue delay and TPOT of one-token answers)."""
    wl = res.workload
    true = wl.true_len.astype(np.float64)
    e2e = res.done_s - wl.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(true > 1, (res.done_s - res.first_token_s) / (true - 1), np.nan)
    return {
        "e2e": e2e,
        "ttft": res.first_token_s - wl.arrival_s,
        "queue_delay": res.admit_s - res.kv_ready_s,
        "tpot": tpot,
        "norm_latency": e2e / true,
    }


def class_masks(true_len: ArrayLike, short_threshold: float, long_threshold: float,
                censored: ArrayLike | None = None) -> dict[str, NDArray[np.bool_]]:
    """all; short = true < short_threshold (OUTLETS: 800); long = true >= long_threshold among
    the requests that ended before the length cap; capped = those cut at the cap (`censored`).

    A request cut at the cap has a lower bound for a length, and with many of them the top of
    the length distribution is one tied value: a long class that took them in would be the
    capped share, not the long tail, so they are a class of their own."""
    true = np.asarray(true_len)
    cut = np.zeros(true.shape, dtype=bool) if censored is None else \
        np.asarray(censored, dtype=bool)
    return {"all": np.ones(true.shape, dtype=bool), "short": true < short_threshold,
            "long": (true >= long_threshold) & ~cut, "capped": cut}


def _stats(values: NDArray[np.float64]) -> dict[str, float | None]:
    v = values[~np.isnan(values)]
    if v.size == 0:
        return dict.fromkeys(STATS)
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(v.mean())}


def throughput(res: SimResult) -> float:
    """Output tokens per second over the run: sum of tokens / (last done - first arrival)."""
    span = float(res.done_s.max() - res.workload.arrival_s.min())
    return float(res.generated.sum()) / span if span > 0 else float("nan")


def hol_inversion_rate(res: SimResult, max_pairs_per_chunk: int = 2_000_000) -> float | None:
    """Among pairs of requests that waited together in one decode queue (their waiting
    intervals overlap), the share in which the one with the longer true length was admitted
    first. Pairs of equal length are skipped; None when no pair waited together."""
    true = res.workload.true_len
    waited = (res.instance >= 0) & (res.admit_s > res.kv_ready_s)
    inversions = 0
    pairs = 0
    for inst in np.unique(res.instance[waited]):
        sel = np.flatnonzero(waited & (res.instance == inst))
        order = np.argsort(res.kv_ready_s[sel], kind="stable")
        sel = sel[order]
        arrive = res.kv_ready_s[sel]
        admit = res.admit_s[sel]
        seq = res.admit_seq[sel]
        length = true[sel]
        # j > i (arrived no earlier) waited together with i iff j arrived before i left.
        hi = np.searchsorted(arrive, admit, side="left")
        counts = np.maximum(hi - np.arange(len(sel)) - 1, 0)
        start = 0
        while start < len(sel):
            stop = start + 1
            total = counts[start]
            while stop < len(sel) and total + counts[stop] <= max_pairs_per_chunk:
                total += counts[stop]
                stop += 1
            idx = np.arange(start, stop)
            c = counts[start:stop]
            ii = np.repeat(idx, c)
            offsets = np.arange(int(c.sum())) - np.repeat(np.cumsum(c) - c, c)
            jj = ii + 1 + offsets
            li, lj = length[ii], length[jj]
            differ = li != lj
            i_first = seq[ii] < seq[jj]
            longer_first = np.where(i_first, li > lj, lj > li)
            pairs += int(differ.sum())
            inversions += int((differ & longer_first).sum())
            start = stop
    return inversions / pairs if pairs else None


def run_figures(res: SimResult, short_threshold: float = 800, long_threshold: float = 1536
                ) -> dict[str, float | None]:
    """Flat named figures of one run: `{metric}_{stat}_{class}` for every metric, statistic
    and class (classes by `class_masks`, the capped ones from `workload.censored`), plus
    throughput_tok_s, makespan_s, hol_inversion_rate and class sizes."""
    per_req = request_metrics(res)
    masks = class_masks(res.workload.true_len, short_threshold, long_threshold,
                        res.workload.censored)
    out: dict[str, float | None] = {}
    for metric, values in per_req.items():
        for cls, mask in masks.items():
            for stat, value in _stats(values[mask]).items():
                out[f"{metric}_{stat}_{cls}"] = value
    out["throughput_tok_s"] = throughput(res)
    out["makespan_s"] = float(res.done_s.max() - res.workload.arrival_s.min())
    out["hol_inversion_rate"] = hol_inversion_rate(res)
    out["n_requests"] = float(len(res.done_s))
    out["n_short"] = float(masks["short"].sum())
    out["n_long"] = float(masks["long"].sum())
    out["n_capped"] = float(masks["capped"].sum())
    return out


def t_quantile_975(df: int) -> float:
    """Two-sided 95% Student-t quantile (table to 30 degrees of freedom, then Cornish-Fisher)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def aggregate(values: Sequence[float | None]) -> dict[str, float | list[float | None] | None]:
    """Mean over seeds with a t-based 95% interval; None entries (undefined figures) are
    dropped from the statistics but kept in `per_seed`."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    n = len(finite)
    out: dict[str, float | list[float | None] | None] = {
        "mean": None, "ci95_low": None, "ci95_high": None, "n": float(n),
        "per_seed": [None if v is None or not math.isfinite(v) else float(v) for v in values],
    }
    if n == 0:
        return out
    mean = float(np.mean(finite))
    out["mean"] = mean
    if n >= 2:
        half = t_quantile_975(n - 1) * float(np.std(finite, ddof=1)) / math.sqrt(n)
        out["ci95_low"], out["ci95_high"] = mean - half, mean + half
    return out


def ratio_interval(num: ArrayLike, den: ArrayLike, *, min_den: float = 0.0
                   ) -> dict[str, float | None]:
    """mean(num) / mean(den) with a 95% Student-t interval by the delta method.

    `num` and `den` are per-seed paired quantities: 1-D over simulator seeds, or 2-D
    (predictor seeds x simulator seeds; `den` may be 1-D over simulator seeds and is then shared
    by every predictor seed). Simulator seeds with a non-finite entry are dropped. With
    R = mean(num) / mean(den), the linearised contributions e = (num - R * den) / mean(den)
    give the variance of R: var over simulator seeds of their means over predictor seeds / S,
    plus, with several predictor seeds, var over predictor seeds of their means over simulator
    seeds / P (a conservative two-way sum), with Welch-Satterthwaite degrees of freedom.
    num == 0 gives exactly 0 and num == den exactly 1, with zero width. Value None when
    |mean(den)| <= min_den (no gain to share); bounds None with fewer than two seeds.
    """
    n = np.atleast_2d(np.asarray(num, dtype=np.float64))
    d = np.broadcast_to(np.atleast_2d(np.asarray(den, dtype=np.float64)), n.shape)
    keep = np.isfinite(n).all(axis=0) & np.isfinite(d).all(axis=0)
    n, d = n[:, keep], d[:, keep]
    n_pred, n_sim = n.shape
    out: dict[str, float | None] = {"value": None, "ci95_low": None, "ci95_high": None,
                                    "n_sim_seeds": float(n_sim), "n_pred_seeds": float(n_pred)}
    if n_sim == 0:
        return out
    mean_den = float(d.mean())
    if not abs(mean_den) > min_den:
        return out
    ratio = float(n.mean()) / mean_den
    out["value"] = ratio
    e = (n - ratio * d) / mean_den
    parts = []  # (variance of the mean, degrees of freedom)
    if n_sim >= 2:
        parts.append((float(np.var(e.mean(axis=0), ddof=1)) / n_sim, n_sim - 1))
    if n_pred >= 2:
        parts.append((float(np.var(e.mean(axis=1), ddof=1)) / n_pred, n_pred - 1))
    if not parts:
        return out
    var = sum(v for v, _ in parts)
    if var > 0:
        df = var**2 / sum(v**2 / k for v, k in parts)
        half = t_quantile_975(max(1, math.floor(df))) * math.sqrt(var)
    else:
        half = 0.0
    out["ci95_low"], out["ci95_high"] = ratio - half, ratio + half
    return out


def captured_share(fcfs: float | None, pred: float | None, oracle: float | None
                   ) -> float | None:
    """(FCFS - pred) / (FCFS - oracle): 1 = all of the oracle's gain, 0 = none, < 0 = harm.
    None unless the oracle gains at least MIN_ORACLE_GAIN of the baseline (a smaller gain makes
    the share noise, a loss flips its sign). One seed's share; `simulate_predictions` scores
    seed means with `score.score_interval`."""
    if fcfs is None or pred is None or oracle is None:
        return None
    gain = fcfs - oracle
    if not math.isfinite(gain) or gain < MIN_ORACLE_GAIN * abs(fcfs) or gain <= 0:
        return None
    return (fcfs - pred) / gain


def kendall_tau(x: ArrayLike, y: ArrayLike, max_n: int = 4000, seed: int = 0) -> float | None:
    """Kendall tau-b of predictions against truth. Uses scipy when installed; otherwise an
    O(n^2) numpy version on a seeded subsample of at most `max_n` rows."""
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of one length")
    if len(a) < 2:
        return None
    try:
        from scipy.stats import kendalltau
    except ImportError:
        kendalltau = None
    if kendalltau is not None:
        tau = kendalltau(a, b).statistic
        return None if not np.isfinite(tau) else float(tau)
    if len(a) > max_n:
        keep = np.random.default_rng(seed).choice(len(a), size=max_n, replace=False)
        a, b = a[keep], b[keep]
    concord = 0.0
    tied_free_a = 0.0
    tied_free_b = 0.0
    for start in range(0, len(a), 256):
        sa = np.sign(a[start:start + 256, None] - a[None, :])
        sb = np.sign(b[start:start + 256, None] - b[None, :])
        concord += float((sa * sb).sum())
        tied_free_a += float(np.abs(sa).sum())
        tied_free_b += float(np.abs(sb).sum())
    denom = math.sqrt(tied_free_a * tied_free_b)
    return concord / denom if denom > 0 else None
