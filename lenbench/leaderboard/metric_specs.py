"""Metric specs: what the leaderboard shows of a metric, so that adding one to the main table is a
function in scoring (its value in a block of the result) and a spec here.

A spec names its figure as the tidy table does (`static.mae`: the `mae` of the result's static
block; lenbench/leaderboard/table.py), the column's header, how the seeds' values become a cell,
which values are better, the header's one-line note on the site and the column's sentence in the
table's caption (empty where an earlier column's sentence covers it). `MAIN_METRICS` lists the
main table's metric columns in order; the markdown and the site both build from it.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lenbench.leaderboard import cells
from lenbench.leaderboard.cells import DASH

__all__ = ["MAIN_METRICS", "Figures", "MetricSpec", "count_of", "interval_of", "main_spec",
           "mean_of", "mean_std_of", "share_of", "seconds_of", "spec_note"]


class Figures(Protocol):
    """Where a cell's values come from: a table row's figures, one per seed."""

    def values(self, key: str) -> list[float]: ...


CellFormat = Callable[[Figures, str], str]  # (a row's figures, the spec's key) -> cell text


@dataclass(frozen=True)
class MetricSpec:
    """One metric's column: `key` (tidy-table name), header `label`, cell `format`, `better`
    ("lower", "higher" or "" when neither), the site's header `note`, its `caption` sentence,
    and `delta` ("static" or "dynamic": the paired difference to the reference predictor, of
    that kind, follows as a column of its own)."""

    key: str
    label: str
    format: CellFormat
    better: str = "lower"
    note: str = ""
    caption: str = ""
    delta: str = ""

    def cell(self, figures: Figures) -> str:
        return self.format(figures, self.key)

    def rank_value(self, figures: Figures) -> float | None:
        """The mean over seeds, signed so that better sorts first (None: no value)."""
        value = cells.mean(figures.values(self.key))
        if value is None or self.better != "higher":
            return value
        return -value


def mean_std_of(digits: int = 1) -> CellFormat:
    """Mean ± sample std over seeds."""
    return lambda figures, key: cells.mean_std(figures.values(key), digits)


def mean_of(digits: int = 1) -> CellFormat:
    """The mean over seeds."""
    return lambda figures, key: cells.number(cells.mean(figures.values(key)), digits)


def share_of(digits: int = 1) -> CellFormat:
    """The mean over seeds of a share, in percent."""
    def cell(figures: Figures, key: str) -> str:
        value = cells.mean(figures.values(key))
        return DASH if value is None else f"{100 * value:.{digits}f}%"
    return cell


def seconds_of() -> CellFormat:
    """The mean over seeds of a duration."""
    return lambda figures, key: cells.seconds(cells.mean(figures.values(key)))


def count_of() -> CellFormat:
    """The mean over seeds of a count (k, M, B)."""
    return lambda figures, key: cells.count(cells.mean(figures.values(key)))


def interval_of(digits: int = 1) -> CellFormat:
    """An interval `key` (the tidy table's `<key>_low`, `<key>_high`), bounds averaged over
    seeds."""
    def cell(figures: Figures, key: str) -> str:
        lows, highs = figures.values(f"{key}_low"), figures.values(f"{key}_high")
        if not lows or not highs:
            return DASH
        return f"[{statistics.fmean(lows):.{digits}f}, {statistics.fmean(highs):.{digits}f}]"
    return cell


MAIN_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("static.mae", "Static MAE", mean_std_of(1),
               note="mean absolute error of the total length, tokens (mean ± std over seeds)",
               caption="MAE in tokens (static: total length; dynamic: remaining length by the "
                       "OUTLETS protocol, the per-request mean over decoding steps averaged over "
                       "requests), shown as mean ± sample std over seeds (the value alone for "
                       "one seed)."),
    MetricSpec("static.mae_ci", "95% CI", interval_of(1), better="",
               note="bootstrap 95% interval over prompts, bounds averaged over seeds",
               caption="95% CI: bootstrap interval over prompts, bounds averaged over seeds.",
               delta="static"),
    MetricSpec("static.kendall_tau", "Kendall τ", mean_of(3), better="higher",
               note="Kendall τ-b rank correlation with the true lengths, mean over seeds",
               caption="Kendall τ-b, Spearman and Within ±25% (share of requests with "
                       "|pred − true| ≤ 0.25·true) are means over seeds."),
    MetricSpec("static.spearman", "Spearman", mean_of(3), better="higher",
               note="Spearman rank correlation with the true lengths, mean over seeds"),
    MetricSpec("static.within_25", "Within ±25%", share_of(1), better="higher",
               note="share of requests predicted within 25% of their true length"),
    MetricSpec("dynamic.mae", "Dynamic MAE", mean_std_of(1),
               note="mean absolute error of the remaining length over decoding steps, tokens",
               delta="dynamic"),
    MetricSpec("timings.fit_s", "Fit (s)", seconds_of(), better="",
               note="fitting time in seconds, mean over seeds",
               caption=f"Fit time, ms/request and parameter count come from the runs; {DASH} "
                       "means not applicable."),
    MetricSpec("timings.predict_ms_per_request", "ms/request", seconds_of(), better="",
               note="prediction time per request in milliseconds"),
    MetricSpec("timings.n_parameters", "Params", count_of(), better="",
               note="parameter count of the predictor"),
)


def main_spec(key: str) -> MetricSpec:
    """The main table's spec of `key` (KeyError when the table has no such column)."""
    for spec in MAIN_METRICS:
        if spec.key == key:
            return spec
    raise KeyError(f"the main table has no column for {key!r}; add a MetricSpec to MAIN_METRICS")


def spec_note(label: str) -> str:
    """The note of the main table's column headed `label` ('' when none is)."""
    return next((spec.note for spec in MAIN_METRICS if spec.label == label), "")
