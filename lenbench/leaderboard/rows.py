"""Per-predictor rows aggregated over seeds and the cell formatting every leaderboard table
shares, kept apart so each section builds on the same rows and cells."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lenbench.results import PROTOCOL_VERSION, Predictions, Result, config_hash
from lenbench.results.checks import is_number

DASH = "—"
MIN_RANKING_PROMPTS = 30  # fewer test prompts than this: the table says it cannot rank

LEGEND = (
    "MAE in tokens (static: total length; dynamic: remaining length by the OUTLETS protocol, the "
    "per-request mean over decoding steps averaged over requests), shown as mean ± sample std over "
    "seeds (the value alone for one seed). 95% CI: bootstrap interval over prompts, bounds "
    "averaged over seeds. Kendall τ-b, Spearman and Within ±25% (share of requests with "
    "|pred − true| ≤ 0.25·true) are means over seeds. Fit time, ms/request and parameter count "
    f"come from the runs; {DASH} means not applicable. Δ vs REF: this predictor's MAE minus the "
    "reference predictor's on the same test rows (errors averaged over seeds row by row), with a "
    "paired bootstrap 95% interval over prompts; **bold** where the interval excludes 0 "
    "(negative: better than the reference). Rows in *italics* marked (ref) are references, not "
    "predictors: *noise_floor* bounds the irreducible error, the MAE of knowing each prompt's "
    "median length, from an optimistic in-sample estimate (the best single prediction for all "
    "of the prompt's samples, the row's own included: their median when none is censored) to a "
    "pessimistic leave-one-out one (the median of the other samples); its interval joins the "
    "outer ends of their bootstrap intervals. It is scored on the rows of prompts with at least "
    "two samples, censored ones included and scored as the predictors' are. A prompt-only "
    "predictor cannot beat the "
    "true floor in expectation; one that reads y_1 (after prefill) knows more than the prompt. "
    "† at step t this predictor reads token y_{t+1} (an EAGLE-3 draft's input), one token more "
    "than a probe on the target's state at n−1+t: its dynamic MAE uses more information. "
    "(non-causal): the audit of what was scored failed: a fresh copy of the fitted predictor did "
    "not reproduce a scored value when what the protocol hides from it was changed. "
    "‡ scored under an earlier protocol (see the note under the section's heading): rerun it "
    "to compare it with the other rows."
)


# ---------------------------------------------------------------------------------------------
# aggregation


def finite(values: Iterable[Any]) -> list[float]:
    """The finite numbers among `values`, as floats: missing and null figures are skipped."""
    return [float(v) for v in values if is_number(v) and math.isfinite(v)]


@dataclass
class _Row:
    """One table row: a predictor (or one decoding variant of it) aggregated over seeds."""

    name: str
    kind: str
    variant: str | None
    params_key: str
    results: list[Result] = field(default_factory=list)
    label: str = ""
    base_label: str = ""  # the predictor's name (plus params), without the variant

    def static(self, r: Result) -> Mapping[str, Any] | None:
        if self.variant is None:
            return r.metrics.static
        return r.metrics.variants.get(self.variant)

    def dynamic(self, r: Result) -> Mapping[str, Any] | None:
        return None if self.variant else r.metrics.dynamic

    def values(self, section: str, key: str) -> list[float]:
        """The finite values of one metric across seeds (`section`: "static", "dynamic" or
        "timings"); missing or null entries are skipped."""
        if section == "timings":
            return finite(getattr(r.timings, key) for r in self.results)
        read = self.static if section == "static" else self.dynamic
        return finite((read(r) or {}).get(key) for r in self.results)

    def scored_rows(self) -> list[Predictions | None]:
        """Each result's scored rows, for paired comparisons."""
        return [r.predictions for r in self.results]

    @property
    def sort_mae(self) -> float | None:
        vals = self.values("static", "mae")
        return statistics.fmean(vals) if vals else None



def _row_label(row: _Row) -> str | None:
    """What the row shows after the name: the predictor's own description from
    ``report["row_labels"]`` ("predict" for the main row, else the variant's name), taken from
    the lowest seed that has one; else the variant's name; None for a plain main row."""
    key = "predict" if row.variant is None else row.variant
    for r in row.results:  # sorted by seed
        text = (r.report.get("row_labels") or {}).get(key)
        if isinstance(text, str) and text.strip():
            return text
    return row.variant


def _mean(vals: Sequence[float]) -> float | None:
    return statistics.fmean(vals) if vals else None


def _params_key(r: Result) -> str:
    return config_hash(r.predictor.params)


def _build_rows(ok: list[Result]) -> tuple[list[_Row], int]:
    """Group ok results into rows; per row and seed keep the newest result (reruns supersede).

    Returns the rows and how many superseded results were ignored.
    """
    rows: dict[tuple[str, str, str | None, str], _Row] = {}
    for r in ok:
        name, kind, pkey = r.predictor.name, r.kind, _params_key(r)
        variants = sorted(r.metrics.variants.keys())
        for variant in [None, *variants]:
            key = (name, kind, variant, pkey)
            rows.setdefault(key, _Row(name, kind, variant, pkey)).results.append(r)

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

    def order(row: _Row) -> tuple[Any, ...]:
        mae = row.sort_mae
        dyn = _mean(row.values("dynamic", "mae"))
        return (mae is None, mae if mae is not None else (dyn if dyn is not None else math.inf),
                row.label)

    return sorted(rows.values(), key=order), superseded


# ---------------------------------------------------------------------------------------------
# formatting


def _num(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def _mean_std(vals: Sequence[float], digits: int = 1) -> str:
    """"mean ± std" with the sample std (n-1) over seeds; the bare value for a single seed."""
    if not vals:
        return DASH
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f}"
    return f"{statistics.fmean(vals):.{digits}f} ± {statistics.stdev(vals):.{digits}f}"


def _time(x: float | None) -> str:
    if x is None:
        return DASH
    if x < 1:  # sub-millisecond latencies must not all print as 0.00
        return f"{x:.2g}"
    if x < 10:
        return f"{x:.2f}"
    return f"{x:.1f}" if x < 1000 else f"{x:.0f}"


def _count(x: float | None) -> str:
    if x is None:
        return DASH
    for scale, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.1f}{unit}"
    return f"{x:.0f}"


def _cell(text: Any, limit: int = 200) -> str:
    """Text safe inside a markdown table cell: one line, pipes escaped, bounded length."""
    s = " ".join(str(text).split())
    s = s if len(s) <= limit else s[:limit - 3] + "..."
    return s.replace("|", "\\|")


def non_causal(results: Iterable[Result]) -> bool:
    """True when the audit of what was scored (lenbench/scoring/audit.py) failed for one of
    `results`: a scored value moved when what the protocol hides from it changed."""
    return any(r.audit_failed for r in results)


def earlier_protocol(results: Iterable[Result]) -> list[Result]:
    """The results among `results` scored under an earlier protocol than this lenbench's."""
    return [r for r in results if r.protocol_version < PROTOCOL_VERSION]


def row_marks(row: _Row) -> list[str]:
    """The markers after a row's name (LEGEND): † reads the next token, (non-causal) failed the
    audit, ‡ scored under an earlier protocol."""
    marks = []
    if any(r.predictor.reads_next_token for r in row.results):
        marks.append("†")
    if non_causal(row.results):
        marks.append("(non-causal)")
    if earlier_protocol(row.results):
        marks.append("‡")
    return marks


def _row_cells(row: _Row) -> list[str]:
    cis = [(row.static(r) or {}).get("mae_ci") for r in row.results]
    cis = [c for c in cis if isinstance(c, list) and len(c) == 2]
    ci = DASH
    if cis:
        lo, hi = statistics.fmean(c[0] for c in cis), statistics.fmean(c[1] for c in cis)
        ci = f"[{lo:.1f}, {hi:.1f}]"
    within = _mean(row.values("static", "within_25"))
    name = _cell(row.label)
    mae = _mean_std(row.values("static", "mae"))
    bounds = (row.results[0].metrics.noise_floor
              if row.kind == "reference" and row.results else None)
    if row.kind == "reference":
        name = f"*{name}* (ref)"
    for mark in row_marks(row):
        name += f" {mark}"
    if row.kind == "reference" and bounds is None:
        name += " (leave-one-out only)"  # recorded before the in-sample bound existed
    if bounds is not None and is_number(bounds.get("in_sample")):
        mae = f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}"
        interval = bounds.get("interval")
        ci = DASH if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]"
    return [
        name,
        mae,
        ci,
        _num(_mean(row.values("static", "kendall_tau")), 3),
        _num(_mean(row.values("static", "spearman")), 3),
        DASH if within is None else f"{100 * within:.1f}%",
        _mean_std(row.values("dynamic", "mae")),
        _time(_mean(row.values("timings", "fit_s"))),
        _time(_mean(row.values("timings", "predict_ms_per_request"))),
        _count(_mean(row.values("timings", "n_parameters"))),
        str(len(row.results)),
    ]


_HEADER = ["Predictor", "Static MAE", "95% CI", "Kendall τ", "Spearman", "Within ±25%",
           "Dynamic MAE", "Fit (s)", "ms/request", "Params", "Seeds"]
_ALIGN = [":---"] + ["---:"] * (len(_HEADER) - 1)
