"""The text of a table cell, the same in every section: numbers over seeds, times, counts, and
free-form names made safe for a markdown table (the site renders the same strings)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from lenbench.results.checks import is_number

__all__ = ["DASH", "cell_text", "count", "finite", "mean", "mean_std", "number", "seconds"]

DASH = "—"  # a figure that does not apply or was not recorded


def finite(values: Iterable[Any]) -> list[float]:
    """The finite numbers among `values`, as floats: missing and null figures are skipped."""
    return [float(v) for v in values if is_number(v) and math.isfinite(v)]


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def number(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def mean_std(values: Sequence[float], digits: int = 1) -> str:
    """"mean ± std" with the sample std (n-1) over seeds; the bare value for a single seed."""
    if not values:
        return DASH
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.fmean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def seconds(x: float | None) -> str:
    """A duration with the digits its size needs (sub-millisecond latencies must not all print
    as 0.00)."""
    if x is None:
        return DASH
    if x < 1:
        return f"{x:.2g}"
    if x < 10:
        return f"{x:.2f}"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def count(x: float | None) -> str:
    """A count with a k, M or B suffix."""
    if x is None:
        return DASH
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def cell_text(text: Any, limit: int = 200) -> str:
    """Text safe inside a markdown table cell: one line, pipes escaped, bounded length."""
    s = " ".join(str(text).split())
    s = s if len(s) <= limit else s[:limit - 3] + "..."
    return s.replace("|", "\\|")
