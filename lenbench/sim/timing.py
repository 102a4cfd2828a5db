"""Iteration-time models: how long one prefill batch or one decode iteration takes.

The simulator only ever asks two questions, so any object with these two methods works
(`TimeModel`). Decode time must accept an array of context sizes because the engine prices
many consecutive iterations at once (between events the batch is fixed and each running request
gains one token per iteration). Where the constants come from is said beside each preset below
(A100 from Vidur's published profile).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray


@runtime_checkable
class TimeModel(Protocol):
    """Iteration-time model, in milliseconds."""

    def decode_ms(self, batch_size: int, context_tokens: ArrayLike) -> NDArray[np.float64]:
        """Time of one decode iteration for a batch of `batch_size` sequences holding
        `context_tokens` KV tokens in total; elementwise over an array of context sizes."""
        ...

    def prefill_ms(self, tokens: int, sum_sq_len: float) -> float:
        """Time of one prefill batch of `tokens` prompt tokens whose squared prompt lengths
        sum to `sum_sq_len` (the attention term)."""
        ...


def _interp_extrapolate(x: float, xs: NDArray[np.float64], ys: NDArray[np.float64]) -> float:
    """Piecewise-linear table lookup that continues the last segment's slope past the table."""
    if x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return float(ys[-1] + slope * (x - xs[-1]))


_LIN_CACHE_MAX = 1 << 16


@dataclass(frozen=True)
class TableTimeModel:
    """The default model: t = lin(batch tokens) + gamma * context + overhead.

    `lin` is a table of linear-layer time against batch tokens, because one straight line fits
    the measured curve badly over 1-256 tokens. Prefill reuses the same table for its tokens and
    adds an attention term proportional to the sum of squared prompt lengths.
    """

    batch_tokens: tuple[float, ...]
    linear_ms: tuple[float, ...]
    ctx_ms_per_token: float
    overhead_ms: float = 1.0
    attn_ms_per_sq_token: float = 0.0
    name: str = "table"

    def __post_init__(self) -> None:
        if len(self.batch_tokens) != len(self.linear_ms) or len(self.batch_tokens) < 2:
            raise ValueError("batch_tokens and linear_ms need the same length, at least 2")
        if any(b >= a for a, b in zip(self.batch_tokens[1:], self.batch_tokens[:-1])):
            raise ValueError("batch_tokens must increase")
        object.__setattr__(self, "_xs", np.asarray(self.batch_tokens, dtype=np.float64))
        object.__setattr__(self, "_ys", np.asarray(self.linear_ms, dtype=np.float64))
        # lin_ms by batch tokens: simulations ask for the same few thousand values many times
        object.__setattr__(self, "_lin_cache", {})

    def lin_ms(self, tokens: float) -> float:
        cache: dict[float, float] = self._lin_cache  # type: ignore[attr-defined]
        try:
            value = cache.get(tokens)
        except TypeError:  # unhashable (a 0-d array): not cached
            return _interp_extrapolate(tokens, self._xs, self._ys)  # type: ignore[attr-defined]
        if value is None:
            value = _interp_extrapolate(tokens, self._xs, self._ys)  # type: ignore[attr-defined]
            if len(cache) >= _LIN_CACHE_MAX:
                cache.clear()
            cache[tokens] = value
        return value

    def decode_ms(self, batch_size: int, context_tokens: ArrayLike) -> NDArray[np.float64]:
        base = self.lin_ms(batch_size) + self.overhead_ms
        return base + self.ctx_ms_per_token * np.asarray(context_tokens, dtype=np.float64)

    def decode_affine(self, batch_size: int) -> tuple[float, float]:
        """(alpha, beta) with decode_ms(B, C) = alpha + beta * C; lets the engine use closed
        forms instead of arrays."""
        return self.lin_ms(batch_size) + self.overhead_ms, self.ctx_ms_per_token

    def prefill_ms(self, tokens: int, sum_sq_len: float) -> float:
        return self.lin_ms(tokens) + self.attn_ms_per_sq_token * sum_sq_len + self.overhead_ms


@dataclass(frozen=True)
class LinearTimeModel:
    """DistServe form: decode = a + b*B + c*C; prefill = p0 + p1*tokens + p2*sum(l^2).

    Prefill defaults approximate the A100 table (about 10 ms plus 0.065 ms per token) so that
    a model calibrated on decode measurements alone still has a sensible prefill.
    """

    a: float
    b: float
    c: float
    prefill_base_ms: float = 10.0
    prefill_ms_per_token: float = 0.065
    prefill_ms_per_sq_token: float = 1.3e-6
    name: str = "linear"

    def decode_ms(self, batch_size: int, context_tokens: ArrayLike) -> NDArray[np.float64]:
        ctx = np.asarray(context_tokens, dtype=np.float64)
        return self.a + self.b * batch_size + self.c * ctx

    def decode_affine(self, batch_size: int) -> tuple[float, float]:
        return self.a + self.b * batch_size, self.c

    def prefill_ms(self, tokens: int, sum_sq_len: float) -> float:
        return (self.prefill_base_ms + self.prefill_ms_per_token * tokens
                + self.prefill_ms_per_sq_token * sum_sq_len)


# A100-80GB, Llama-3-8B, TP1: per-layer MLP medians of Vidur's profile summed over 32 layers;
# gamma = 131,072 B per token / 1.31 TB/s effective. The attention constant is an estimate:
# about 5.2e5 FLOP per (query, key) pair over 32 layers, causal half, at ~200 TFLOP/s.
A100_LLAMA3_8B = TableTimeModel(
    batch_tokens=(1, 8, 16, 32, 64, 128, 256, 512, 1024),
    linear_ms=(9.70, 9.98, 10.13, 10.91, 11.23, 13.18, 19.49, 34.64, 75.14),
    ctx_ms_per_token=1.0e-4,
    overhead_ms=1.0,
    attn_ms_per_sq_token=1.3e-6,
    name="a100-llama3-8b",
)

# H100-80GB: Vidur's Llama-2-7B H100 profile scaled by 1.05 as a Llama-3-8B proxy;
# gamma at 3.35 TB/s and the same 64% efficiency; attention at ~3x the A100 rate.
H100_LLAMA3_8B = TableTimeModel(
    batch_tokens=(1, 16, 64, 128, 256, 512, 1024),
    linear_ms=(5.60, 5.79, 5.86, 6.37, 9.15, 11.98, 21.02),
    ctx_ms_per_token=6.0e-5,
    overhead_ms=1.0,
    attn_ms_per_sq_token=4.5e-7,
    name="h100-llama3-8b",
)

PRESETS: dict[str, TableTimeModel] = {"a100": A100_LLAMA3_8B, "h100": H100_LLAMA3_8B}


def get_time_model(name: str, linear_abc: Sequence[float] | None = None) -> TimeModel:
    """Resolve SimConfig.time_model ('a100', 'h100' or 'linear' with its (a, b, c))."""
    if name == "linear":
        if linear_abc is None or len(linear_abc) != 3:
            raise ValueError("the linear time model needs linear_abc=(a, b, c)")
        a, b, c = (float(v) for v in linear_abc)
        return LinearTimeModel(a, b, c)
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown time model {name!r}; choose from "
                         f"{sorted(PRESETS) + ['linear']}") from None


def calibrate(rows: Iterable[Sequence[float]] | str | Path) -> LinearTimeModel:
    """Fit decode time a + b*B + c*C (ms) by least squares to measured (B, C, ms) rows.

    `rows` is an iterable of (batch_size, context_tokens, ms) tuples or the path of a CSV with
    those three columns (a header row is skipped if it is not numeric). Measure on your own
    GPU, e.g. by timing vLLM decode steps at several batch sizes and context lengths; vary B and
    C independently or the fit cannot separate b from c.
    """
    data = _read_calibration_csv(Path(rows)) if isinstance(rows, str | Path) else \
        np.asarray([tuple(map(float, r)) for r in rows], dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != 3:
        raise ValueError("calibration rows must be (batch_size, context_tokens, ms)")
    if len(data) < 3:
        raise ValueError("need at least 3 measurements to fit (a, b, c)")
    design = np.column_stack([np.ones(len(data)), data[:, 0], data[:, 1]])
    coef, _, rank, _ = np.linalg.lstsq(design, data[:, 2], rcond=None)
    if rank < 3:
        raise ValueError("measurements do not vary batch size and context independently")
    return LinearTimeModel(float(coef[0]), float(coef[1]), float(coef[2]), name="calibrated")


def _read_calibration_csv(path: Path) -> NDArray[np.float64]:
    rows: list[tuple[float, float, float]] = []
    with path.open(newline="") as fh:
        for i, rec in enumerate(csv.reader(fh)):
            if not rec or all(not cell.strip() for cell in rec):
                continue
            try:
                b, c, ms = (float(x) for x in rec[:3])
            except ValueError:
                if i == 0:
                    continue  # header
                raise ValueError(f"{path}: row {i + 1} is not numeric: {rec}") from None
            rows.append((b, c, ms))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 3)
