"""Workloads: who arrives when, with how long a prompt, how long an answer, and what was predicted.

A workload is four aligned arrays rather than a list of request objects, so that drawing,
re-predicting and measuring stay vectorised; the engine reads them once.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from numpy.typing import ArrayLike, NDArray


@dataclass(frozen=True)
class Workload:
    """Requests sorted by arrival. `true_len` counts all output tokens including the first,
    which prefill emits; `pred_len` is what the scheduler believes; `censored` marks labels
    cut at max_tokens (finish_reason == "length") and is carried for reporting only."""

    arrival_s: NDArray[np.float64]
    prompt_len: NDArray[np.int64]
    true_len: NDArray[np.int64]
    pred_len: NDArray[np.float64]
    censored: NDArray[np.bool_] = field(default=None)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        arr = np.asarray(self.arrival_s, dtype=np.float64)
        n = len(arr)
        prompt = np.asarray(self.prompt_len, dtype=np.int64)
        true = np.asarray(self.true_len, dtype=np.int64)
        pred = np.asarray(self.pred_len, dtype=np.float64)
        cens = (np.zeros(n, dtype=bool) if self.censored is None
                else np.asarray(self.censored, dtype=bool))
        for name, a in (("prompt_len", prompt), ("true_len", true), ("pred_len", pred),
                        ("censored", cens)):
            if a.shape != (n,):
                raise ValueError(f"{name} has shape {a.shape}, expected ({n},)")
        if n and np.any(np.diff(arr) < 0):
            raise ValueError("arrival_s must be sorted")
        if np.any(true < 1):
            raise ValueError("true_len must be >= 1 (the first token comes from prefill)")
        if np.any(prompt < 0):
            raise ValueError("prompt_len must be >= 0")
        if not np.all(np.isfinite(pred)):
            raise ValueError("pred_len must be finite")
        object.__setattr__(self, "arrival_s", arr)
        object.__setattr__(self, "prompt_len", prompt)
        object.__setattr__(self, "true_len", true)
        object.__setattr__(self, "pred_len", pred)
        object.__setattr__(self, "censored", cens)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def with_predictions(self, pred_len: ArrayLike) -> Workload:
        """Same requests and arrivals, different predictions (paired comparisons)."""
        return replace(self, pred_len=np.asarray(pred_len, dtype=np.float64))


def arrival_times(n: int, qps: float, rng: np.random.Generator, cv: float = 1.0
                  ) -> NDArray[np.float64]:
    """Arrival times starting at 0: Poisson (exponential gaps) when cv == 1, otherwise gamma
    gaps with mean 1/qps and coefficient of variation `cv` (cv > 1 is burstier)."""
    if n <= 0:
        return np.zeros(0)
    if cv == 1.0:
        gaps = rng.exponential(1.0 / qps, size=n - 1)
    else:
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (qps * shape), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


def draw_rows(n_rows: int, n_requests: int, qps: float, seed: int, arrival_cv: float = 1.0
              ) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """Row indices drawn with replacement and arrival times, both from one seeded stream
    (salted, so that it is independent of a caller's generator seeded with the same int)."""
    rng = np.random.default_rng([seed, 0x64726177])
    idx = rng.integers(0, n_rows, size=n_requests)
    return idx, arrival_times(n_requests, qps, rng, arrival_cv)


def draw_workload(true_len: ArrayLike, pred_len: ArrayLike, prompt_len: ArrayLike | int,
                  n_requests: int, qps: float, seed: int, arrival_cv: float = 1.0,
                  censored: ArrayLike | None = None) -> Workload:
    """Draw `n_requests` rows with replacement (seeded) and give them arrivals at `qps`.

    The same seed draws the same rows and arrivals whatever the predictions are, so policies
    and predictors are compared on identical traffic.
    """
    true = np.asarray(true_len)
    if true.ndim != 1 or len(true) == 0:
        raise ValueError("true_len must be a non-empty 1-D array")
    idx, arrivals = draw_rows(len(true), n_requests, qps, seed, arrival_cv)
    cens = None if censored is None else np.asarray(censored, dtype=bool)[idx]
    prompt = np.broadcast_to(np.asarray(prompt_len), true.shape)
    return Workload(arrivals, prompt[idx], true[idx],
                    np.asarray(pred_len, dtype=np.float64)[idx], cens)


def _lognormal_capped_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""
    def phi(z: float) -> float:
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
    lc = math.log(cap)
    return (math.exp(mu + sigma * sigma / 2) * phi((lc - mu - sigma * sigma) / sigma)
            + cap * (1.0 - phi((lc - mu) / sigma)))


def lognormal_lengths(n: int, rng: np.random.Generator, mean: float = 1150.0,
                      sigma: float = 0.8, cap: int = 2048) -> NDArray[np.int64]:
    """Output lengths from a lognormal clipped at `cap`, with mu solved so that the clipped
    mean is `mean` (the OUTLETS-like preset: mean about 1150, cap 2048)."""
    if not 1 <= mean < cap:
        raise ValueError("need 1 <= mean < cap")
    lo, hi = -10.0, math.log(cap) + 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _lognormal_capped_mean(mid, sigma, cap) < mean:
            lo = mid
        else:
            hi = mid
    draws = rng.lognormal((lo + hi) / 2, sigma, size=n)
    return np.clip(np.rint(draws), 1, cap).astype(np.int64)


def short_prompts(n: int, rng: np.random.Generator, low: int = 4, high: int = 50
                  ) -> NDArray[np.int64]:
    """Prompt lengths uniform in [low, high] (OUTLETS used ShareGPT prompts of <= 50 tokens)."""
    return rng.integers(low, high + 1, size=n).astype(np.int64)


def load_azure_trace(path: str | Path, limit: int | None = None) -> Workload:
    """Replay an Azure LLM inference trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens).

    Arrival times are seconds after the first row; prompt and output lengths are taken as
    given (rows with 0 generated tokens are counted as 1, the prefill token). Predictions are
    set to the true lengths (oracle); replace them with `Workload.with_predictions`.
    """
    stamps: list[str] = []
    ctx: list[int] = []
    gen: list[int] = []
    with Path(path).open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        for row in reader:
            if limit is not None and len(stamps) >= limit:
                break
            stamps.append(row["TIMESTAMP"].strip().replace(" ", "T"))
            ctx.append(int(row["ContextTokens"]))
            gen.append(int(row["GeneratedTokens"]))
    times = np.array(stamps, dtype="datetime64[ns]")
    rel = (times - times[0]).astype(np.int64) / 1e9 if len(times) else np.zeros(0)
    order = np.argsort(rel, kind="stable")
    true = np.maximum(np.asarray(gen, dtype=np.int64), 1)
    return Workload(rel[order], np.asarray(ctx, dtype=np.int64)[order], true[order],
                    true[order].astype(np.float64))
