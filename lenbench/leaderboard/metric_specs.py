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

__all__ = ["MAIN_METRICS", "Figures", "MetricSpec", "count_of", "decided_share_of", "interval_of",
           "main_spec", "mean_of", "mean_std_of", "share_of", "seconds_of", "spec_note",
           "value_interval_of"]


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


def audit_of() -> CellFormat:
    """A verdict over seeds (1 passed, 0 failed): non-causal when a seed's audit failed,
    passed when every audited seed's passed, n/a where no audit was recorded."""
    def cell(figures: Figures, key: str) -> str:
        values = figures.values(key)
        return "n/a" if not values else "passed" if min(values) == 1 else "non-causal"
    return cell


def interval_of(digits: int = 1) -> CellFormat:
    """An interval `key` (the tidy table's `<key>_low`, `<key>_high`), bounds averaged over
    seeds."""
    def cell(figures: Figures, key: str) -> str:
        lows, highs = figures.values(f"{key}_low"), figures.values(f"{key}_high")
        if not lows or not highs:
            return DASH
        return f"[{statistics.fmean(lows):.{digits}f}, {statistics.fmean(highs):.{digits}f}]"
    return cell


def value_interval_of(digits: int = 2) -> CellFormat:
    """The mean over seeds with its interval `<key>_ci` (bounds averaged over seeds), as
    "0.71 [0.68, 0.74]"; the value alone where no interval was recorded."""
    def cell(figures: Figures, key: str) -> str:
        value = cells.mean(figures.values(key))
        if value is None:
            return DASH
        lows, highs = figures.values(f"{key}_ci_low"), figures.values(f"{key}_ci_high")
        if not lows or not highs:
            return f"{value:.{digits}f}"
        return (f"{value:.{digits}f} [{statistics.fmean(lows):.{digits}f}, "
                f"{statistics.fmean(highs):.{digits}f}]")
    return cell


def decided_share_of(digits: int = 1) -> CellFormat:
    """The mean over seeds of a share in percent, with the rows it is a share of (`<key>_n`,
    the mean over seeds) where recorded: "24.6% of 565"."""
    share = share_of(digits)

    def cell(figures: Figures, key: str) -> str:
        text, n = share(figures, key), cells.mean(figures.values(f"{key}_n"))
        return text if text == DASH or n is None else f"{text} of {n:.0f}"
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
    MetricSpec("static.mae_uncensored", "Uncens. MAE", value_interval_of(1),
               note="MAE over the uncensored rows alone (answers that ended before the cap), "
                    "with its 95% interval",
               caption="Uncens. MAE: the MAE over the uncensored rows alone, with its bootstrap "
                       "95% interval: beside the MAE, how much error lies on the answers whose "
                       "length is known."),
    MetricSpec("static.c_index", "C-index", value_interval_of(2), better="higher",
               note="Harrell's C: share of the pairs of requests whose order the data decide "
                    "that the predictions order right (ties ½), with its 95% interval",
               caption="C-index: Harrell's concordance of the predictions with the true lengths "
                       "over every row: among the pairs whose order the data decide (the "
                       "shorter one uncensored and strictly shorter than the other's recorded "
                       "length, as a censored length is a lower bound), the share the "
                       "predictions order the same way, a tie in prediction counting ½ (1: "
                       "every pair right; 0.5: a constant or chance); the scheduling table's "
                       "C-index is the same figure."),
    MetricSpec("static.runaway_auc", "Runaway AUC", value_interval_of(2), better="higher",
               note="AUC of the prediction for answers that reached the length cap against the "
                    "rest, with its 95% interval",
               caption=f"Runaway AUC: how well the prediction tells the answers that reached the "
                       f"length cap (cut there, or ended exactly at it) from the rest: the chance "
                       f"that such an answer gets the larger prediction of a pair (ties ½; 0.5 "
                       f"for a constant); {DASH} where no test row reached the cap."),
    MetricSpec("static.within_25", "Within ±25%", decided_share_of(1), better="higher",
               note="share of the decided rows predicted within 25% of the true length, and how "
                    "many rows the data decide",
               caption="Within ±25%: the share of rows with |pred − true| ≤ 0.25·true among the "
                       "rows the data decide, whose number follows: every uncensored row, and a "
                       "censored row only where its prediction is below 0.75 times its cut-off "
                       "(no true length beyond the cut-off is then within: a certain miss); a "
                       "censored row with a higher prediction is left out, so a high prediction "
                       "alone earns nothing. C-index, Runaway AUC, Uncens. MAE and Within ±25% "
                       "are means over seeds, [brackets] their bootstrap 95% intervals over "
                       "prompts, bounds averaged over seeds."),
    MetricSpec("dynamic.mae", "Dynamic MAE", mean_std_of(1),
               note="mean absolute error of the remaining length over decoding steps, tokens",
               delta="dynamic"),
    MetricSpec("timings.fit_s", "Fit (s)", seconds_of(), better="",
               note="fitting time in seconds, mean over seeds",
               caption=f"Fit time, ms/request and parameter count come from the runs; {DASH} "
                       "means not applicable. Work shared between runs is counted by the run "
                       "that does it, not by those that reuse it: the features stage by none, "
                       "and the OUTLETS target passes (the training cache, the stored prediction "
                       "pass) by the variant that ran first (its result's report says which)."),
    MetricSpec("timings.predict_ms_per_request", "ms/request", seconds_of(), better="",
               note="prediction time per request in milliseconds"),
    MetricSpec("timings.n_parameters", "Params", count_of(), better="",
               note="parameter count of the predictor"),
    MetricSpec("causality.passed", "Audit", audit_of(), better="",
               note="the audit of what was scored: passed, non-causal or n/a",
               caption="Audit: passed where, for every audited seed, a fresh copy of the "
                       "fitted predictor reproduced the audited scored values with what the "
                       "protocol hides from it changed; non-causal where one did not; n/a where "
                       "no audit was recorded (references, results written before the audit)."),
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
