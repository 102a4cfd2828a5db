"""Per-predictor rows aggregated over seeds, and the main table's cells and caption, kept apart so
each section builds on the same rows.

A row reads its results' figures as the tidy table holds them (lenbench/leaderboard/table.py), by
metric name (`static.mae`, `timings.fit_s`); the main table's metric columns are their specs
(lenbench/leaderboard/metric_specs.py), read when a table is built.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lenbench.leaderboard import metric_specs
from lenbench.leaderboard.blocks import LEFT, RIGHT
from lenbench.leaderboard.cells import DASH, cell_text, mean
from lenbench.leaderboard.metric_specs import MetricSpec, main_spec
from lenbench.leaderboard.table import figures
from lenbench.results import (
    Predictions,
    Result,
    computing_params,
    config_hash,
)
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import paired_rows

__all__ = ["MIN_RANKING_PROMPTS", "Row", "TABLE_BLOCKS", "build_rows", "earlier_protocol",
           "floor_estimate", "gap_share_cell", "main_align", "main_header", "main_legend",
           "metric_cell", "name_cell", "non_causal", "outdated_since", "params_key", "row_block",
           "row_cells", "row_marks"]

MIN_RANKING_PROMPTS = 30  # fewer test prompts than this: the table says it cannot rank
RANKED_BY = ("static.mae", "dynamic.mae")  # rows rank by the first; the second where it is absent

ROWS_LEGEND = (
    "Δ vs REF: this predictor's MAE minus the "
    "reference predictor's on the same test rows (errors averaged over seeds row by row), with a "
    "paired bootstrap 95% interval over prompts that also redraws each side's seeds (so it "
    "covers training variance where there are several); **bold** where the interval excludes 0 "
    "and both sides have several seeds (negative: better than the reference). ° a side has one "
    "seed: its interval covers the prompts only, not the training, so it is never bold. Rows "
    "in *italics* marked (ref) are references, not "
    "predictors: *noise_floor* bounds the irreducible error, the MAE of knowing each prompt's "
    "median length, from an optimistic in-sample estimate (the best single prediction for all "
    "of the prompt's samples, the row's own included: their median when none is censored) to a "
    "pessimistic leave-one-out one (the median of the other samples); its interval joins the "
    "outer ends of their bootstrap intervals. Where the world has prompts with 8 samples or more, "
    "it shows one estimate instead: the error of predicting a sample by the median of j of its "
    "prompt's other samples, fitted for j = 3 to 7 as a + b / j and read at j → ∞, its interval "
    "a bootstrap over those prompts. It is scored on the rows of prompts with at least "
    "two samples, censored ones included and scored as the predictors' are. Share of gap: "
    "(the constant's MAE − this row's) / (the constant's MAE − the floor's estimate), the share "
    "of what a predictor could win that this row wins; its interval joins the ends of the "
    "paired gain's interval to the ends of the floor's (conservative); a greedy world's floor is "
    "0, as its answers repeat exactly. Gain: ended / capped: "
    "the constant's MAE − this row's, split into what the test rows that ended before the cap "
    "and the censored ones contribute (tokens per test row; the two add up to the gain). "
    "A prompt-only "
    "predictor cannot beat the "
    "true floor in expectation; one that reads y_1 (after prefill) knows more than the prompt. "
    "† at step t this predictor reads token y_{t+1} (an EAGLE-3 draft's input), one token more "
    "than a probe on the target's state at n−1+t: its dynamic MAE uses more information. "
    "(non-causal): the audit of what was scored failed: a fresh copy of the fitted predictor did "
    "not reproduce a scored value when what the protocol hides from it was changed. "
    "‡ scored under an earlier protocol (see the note under the section's heading): rerun it "
    "to compare it with the other rows."
)


def main_legend() -> str:
    """The main table's caption: its metric columns' sentences (from their specs), then what the
    Δ columns, the reference rows and the markers mean ("REF": the reference predictor)."""
    return " ".join([*(s.caption for s in metric_specs.MAIN_METRICS if s.caption), ROWS_LEGEND])


# ---------------------------------------------------------------------------------------------
# aggregation


@dataclass
class Row:
    """One table row: a predictor (or one decoding variant of it) aggregated over seeds."""

    name: str
    kind: str
    variant: str | None
    params_key: str
    results: list[Result] = field(default_factory=list)
    label: str = ""
    base_label: str = ""  # the predictor's name (plus params), without the variant

    def figures(self, r: Result) -> dict[str, float]:
        """One result's figures as this row reads them: its variant's, or the predictor's own."""
        return figures(r, self.variant)

    def values(self, key: str) -> list[float]:
        """The values of one figure (`static.mae`, `timings.fit_s`: the tidy table's names)
        across seeds; results without it are skipped."""
        return [f[key] for r in self.results if key in (f := self.figures(r))]

    def scored_rows(self) -> list[Predictions | None]:
        """Each result's scored rows as this row predicts them (its variant's decoding), for
        paired comparisons; None where a result does not store them."""
        if self.variant is None:
            return [r.predictions for r in self.results]
        return [None if r.predictions is None else r.predictions.decoded(self.variant)
                for r in self.results]

    def noise_floor(self) -> Mapping[str, Any] | None:
        """A reference row's noise-floor bounds (None for predictors, and for references written
        before the in-sample bound existed)."""
        return self.results[0].metrics.noise_floor if self.kind == "reference" and \
            self.results else None

    @property
    def sort_mae(self) -> float | None:
        return mean(self.values("static.mae"))


def _row_label(row: Row) -> str | None:
    """What the row shows after the name: the predictor's own description from
    ``report["row_labels"]`` ("predict" for the main row, else the variant's name), taken from
    the lowest seed that has one; else the variant's name; None for a plain main row."""
    key = "predict" if row.variant is None else row.variant
    for r in row.results:  # sorted by seed
        text = (r.report.get("row_labels") or {}).get(key)
        if isinstance(text, str) and text.strip():
            return text
    return row.variant


def params_key(r: Result) -> str:
    """What tells apart runs of one predictor with other arguments (display-only ones, such as
    `progress`, do not)."""
    return config_hash(computing_params(r.predictor.params))


def build_rows(ok: list[Result]) -> tuple[list[Row], int]:
    """Group ok results into rows; per row and seed keep the newest result (reruns supersede).

    Returns the rows, in ranking order (`RANKED_BY`), and how many superseded results were
    ignored.
    """
    rows: dict[tuple[str, str, str | None, str], Row] = {}
    for r in ok:
        name, kind, pkey = r.predictor.name, r.kind, params_key(r)
        variants = sorted(r.metrics.variants.keys())
        for variant in [None, *variants]:
            key = (name, kind, variant, pkey)
            rows.setdefault(key, Row(name, kind, variant, pkey)).results.append(r)

    superseded = 0
    for row in rows.values():
        newest: dict[int, Result] = {}
        for r in sorted(row.results, key=lambda r: (r.created_at, r.source)):
            newest[r.seed] = r
        if row.kind == "reference":  # one reference per world, whatever seeds wrote it
            newest = {0: max(row.results, key=lambda r: (r.created_at, r.source))}
        if row.variant is None:
            superseded += len(row.results) - len(newest)
        row.results = [newest[s] for s in sorted(newest)]

    # Disambiguate a predictor name that was run with more than one parameter set.
    n_params: dict[str, set[str]] = defaultdict(set)
    for name, _, _, pkey in rows:
        n_params[name].add(pkey)
    for row in rows.values():
        described = _row_label(row)
        label = row.name if described is None else f"{row.name} ({described})"
        suffix = f" [params {row.params_key[:6]}]" if len(n_params[row.name]) > 1 else ""
        row.label, row.base_label = label + suffix, row.name + suffix

    first, then = (main_spec(key) for key in RANKED_BY)

    def order(row: Row) -> tuple[Any, ...]:
        value, fallback = first.rank_value(row), then.rank_value(row)
        if first.key == "static.mae" and (estimate := floor_estimate(row)) is not None:
            value = estimate["estimate"]  # the floor sits where the figure it shows does
        return (value is None, value if value is not None else
                (fallback if fallback is not None else math.inf), row.label)

    return sorted(rows.values(), key=order), superseded


# ---------------------------------------------------------------------------------------------
# the main table's cells


def non_causal(results: Iterable[Result]) -> bool:
    """True when the audit of what was scored (lenbench/scoring/audit.py) failed for one of
    `results`: a scored value moved when what the protocol hides from it changed."""
    return any(r.audit_failed for r in results)


# the blocks whose figures the main and distribution tables show
TABLE_BLOCKS = ("metrics.static", "metrics.variants")


def outdated_since(r: Result, blocks: Iterable[str] = TABLE_BLOCKS) -> list[int]:
    """The later protocols that changed the rules of a result's `blocks` since they were
    computed (a rescored result keeps the protocol of the blocks it could not recompute; a
    block no later protocol changed is current, whatever the result's own version)."""
    return sorted({v for block in blocks for v in r.outdated(block)})


def earlier_protocol(results: Iterable[Result],
                     blocks: Iterable[str] = TABLE_BLOCKS) -> list[Result]:
    """The results among `results` whose `blocks` hold figures scored under rules a later
    protocol changed (all of them, or the blocks a rescoring kept)."""
    blocks = tuple(blocks)
    return [r for r in results if outdated_since(r, blocks)]


def row_block(variant: str | None) -> str:
    """The block of the figures a row reads from its results: a variant's, or the static one."""
    return "metrics.variants" if variant is not None else "metrics.static"


def row_marks(row: Row) -> list[str]:
    """The markers after a row's name (the legend): † reads the next token, (non-causal) failed
    the audit, ‡ scored under an earlier protocol."""
    marks = []
    if any(r.predictor.reads_next_token for r in row.results):
        marks.append("†")
    if non_causal(row.results):
        marks.append("(non-causal)")
    if any(r.outdated(row_block(row.variant)) for r in row.results):
        marks.append("‡")
    return marks


def name_cell(row: Row) -> str:
    """The row's name as the main table shows it: references in italics, then the markers."""
    name = cell_text(row.label)
    if row.kind == "reference":
        name = f"*{name}* (ref)"
    for mark in row_marks(row):
        name += f" {mark}"
    if row.kind == "reference" and row.noise_floor() is None:
        name += " (leave-one-out only)"  # recorded before the in-sample bound existed
    return name


def metric_cell(row: Row, spec: MetricSpec) -> str:
    """The row's cell of one metric column; the noise floor shows its two bounds as its MAE and
    their joined interval as its CI."""
    bounds = row.noise_floor()
    estimate = floor_estimate(row)
    if estimate is not None and spec.key in ("static.mae", "static.mae_ci"):
        interval = estimate.get("ci")
        if spec.key == "static.mae":
            return f"{estimate['estimate']:.1f}"
        return DASH if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]"
    if bounds is not None and is_number(bounds.get("in_sample")):
        if spec.key == "static.mae":
            return f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}"
        if spec.key == "static.mae_ci":
            interval = bounds.get("interval")
            return DASH if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]"
    return spec.cell(row)


def floor_estimate(row: Row) -> Mapping[str, Any] | None:
    """A noise-floor row's single estimate (`scoring.noise_floor.extrapolated_floor`), where its
    world has prompts with enough samples for one; else None (the row shows its two bounds)."""
    est = (row.noise_floor() or {}).get("extrapolated")
    return est if isinstance(est, Mapping) and is_number(est.get("estimate")) else None


def main_header() -> list[str]:
    return ["Predictor", *(spec.label for spec in metric_specs.MAIN_METRICS), "Seeds"]


def main_align() -> list[str]:
    return [LEFT] + [RIGHT] * (len(metric_specs.MAIN_METRICS) + 1)


def row_cells(row: Row) -> list[str]:
    """The row in the main table, under `main_header()` (the paired Δ columns aside)."""
    return [name_cell(row), *(metric_cell(row, spec) for spec in metric_specs.MAIN_METRICS),
            str(len(row.results))]


def gap_share_cell(row: Row, const: Row, floor: Mapping[str, Any]) -> str:
    """The share of the reachable gap a row closes: (constant's MAE - the row's) / (constant's
    MAE - the floor's estimate), with a conservative interval: the ends of the paired gain's
    interval over the ends of the gap's (the floor's interval). A dash for reference rows."""
    c, p, f = mean(const.values("static.mae")), mean(row.values("static.mae")), floor["estimate"]
    if row.kind != "predictor" or c is None or p is None or c - f <= 0:
        return DASH
    share = (c - p) / (c - f)
    if row is const:
        return "0%"
    d = paired_rows(row.scored_rows(), const.scored_rows())
    if d is None or d["ci"] is None or not floor.get("ci") or c - floor["ci"][1] <= 0:
        return f"{100 * share:.0f}%"
    gain = (-d["ci"][1], -d["ci"][0])  # the paired gain over the constant
    gap = (c - floor["ci"][1], c - floor["ci"][0])
    lo = gain[0] / (gap[1] if gain[0] > 0 else gap[0])
    hi = gain[1] / (gap[0] if gain[1] > 0 else gap[1])
    return f"{100 * share:.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]"
