"""SimConfig: every parameter of a simulation run in one recordable dataclass.

One flat dataclass (rather than nested cluster/policy/workload objects) so that a Hydra group
`sim` maps onto it key by key and so that `to_dict()` records the whole run in a result JSON.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

DISPATCH_POLICIES = ("rr", "jsq", "lb", "pow2")
QUEUE_POLICIES = ("fcfs", "sjf", "srpt")
STARVATION_GUARDS = ("none", "aging", "promotion")
TIME_MODELS = ("a100", "h100", "linear")
PREEMPT_COSTS = ("recompute", "swap")
ORDER_BY = ("point", "quantile", "tail")
# Latency figures (metrics.run_figures names) the scheduling score may be computed on; the first
# is the default: the mean over all requests, on which SJF is the mean-optimal order of the
# textbook single-server queue, where a figure of one class rewards delaying the other
# (docs/protocol.md, "The scheduling score").
SCORE_METRICS = ("e2e_mean_all", "e2e_mean_short", "e2e_p90_short", "e2e_p99_short")

_QUANTILE = re.compile(r"^q(\d+(?:\.\d+)?)$")

# Keys a Hydra `sim` group may carry that are not simulation parameters.
_IGNORED_KEYS = frozenset({"enabled", "_target_", "name"})


@dataclass(frozen=True)
class SimConfig:
    """All parameters of a run. The defaults are the outlets_paper preset (the OUTLETS
    serving study, arXiv 2609.01068 App. C: A100 timing, Llama-3-8B KV size, 1 prefill + 3
    decode, 1,914 requests at 100 QPS).

    Cluster: `n_prefill` prefill instances with FCFS token-budget batches of at most
    `max_prefill_tokens`; KV caches cross one shared FIFO link; `n_decode` decode instances run
    continuous batching with at most `max_num_seqs` sequences and `kv_capacity_tokens` of KV.

    Policy: `dispatch` picks the decode instance when a KV cache arrives (rr, jsq, lb = least
    predicted outstanding tokens, pow2 = lb between two random instances); `queue` orders admission
    on the instance (fcfs, or sjf by key). In the scored runs (simulate_predictions,
    compare_policies) the sjf key of a request is its prediction's mid-rank quantile among the row's
    predictions on the scored rows (keys.py), so ordering depends on a predictor's ranking, not its
    units. `starvation` is an optional guard for sjf: "aging" sorts by key - aging_alpha * age_s
    (age since arrival, so aging_alpha is in quantiles per second: at 1, a request that has waited
    one second outranks every new one), "promotion" moves requests waiting in the decode queue
    longer than `t_starve_s` to the head (FCFS among them). srpt keys are remaining tokens; their
    aging credit is aging_alpha times keys.tokens_per_quantile of the true lengths, in tokens per
    second. The baseline that scores are measured against is the same dispatcher with FCFS
    (`baseline_policy`): baseline and predictor runs differ only in queue order. Unless
    `dispatch_uses_predictions`, lb and pow2 balance on one value for every request (the constant
    reference prediction), so dispatch is prediction-free too; with it, they balance on each run's
    predictions (in tokens) and the score also credits prediction-driven dispatch. `score_metric`
    (one of SCORE_METRICS) is the latency figure of the score (baseline - predictor) / (baseline -
    oracle), at most 1: a row's mean gain counts up to the oracle's (score.py). `score_alphas`
    are the aging weights (quantiles per second; 0 = no guard) at which the score is also
    reported (alpha_sweep.py).

    Load sweep (sweep.py, when `sweep_loads` is set): the value-of-prediction curves serve the
    same traffic at each load factor in `sweep_loads` (of the estimated saturation rate) under
    FCFS, SJF on the true lengths (the oracle), SJF on noisy oracles whose Harrell's C on the
    rows is each of `sweep_noisy_c`, SJF on prompt length and SJF on the predictor, with the
    policy's guard, over the first `sweep_seeds` simulator seeds (all when None or when there
    are fewer). With
    `headline_min_gain`, the headline's load is not `load_factor` but the lowest sweep load at
    which the oracle cuts the score metric by at least that share of the FCFS figure; when no
    sweep load does, no score is given.

    Preemption (queue "srpt", preemption.py; the comparison rows, not the score): every
    `repredict_every` iterations an instance re-ranks its running and waiting requests by predicted
    remaining tokens (minus the aging credit) and evicts a running request when a waiting one's key
    is smaller by more than `preempt_margin` tokens, at most `max_preemptions` times per request.
    `preempt_cost`: "recompute" drops the KV cache and prefills prompt + generated tokens again on
    resume (the instance stalls for that prefill); "swap" moves the KV cache out and back in at
    `kv_bytes_per_token` / `swap_bandwidth_gb_s`, stalling the instance each way.

    Comparison (comparison.py, when `compare`): static SJF, preemptive rows and a
    distributional row ordered by `order_by`: "quantile" = the predicted `order_quantile`
    quantile, "tail" = mean + tail_beta * (q0.9 - q0.5), "point" = no distributional row.

    Workload: `n_requests` requests drawn with replacement from the given rows, arriving as a
    Poisson process (gamma when `arrival_cv` != 1) at `qps`, or, when `load_factor` is set (it
    takes precedence), at load_factor times the cluster's estimated saturation rate.
    Classes: short = true length < `short_threshold`, long = true length >= `long_threshold`
    among the requests that ended before the length cap, capped = those cut at it; a threshold
    is a token count or "qNN", the NN-th percentile of the supplied true lengths (e.g. "q50" and
    "q90" for a world whose lengths are not known in advance), of the uncensored ones when rows
    are flagged censored, so that the classes stay apart and below the cap.
    """

    # cluster
    n_prefill: int = 1
    n_decode: int = 3
    max_prefill_tokens: int = 8192
    max_num_seqs: int = 256
    kv_capacity_tokens: int = 400_000
    kv_bytes_per_token: int = 131_072
    link_bandwidth_gb_s: float = 25.0
    link_latency_ms: float = 1.0
    time_model: str = "a100"
    linear_abc: tuple[float, float, float] | None = None
    # policy
    dispatch: str = "lb"
    queue: str = "sjf"
    starvation: str = "none"
    aging_alpha: float = 0.0
    t_starve_s: float | None = None
    dispatch_uses_predictions: bool = False
    # preemptive re-ranking (queue srpt) and distributional ordering
    repredict_every: int = 1
    preempt_margin: float = 0.0
    preempt_cost: str = "recompute"
    swap_bandwidth_gb_s: float = 25.0
    max_preemptions: int = 4
    order_by: str = "tail"
    order_quantile: float = 0.9
    tail_beta: float = 1.0
    compare: bool = False
    # workload and reporting
    n_requests: int = 1914
    qps: float | None = 100.0
    load_factor: float | None = None
    arrival_cv: float = 1.0
    seeds: tuple[int, ...] = field(default=(0, 1, 2, 3, 4))
    short_threshold: float | str = 800
    long_threshold: float | str = 1536
    score_metric: str = "e2e_mean_all"
    score_alphas: tuple[float, ...] = ()
    # value-of-prediction curves and the headline's load (sweep.py)
    sweep_loads: tuple[float, ...] = ()
    sweep_seeds: int | None = None
    sweep_noisy_c: tuple[float, ...] = ()
    headline_min_gain: float | None = None

    def __post_init__(self) -> None:
        _check_choice("dispatch", self.dispatch, DISPATCH_POLICIES)
        _check_choice("queue", self.queue, QUEUE_POLICIES)
        _check_choice("starvation", self.starvation, STARVATION_GUARDS)
        _check_choice("time_model", self.time_model, TIME_MODELS)
        _check_choice("score_metric", self.score_metric, SCORE_METRICS)
        _check_choice("preempt_cost", self.preempt_cost, PREEMPT_COSTS)
        _check_choice("order_by", self.order_by, ORDER_BY)
        for name in ("dispatch_uses_predictions", "compare"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be true or false, got {getattr(self, name)!r}")
        self._check_preemption()
        if self.time_model == "linear" and self.linear_abc is None:
            raise ValueError("time_model='linear' needs linear_abc=(a, b, c)")
        if self.starvation == "promotion" and self.t_starve_s is None:
            raise ValueError("starvation='promotion' needs t_starve_s")
        if self.starvation == "aging" and self.aging_alpha <= 0:
            raise ValueError("starvation='aging' needs aging_alpha > 0")
        for name in ("n_prefill", "n_decode", "max_prefill_tokens", "max_num_seqs",
                     "kv_capacity_tokens", "n_requests"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.load_factor is None and self.qps is None:
            raise ValueError("set qps or load_factor")
        rate = self.load_factor if self.load_factor is not None else self.qps
        if not (rate is not None and rate > 0 and math.isfinite(rate)):
            raise ValueError(f"arrival rate must be positive, got qps={self.qps}, "
                             f"load_factor={self.load_factor}")
        if self.arrival_cv <= 0:
            raise ValueError("arrival_cv must be > 0")
        if not self.seeds:
            raise ValueError("seeds must not be empty")
        for alpha in self.score_alphas:
            if not (isinstance(alpha, int | float) and math.isfinite(alpha) and alpha >= 0):
                raise ValueError(f"score_alphas must hold finite numbers >= 0, got {alpha!r}")
        self._check_sweep()
        for name in ("short_threshold", "long_threshold"):
            value = getattr(self, name)
            if isinstance(value, str) and not _parse_quantile(value):
                raise ValueError(f"{name} must be a number or 'qNN' (0 < NN < 100), got {value!r}")
        if (not isinstance(self.short_threshold, str) and not isinstance(self.long_threshold, str)
                and self.short_threshold > self.long_threshold):
            raise ValueError("short_threshold must not exceed long_threshold")

    def _check_sweep(self) -> None:
        for load in self.sweep_loads:
            if not (isinstance(load, int | float) and math.isfinite(load) and load > 0):
                raise ValueError(f"sweep_loads must hold finite numbers > 0, got {load!r}")
        if list(self.sweep_loads) != sorted(set(self.sweep_loads)):
            raise ValueError(f"sweep_loads must increase, got {list(self.sweep_loads)}")
        for c in self.sweep_noisy_c:
            if not (isinstance(c, int | float) and 0.5 < c < 1):
                raise ValueError(f"sweep_noisy_c must hold C-indices in (0.5, 1), got {c!r}")
        if self.sweep_seeds is not None and not (
                isinstance(self.sweep_seeds, int) and self.sweep_seeds >= 1):
            raise ValueError(f"sweep_seeds must be an integer >= 1 (the first that many of "
                             f"seeds, all of them when there are fewer), got "
                             f"{self.sweep_seeds!r}")
        gain = self.headline_min_gain
        if gain is not None:
            if not (isinstance(gain, int | float) and 0 < gain < 1):
                raise ValueError(f"headline_min_gain must be a share in (0, 1), got {gain!r}")
            if not self.sweep_loads:
                raise ValueError("headline_min_gain picks the headline load among sweep_loads; "
                                 "set sweep_loads too")

    def _check_preemption(self) -> None:
        if not isinstance(self.repredict_every, int) or self.repredict_every < 1:
            raise ValueError(f"repredict_every must be an integer >= 1, got "
                             f"{self.repredict_every!r}")
        if not isinstance(self.max_preemptions, int) or self.max_preemptions < 0:
            raise ValueError(f"max_preemptions must be an integer >= 0, got "
                             f"{self.max_preemptions!r}")
        for name in ("preempt_margin", "tail_beta"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not self.swap_bandwidth_gb_s > 0:
            raise ValueError(f"swap_bandwidth_gb_s must be > 0, got {self.swap_bandwidth_gb_s}")
        if not 0 < self.order_quantile < 1:
            raise ValueError(f"order_quantile must be in (0, 1), got {self.order_quantile}")
        if self.starvation == "promotion" and (self.queue == "srpt" or self.compare):
            raise ValueError("preemptive re-ranking (queue srpt, compare) supports starvation "
                             "none or aging, not promotion")

    @property
    def policy(self) -> str:
        """The predictive policy as 'dispatch+queue', e.g. 'lb+sjf'."""
        return f"{self.dispatch}+{self.queue}"

    @property
    def guard(self) -> str:
        """The starvation guard in words, as results record it: "none", "aging (alpha 1
        quantile/s)" or "promotion (after 5 s)"."""
        if self.starvation == "aging":
            return f"aging (alpha {self.aging_alpha:g} quantile/s)"
        if self.starvation == "promotion":
            return "promotion" if self.t_starve_s is None else \
                f"promotion (after {self.t_starve_s:g} s)"
        return "none"

    @property
    def baseline_policy(self) -> str:
        """The reference the score is measured against: the same dispatcher with FCFS."""
        return f"{self.dispatch}+fcfs"

    def thresholds(self, true_len: ArrayLike, censored: ArrayLike | None = None
                   ) -> tuple[float, float]:
        """(short, long) thresholds in tokens, resolving "qNN" against `true_len`, against the
        uncensored lengths when `censored` flags some rows (and not all): a cap shared by many
        rows would otherwise be the long threshold, and with the median read from all lengths
        and the 90th percentile from the uncensored ones the short and long classes would
        overlap."""
        true = np.asarray(true_len, dtype=np.float64)
        ended = true
        if censored is not None:
            cut = np.asarray(censored, dtype=bool)
            if cut.shape != true.shape:
                raise ValueError(f"censored has shape {cut.shape}, expected {true.shape}")
            if not cut.all():
                ended = true[~cut]
        out = []
        for value, lengths in ((self.short_threshold, ended), (self.long_threshold, ended)):
            if isinstance(value, str):
                out.append(float(np.percentile(lengths, _parse_quantile(value))))
            else:
                out.append(float(value))
        return out[0], out[1]

    def replace(self, **changes: Any) -> SimConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict (tuples become lists) for recording with results."""
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, tuple):
                out[key] = list(value)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SimConfig:
        """Build from a plain mapping such as a Hydra `sim` group (`enabled` is ignored).

        Unknown keys raise, so that a typo in a sweep override does not silently do nothing.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        unknown = []
        for key, value in data.items():
            if key in _IGNORED_KEYS:
                continue
            if key not in names:
                unknown.append(key)
                continue
            if key in ("seeds", "linear_abc", "score_alphas", "sweep_loads",
                       "sweep_noisy_c") and value is not None:
                value = tuple(value)
            kwargs[key] = value
        if unknown:
            raise KeyError(f"unknown SimConfig keys: {sorted(unknown)}")
        return cls(**kwargs)


def _parse_quantile(value: str) -> float | None:
    match = _QUANTILE.match(value.strip())
    if not match:
        return None
    q = float(match.group(1))
    return q if 0 < q < 100 else None


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
