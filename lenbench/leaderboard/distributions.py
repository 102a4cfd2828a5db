"""The "Distributions" section: how well distributional predictors know their own uncertainty.

Per world, one row per predictor whose results carry ``metrics.distribution`` (the rows scored
and how many are censored, mean pinball loss, CRPS, central 50% and 80% interval coverage and
width, each with its bootstrap interval over prompts; bounds and values are means over seeds), a
paired CRPS difference to the sibling reference (the empirical distribution of each prompt's other
samples, written with the noise floor), and a PIT-histogram plot, one line per predictor. Lines
under the table state each row's population, how censored rows were scored, and what clipping
to [1, cap] moved.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lenbench.leaderboard.blocks import Block, Caption, Heading, Image, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text
from lenbench.leaderboard.plots import save_png
from lenbench.leaderboard.rows import Row, non_causal
from lenbench.results import Result
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import delta_text
from lenbench.scoring.metrics import paired_difference

_KEYS = ("pinball_mean", "crps", "coverage_50", "coverage_50_high", "coverage_50_nominal",
         "width_50", "coverage_80", "coverage_80_high", "coverage_80_nominal", "width_80", "n",
         "n_requests", "n_censored", "n_clipped_low", "n_clipped_high", "clipped_mass",
         "threshold", "runaway_auc", "q75_at_cap", "q90_at_cap")
_HEADER = ["Predictor", "Rows (censored)", "Mean pinball", "CRPS", "Δ CRPS vs siblings",
           "50% coverage", "50% width", "80% coverage", "80% width", "P(≥ cap) AUC", "Dyn. CRPS",
           "Dyn. 80% coverage", "Seeds"]
# an interval's upper end at the cap on at least this share of rows covers the censored rows
# by construction
AT_CAP_NEARLY_ALL = 0.95
UPPER = {"50": "q75_at_cap", "80": "q90_at_cap"}  # each interval's upper quantile
CAPTION = (
    "Scores of predicted length distributions, in tokens except coverage (static: total length; "
    "dynamic: remaining length, averaged per request first). Every scored row counts, censored "
    "ones included: Rows gives how many (requests for the dynamic scores), and in parentheses "
    "how many were cut at the length cap, whose true length is only known to be at least the "
    "cap. Each distribution is first clipped to [1, cap], as point predictions are: its mass "
    "beyond the cap sits at the cap and stands for \"the cap or beyond\". Mean pinball: the "
    "pinball loss averaged over the levels 0.1, 0.25, 0.5, 0.75, 0.9; ≥ marks a lower bound, as "
    "a censored row's loss is counted at the least it can be, q (c − Q) for a quantile Q below "
    "its cut-off c. CRPS: the continuous ranked probability score weighted to [1, cap) "
    "(threshold-weighted), which a censored row decides exactly, as its length lies beyond the "
    "range (lower is better; a point prediction within the cap scores its absolute error). "
    "50% / 80%: the central intervals [Q(0.25), Q(0.75)] and [Q(0.1), Q(0.9)], ends included. "
    "A censored row is covered when its interval reaches the cap and missed when it ends below; "
    "a range a–b% appears only when rows were cut below the cap, which neither rule decides "
    "(counted missed, then covered). A calibrated predictor covers its nominal share: the level "
    "itself, or more where intervals reach the cap and so also hold the mass beyond it "
    "(nominal, when it differs); the narrower the better at that coverage. ▲: the interval's "
    "upper end sits at the cap on nearly every row (95% or more), so it covers every censored "
    "row by construction, whatever the predictor knows about which answers run long; ▽: it "
    "reaches the cap on no row, so every censored row counts as missed. P(≥ cap) AUC: the AUC "
    "of each row's predicted P(L ≥ cap) for the answers that reached the cap against the rest "
    "(ties ½: 0.5 for a distribution that never reaches the cap); ≈ where a result rescored "
    "from an earlier protocol did not store P(L ≥ cap) and it was read from its five stored "
    "quantiles, clipped to the cap (rerun for the exact figure). [brackets]: "
    "bootstrap 95% intervals over prompts, bounds averaged over seeds. Δ CRPS vs siblings: this "
    "predictor's CRPS minus the sibling reference's on the rows both score, with a paired "
    "bootstrap interval over prompts and the predictor's seeds, **bold** where it excludes 0 "
    "and the predictor has several seeds (° one seed: the interval covers the prompts only). "
    "*siblings* (ref) is the "
    "empirical distribution of each prompt's other samples (leave-one-out; a censored sibling "
    "at its cut-off), scored on the rows of prompts with at least two samples: with few samples "
    "per prompt it is too narrow and coarse (one sibling is a point mass), so its coverage can "
    "fall short of nominal, or exceed it where lengths tie (a length equal to a sibling's lies "
    "on the interval's end, which counts as covered), and its CRPS overstates the best a "
    "prompt-only predictor can reach. The plot shows each predictor's PIT histogram: the "
    "mid-PIT (F(L-1) + F(L)) / 2 of an exact length L and, for a row censored at c, a seeded "
    "uniform draw over [F(c-1), 1], where a calibrated predictor's PIT of the unseen length "
    "lies (leaving censored rows out would empty the top bins); flat at 1 when calibrated, "
    "U-shaped when overconfident, peaked in the middle when too wide."
)


@dataclass
class DistRow:
    """One row of the section: a predictor (or the sibling reference) pooled over seeds."""

    label: str
    reference: bool
    seeds: int
    static: dict[str, float | None] = field(default_factory=dict)  # key and key_ci, seed means
    dynamic: dict[str, float | None] = field(default_factory=dict)
    delta_crps: dict[str, Any] | None = None  # paired_difference vs the siblings, or None
    pit: list[float] | None = None  # mean PIT histogram over seeds (static)
    approx_runaway: bool = False  # P(L >= cap) read from the stored quantiles by a rescoring


def _part(r: Result, part: str) -> Mapping[str, Any] | None:
    dist = r.metrics.distribution
    return None if dist is None else dist.static if part == "static" else dist.dynamic


def _pooled(results: list[Result], part: str) -> dict[str, Any]:
    """Seed means of each value, and of each interval's bounds, of one part of the metrics."""
    parts = [p for p in (_part(r, part) for r in results) if p is not None]
    out: dict[str, Any] = {}
    for key in _KEYS:
        vals = [p[key] for p in parts if is_number(p.get(key))]
        out[key] = statistics.fmean(vals) if vals else None
        cis = [p[f"{key}_ci"] for p in parts if isinstance(p.get(f"{key}_ci"), list)]
        out[f"{key}_ci"] = ([statistics.fmean(c[0] for c in cis),
                             statistics.fmean(c[1] for c in cis)] if cis else None)
    return out


def _row_crps(r: Result) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(CRPS, prompt ids, true lengths) of the rows the sibling reference scores too: the rows,
    censored ones included, of prompts with at least two samples (files written before censored
    rows were scored hold null there, and pair on the rest)."""
    p = r.predictions
    if p is None or p.crps is None or p.prompt_id is None:
        return None
    ids = np.asarray(p.prompt_id)
    true = np.asarray(p.true, dtype=np.float64)
    _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
    keep = counts[inverse.reshape(-1)] >= 2
    crps = np.array([np.nan if v is None else v for v in p.crps], dtype=np.float64)
    return crps[keep], ids[keep], true[keep]


def _paired_to_siblings(results: list[Result], siblings: Result | None
                        ) -> dict[str, Any] | None:
    """This predictor's CRPS (averaged over seeds, row by row) minus the siblings' on the same
    rows, with a paired bootstrap interval over prompts and this predictor's seeds; None when
    the rows do not match."""
    if siblings is None:
        return None
    ref = _row_crps(siblings)
    mine = [_row_crps(r) for r in results]
    if ref is None or not mine or any(m is None for m in mine):
        return None
    for m in mine:
        if not (np.array_equal(m[1], ref[1]) and np.array_equal(m[2], ref[2])):
            return None
    crps = np.stack([m[0] for m in mine])  # seeds x rows
    both = np.isfinite(crps).all(axis=0) & np.isfinite(ref[0])
    if not both.any():
        return None
    return paired_difference(crps[:, both], ref[0][both], ref[1][both])


def distribution_rows(rows: list[Row]) -> list[DistRow]:
    """The section's rows: predictors with distribution metrics sorted by CRPS (then dynamic
    CRPS), and the sibling reference last; empty when no predictor is distributional."""
    refs = [row for row in rows if row.kind == "reference" and row.variant is None
            and any(_part(r, "static") for r in row.results)]
    siblings = refs[0].results[0] if refs else None
    out = []
    for row in rows:
        if row.variant is not None or row.kind != "predictor":
            continue
        results = [r for r in row.results if _part(r, "static") or _part(r, "dynamic")]
        if not results:
            continue
        with_static = [r for r in results if _part(r, "static")]
        pits = [_part(r, "static")["pit_histogram"] for r in with_static]
        label = f"{row.label} (non-causal)" if non_causal(row.results) else row.label
        out.append(DistRow(label, False, len(results), _pooled(results, "static"),
                           _pooled(results, "dynamic"),
                           _paired_to_siblings(with_static, siblings) if with_static else None,
                           np.mean(pits, axis=0).tolist() if pits else None,
                           any(_p_cap_source(r) == "stored quantiles" for r in with_static)))
    if not out:
        return []

    def order(d: DistRow) -> tuple[Any, ...]:
        key = d.static.get("crps") if d.static.get("crps") is not None else d.dynamic.get("crps")
        return (key is None, key if key is not None else 0.0, d.label)

    out.sort(key=order)
    if siblings is not None:
        out.append(DistRow("siblings", True, 1, _pooled([siblings], "static"), {}, None,
                           _part(siblings, "static")["pit_histogram"]))
    return out


def _p_cap_source(r: Result) -> str | None:
    """Where a rescored result's P(L >= cap) came from (None: its run computed it)."""
    note = r.extra.get("rescored")
    return note.get("p_cap") if isinstance(note, Mapping) else None


def _value(m: dict[str, Any], key: str, percent: bool = False) -> str:
    value, ci = m.get(key), m.get(f"{key}_ci")
    if value is None:
        return DASH
    scale, unit = (100.0, "%") if percent else (1.0, "")
    text = f"{scale * value:.1f}{unit}"
    return text if ci is None else f"{text} [{scale * ci[0]:.1f}, {scale * ci[1]:.1f}]"


def _rows(m: dict[str, Any], key: str = "n") -> str:
    """How many rows (or requests) a part scored, and how many of them are censored."""
    n, cens = m.get(key), m.get("n_censored")
    if n is None:
        return DASH
    return f"{n:.0f}" if cens is None else f"{n:.0f} ({cens:.0f})"


def _pinball(m: dict[str, Any]) -> str:
    """The mean pinball loss, marked ≥ where censored rows make it a lower bound."""
    text = _value(m, "pinball_mean")
    return f"≥ {text}" if text != DASH and (m.get("n_censored") or 0) > 0 else text


def coverage_cell(m: dict[str, Any], name: str) -> str:
    """Coverage in percent: a range where censored rows cut below the cap left it undecided
    (the lower bound's interval joined to the upper's), and the nominal share where clipping
    moved it off the level."""
    key = f"coverage_{name}"
    low, high, nominal = m.get(key), m.get(f"{key}_high"), m.get(f"{key}_nominal")
    if low is None or high is None or abs(high - low) < 5e-4:
        text = _value(m, key, True)
    else:
        ci_low, ci_high = m.get(f"{key}_ci"), m.get(f"{key}_high_ci")
        text = f"{100 * low:.1f}–{100 * high:.1f}%"
        if ci_low and ci_high:
            text += f" [{100 * ci_low[0]:.1f}, {100 * ci_high[1]:.1f}]"
    if text != DASH and nominal is not None and abs(nominal - int(name) / 100) >= 5e-4:
        text += f" (nominal {100 * nominal:.1f}%)"
    mark = _cap_mark(m, name)
    return f"{text} {mark}" if text != DASH and mark else text


def _cap_mark(m: dict[str, Any], name: str) -> str:
    """▲ where the interval's upper end sits at the cap on nearly every row, ▽ where it never
    does although rows are censored; '' otherwise or when not recorded."""
    share = m.get(UPPER.get(name, ""))
    if share is None:
        return ""
    if share >= AT_CAP_NEARLY_ALL:
        return "▲"
    return "▽" if share == 0 and (m.get("n_censored") or 0) > 0 else ""


def _auc(m: dict[str, Any], approx: bool = False) -> str:
    value, ci = m.get("runaway_auc"), m.get("runaway_auc_ci")
    if value is None:
        return DASH
    text = f"{value:.2f}" if ci is None else f"{value:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"
    return f"≈ {text}" if approx else text


def _delta(d: dict[str, Any] | None) -> str:
    return DASH if d is None else delta_text(d, trained_reference=False)  # the siblings


def distribution_cells(d: DistRow) -> list[str]:
    name = f"*{cell_text(d.label)}* (ref)" if d.reference else cell_text(d.label)
    rows = _rows(d.static)
    if d.dynamic.get("n_requests") is not None:
        rows = f"{rows}; dyn. {_rows(d.dynamic, 'n_requests')}"
    return [name, rows, _pinball(d.static), _value(d.static, "crps"),
            "(reference)" if d.reference else _delta(d.delta_crps),
            coverage_cell(d.static, "50"), _value(d.static, "width_50"),
            coverage_cell(d.static, "80"), _value(d.static, "width_80"),
            _auc(d.static, d.approx_runaway),
            _value(d.dynamic, "crps"), coverage_cell(d.dynamic, "80"), str(d.seeds)]


def _population_lines(data: list[DistRow]) -> list[Block]:
    """Who was scored and how: each row's population (predictors alike are listed together),
    the censored rows' cut-off, and what clipping to [1, cap] moved (means per seed)."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for d in data:
        key = tuple(d.static.get(k) for k in ("n", "n_censored", "threshold")) + (d.reference,)
        if key[0] is not None:
            groups.setdefault(key, []).append("*siblings* (ref)" if d.reference else d.label)
    parts = []
    for (n, cens, top, reference), labels in groups.items():
        where = ("the rows of prompts with at least two samples" if reference
                 else "every test row")
        text = f"{', '.join(labels)}: {n:.0f} rows ({where}), {cens or 0:.0f} of them censored"
        if cens and top is not None:
            text += (f" and scored from their cut-off (the CRPS weighted to [1, {top:.0f}), "
                     "coverage and PIT as below, pinball as a lower bound)")
        parts.append(text)
    out = ["Scored rows: " + "; ".join(parts) + "."] if parts else []
    clipped = [f"{d.label} ({d.static['n_clipped_low'] or 0:.0f} below 1, "
               f"{d.static['n_clipped_high'] or 0:.0f} above the cap; "
               f"{100 * (d.static.get('clipped_mass') or 0):.1f}% of the mass)"
               for d in data if not d.reference
               and (d.static.get("n_clipped_low") or d.static.get("n_clipped_high"))]
    if clipped:
        out.append("Distributions clipped to [1, cap] before scoring (rows per seed whose "
                   "predicted mass reached beyond): " + "; ".join(clipped) + ".")
    out += _cap_lines(data)
    return [Text(text) for text in out]


def _cap_lines(data: list[DistRow]) -> list[str]:
    """Which predictors' upper quantiles sit at the cap on nearly every row (their censored
    rows are covered by construction), and which never reach it (their censored rows are all
    missed)."""
    full, never = [], []
    for d in data:
        q75, q90 = d.static.get("q75_at_cap"), d.static.get("q90_at_cap")
        if q90 is None or not d.static.get("n_censored"):
            continue
        if q90 >= AT_CAP_NEARLY_ALL:
            full.append(f"{d.label} (Q(0.9) on {100 * q90:.0f}% of rows, Q(0.75) on "
                        f"{100 * (q75 or 0):.0f}%)")
        elif q90 == 0:
            never.append(d.label)
    out = []
    if full:
        out.append("Upper quantiles at the cap on nearly every row (▲): " + "; ".join(full)
                   + ". Their intervals cover the censored rows by construction, so their "
                   "coverage says little about which answers run long; P(≥ cap) AUC does.")
    if never:
        out.append("No Q(0.9) at the cap on any row (▽): " + ", ".join(never) + ". Every "
                   "censored row counts as missed.")
    return out


def _pit_plot(data: list[DistRow], path: Path, title: str) -> bool:
    """PIT histograms as density lines, one per predictor, over the flat line of calibration."""
    from matplotlib.figure import Figure

    series = [d for d in data if d.pit]
    if not series:
        return False
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    for d in series:
        n = len(d.pit)
        xs = [(b + 0.5) / n for b in range(n)]
        ax.plot(xs, [n * share for share in d.pit], marker="o",
                linestyle="--" if d.reference else "-",
                label=f"{d.label} (ref)" if d.reference else d.label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle=":")
    ax.set_xlabel("PIT of the true length, bin centre")
    ax.set_ylabel("density (1 = calibrated)")
    ax.set_xlim(0, 1)
    ax.set_ylim(bottom=0)
    ax.set_title(f"Calibration, {title}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    save_png(fig, path)
    return True


def distributions_section(rows: list[Row], out_dir: Path, stem: str, written: set[Path],
                           title: str) -> list[Block]:
    """The section's blocks and its plot; nothing when no result is distributional."""
    data = distribution_rows(rows)
    if not data:
        return []
    table = Table(_HEADER, [distribution_cells(d) for d in data], caption="distributions")
    blocks = [Heading(3, "Distributions"), table, *_population_lines(data),
              Caption("distributions", CAPTION)]
    plot = out_dir / f"{stem}-pit.png"
    if _pit_plot(data, plot, title):
        written.add(plot)
        blocks.append(Image(f"PIT histograms, {title}", plot.name))
    return blocks
