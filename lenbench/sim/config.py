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
QUEUE_POLICIES = ("fcfs", "sjf")
STARVATION_GUARDS = ("none", "aging", "promotion")
TIME_MODELS = ("a100", "h100", "linear")
# Latency figures (metrics.run_figures names) the scheduling score may be computed on.
SCORE_METRICS = ("e2e_mean_short", "e2e_p90_short", "e2e_p99_short", "e2e_mean_all")

_QUANTILE = re.compile(r"^q(\d+(?:\.\d+)?)$")

# Keys a Hydra `sim` group may carry that are not simulation parameters.
_IGNORED_KEYS = frozenset({"enabled", "_target_", "name"})


@dataclass(frozen=True)
class SimConfig:
    """All parameters of a run. The defaults are the outlets_paper preset (the OUTLETS
    serving study, arXiv 2609.01068 App. C: A100 timing, Llama-3-8B KV size, 1 prefill + 3 decode, 1,914 requests at 100 QPS).

    Cluster: `n_prefill` prefill instances with FCFS token-budget batches of at most
    `max_prefill_tokens`; KV caches cross one shared FIFO link; `n_decode` decode instances run
    continuous batching with at most `max_num_seqs` sequences and `kv_capacity_tokens` of KV.

    Policy: `dispatch` picks the decode instance when a KV cache arrives (rr, jsq, lb = least
    predicted outstanding tokens, pow2 = lb between two random instances); `queue` orders
    admission on the instance (fcfs, or sjf by predicted length). `starvation` is an optional
    guard for sjf: "aging" sorts by pred - aging_alpha * age_s (age since arrival, so
    aging_alpha is in tokens per second), "promotion" moves requests waiting in the decode
    queue longer than `t_starve_s` to the head (FCFS among them). The baseline that scores are
    measured against is the same dispatcher with FCFS (`baseline_policy`): baseline and
    predictor runs differ only in queue order. Unless `dispatch_uses_predictions`, lb and pow2
    balance on one value for every request (the constant reference prediction), so dispatch
    is prediction-free too; with it, they balance on each run's predictions and the score
    also credits prediction-driven dispatch. `score_metric` (one of SCORE_METRICS) is the
    latency figure of the score (baseline - predictor) / (baseline - oracle).

    Workload: `n_requests` requests drawn with replacement from the given rows, arriving as a
    Poisson process (gamma when `arrival_cv` != 1) at `qps`, or, when `load_factor` is set (it
    takes precedence), at load_factor times the cluster's estimated saturation rate.
    Classes: short = true length < `short_threshold`, long = true length >= `long_threshold`;
    a threshold is a token count or "qNN", the NN-th percentile of the supplied true lengths
    (e.g. "q50" and "q90" for a world whose lengths are not known in advance).
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
    # workload and reporting
    n_requests: int = 1914
    qps: float | None = 100.0
    load_factor: float | None = None
    arrival_cv: float = 1.0
    seeds: tuple[int, ...] = field(default=(0, 1, 2, 3, 4))
    short_threshold: float | str = 800
    long_threshold: float | str = 1536
    score_metric: str = "e2e_mean_short"

    def __post_init__(self) -> None:
        _check_choice("dispatch", self.dispatch, DISPATCH_POLICIES)
        _check_choice("queue", self.queue, QUEUE_POLICIES)
        _check_choice("starvation", self.starvation, STARVATION_GUARDS)
        _check_choice("time_model", self.time_model, TIME_MODELS)
        _check_choice("score_metric", self.score_metric, SCORE_METRICS)
        if not isinstance(self.dispatch_uses_predictions, bool):
            raise TypeError("dispatch_uses_predictions must be true or false, got "
                            f"{self.dispatch_uses_predictions!r}")
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
        for name in ("short_threshold", "long_threshold"):
            value = getattr(self, name)
            if isinstance(value, str) and not _parse_quantile(value):
                raise ValueError(f"{name} must be a number or 'qNN' (0 < NN < 100), got {value!r}")
        if (not isinstance(self.short_threshold, str) and not isinstance(self.long_threshold, str)
                and self.short_threshold > self.long_threshold):
            raise ValueError("short_threshold must not exceed long_threshold")

    @property
    def policy(self) -> str:
        """The predictive policy as 'dispatch+queue', e.g. 'lb+sjf'."""
        return f"{self.dispatch}+{self.queue}"

    @property
    def baseline_policy(self) -> str:
        """The reference the score is measured against: the same dispatcher with FCFS."""
        return f"{self.dispatch}+fcfs"

    def thresholds(self, true_len: ArrayLike) -> tuple[float, float]:
        """(short, long) thresholds in tokens, resolving "qNN" against `true_len`."""
        true = np.asarray(true_len, dtype=np.float64)
        out = []
        for value in (self.short_threshold, self.long_threshold):
            if isinstance(value, str):
                out.append(float(np.percentile(true, _parse_quantile(value))))
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
            if key in ("seeds", "linear_abc") and value is not None:
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
