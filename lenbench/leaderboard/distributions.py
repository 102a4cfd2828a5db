"""The "Distributions" section: how well distributional predictors know their own uncertainty.

Per world, one row per predictor whose results carry ``metrics.distribution`` (mean pinball loss,
CRPS, central 50% and 80% interval coverage and width, each with its bootstrap interval over
prompts; bounds and values are means over seeds), a paired CRPS difference to the sibling
reference (the empirical distribution of each prompt's other samples, written with the noise
floor), and a PIT-histogram plot, one line per predictor.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lenbench.leaderboard.plots import _save_png
from lenbench.leaderboard.rows import DASH, _cell, _Row, _table, non_causal
from lenbench.metrics import paired_difference
from lenbench.result_checks import is_number

_KEYS = ("pinball_mean", "crps", "coverage_50", "width_50", "coverage_80", "width_80")
_HEADER = ["Predictor", "Mean pinball", "CRPS", "Δ CRPS vs siblings", "50% coverage",
           "50% width", "80% coverage", "80% width", "Dyn. CRPS", "Dyn. 80% coverage", "Seeds"]
CAPTION = (
    "Scores of predicted length distributions, in tokens except coverage (static: total length; "
    "dynamic: remaining length, averaged per request first). Mean pinball: the pinball loss "
    "averaged over the levels 0.1, 0.25, 0.5, 0.75, 0.9. CRPS: the continuous ranked "
    "probability score (lower is better; a point prediction scores its absolute error). 50% / "
    "80%: the central intervals [Q(0.25), Q(0.75)] and [Q(0.1), Q(0.9)]; a calibrated predictor "
    "covers 50% / 80% of the true lengths, and the narrower the better at that coverage. "
    "[brackets]: bootstrap 95% intervals over prompts, bounds averaged over seeds. Δ CRPS vs "
    "siblings: this predictor's CRPS minus the sibling reference's on the same rows, with a "
    "paired bootstrap interval over prompts, **bold** where it excludes 0. *siblings* (ref) is "
    "the empirical distribution of each prompt's other samples (leave-one-out): with few samples "
    "per prompt it is too narrow and coarse (one sibling is a point mass), so its coverage falls "
    "short of nominal and its CRPS overstates the best a prompt-only predictor can reach. "
    "Censored rows are not scored. The plot shows each predictor's PIT histogram (the mid-PIT "
    "(F(L-1) + F(L)) / 2 of the true length L): flat at 1 when calibrated, U-shaped when "
    "overconfident, peaked in the middle when too wide."
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


def _part(r: dict[str, Any], part: str) -> dict[str, Any] | None:
    dist = (r.get("metrics") or {}).get("distribution")
    value = dist.get(part) if isinstance(dist, dict) else None
    return value if isinstance(value, dict) else None


def _pooled(results: list[dict[str, Any]], part: str) -> dict[str, Any]:
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


def _row_crps(r: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(CRPS, prompt ids, true lengths) of the rows the sibling reference scores too: the
    uncensored rows of prompts with at least two of them."""
    p = r.get("predictions") or {}
    if not all(k in p for k in ("crps", "prompt_id", "true")):
        return None
    ids = np.asarray(p["prompt_id"])
    true = np.asarray(p["true"], dtype=np.float64)
    exact = ~np.asarray(p.get("censored") or np.zeros(ids.size), dtype=bool)
    _, inverse, counts = np.unique(ids[exact], return_inverse=True, return_counts=True)
    keep = np.zeros(ids.size, bool)
    keep[np.flatnonzero(exact)[counts[inverse] >= 2]] = True
    crps = np.array([np.nan if v is None else v for v in p["crps"]], dtype=np.float64)
    return crps[keep], ids[keep], true[keep]


def _paired_to_siblings(results: list[dict[str, Any]], siblings: dict[str, Any] | None
                        ) -> dict[str, Any] | None:
    """This predictor's CRPS (averaged over seeds, row by row) minus the siblings' on the same
    rows, with a paired bootstrap interval over prompts; None when the rows do not match."""
    if siblings is None:
        return None
    ref = _row_crps(siblings)
    mine = [_row_crps(r) for r in results]
    if ref is None or not mine or any(m is None for m in mine):
        return None
    for m in mine:
        if not (np.array_equal(m[1], ref[1]) and np.array_equal(m[2], ref[2])):
            return None
    crps = np.mean([m[0] for m in mine], axis=0)
    both = np.isfinite(crps) & np.isfinite(ref[0])
    if not both.any():
        return None
    return paired_difference(crps[both], ref[0][both], ref[1][both])


def distribution_rows(rows: list[_Row]) -> list[DistRow]:
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
                           np.mean(pits, axis=0).tolist() if pits else None))
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


def _value(m: dict[str, Any], key: str, percent: bool = False) -> str:
    value, ci = m.get(key), m.get(f"{key}_ci")
    if value is None:
        return DASH
    scale, unit = (100.0, "%") if percent else (1.0, "")
    text = f"{scale * value:.1f}{unit}"
    return text if ci is None else f"{text} [{scale * ci[0]:.1f}, {scale * ci[1]:.1f}]"


def _delta(d: dict[str, Any] | None) -> str:
    if d is None:
        return DASH
    mean = f"{d['mean']:+.1f}"
    if d["ci"] is None:
        return mean
    return f"{f'**{mean}**' if d['excludes_zero'] else mean} [{d['ci'][0]:+.1f}, {d['ci'][1]:+.1f}]"


def distribution_cells(d: DistRow) -> list[str]:
    name = f"*{_cell(d.label)}* (ref)" if d.reference else _cell(d.label)
    return [name, _value(d.static, "pinball_mean"), _value(d.static, "crps"),
            "(reference)" if d.reference else _delta(d.delta_crps),
            _value(d.static, "coverage_50", True), _value(d.static, "width_50"),
            _value(d.static, "coverage_80", True), _value(d.static, "width_80"),
            _value(d.dynamic, "crps"), _value(d.dynamic, "coverage_80", True), str(d.seeds)]


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
    _save_png(fig, path)
    return True


def _distributions_section(rows: list[_Row], out_dir: Path, stem: str, written: set[Path],
                           title: str) -> list[str]:
    """The markdown of the section and its plot; nothing when no result is distributional."""
    data = distribution_rows(rows)
    if not data:
        return []
    table = _table(_HEADER, [":---"] + ["---:"] * (len(_HEADER) - 1),
                   [distribution_cells(d) for d in data])
    lines = ["### Distributions", "", table, "", CAPTION, ""]
    plot = out_dir / f"{stem}-pit.png"
    if _pit_plot(data, plot, title):
        written.add(plot)
        lines += [f"![PIT histograms, {title}]({plot.name})", ""]
    return lines
