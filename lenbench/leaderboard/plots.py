"""The PNG plots beside the tables, written atomically so a killed render leaves no broken file."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from lenbench.leaderboard.rows import Row
from lenbench.runtime.figure_files import write_png

PLOT_PREFIX = "plot-"


# ---------------------------------------------------------------------------------------------
# plots


def save_png(fig: Any, path: Path) -> None:
    """Written atomically (a kill mid-plot never leaves a 0-byte PNG), without the matplotlib
    version in its metadata, so a rebuild with the same figures gives the same bytes."""
    write_png(fig, path, dpi=100, metadata={"Software": None})


def progress_plot(rows: list[Row], path: Path, title: str) -> bool:
    """Dynamic MAE by progress bin, one line per dynamic predictor; False when there is none."""
    from matplotlib.figure import Figure

    series = []
    for row in rows:
        if row.variant is not None:
            continue
        curves = [(r.metrics.dynamic or {}).get("mae_by_progress") for r in row.results]
        curves = [c for c in curves if c]
        if not curves:
            continue
        n_bins = max(len(c) for c in curves)
        ys = []
        for b in range(n_bins):
            vals = [c[b] for c in curves if b < len(c) and c[b] is not None]
            ys.append(statistics.fmean(vals) if vals else math.nan)
        xs = [100 * (b + 0.5) / n_bins for b in range(n_bins)]
        series.append((row.label, xs, ys))
    if not series:
        return False
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.subplots()
    for label, xs, ys in series:
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xlabel("progress t / L (%), bin centre")
    ax.set_ylabel("remaining-length MAE (tokens)")
    ax.set_xlim(0, 100)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    save_png(fig, path)
    return True


def scatter_plot(rows: list[Row], path: Path, title: str) -> bool:
    """Predicted vs true total length per predictor (lowest seed), log-log with the y = x line."""
    from matplotlib.figure import Figure

    panels = []
    for row in rows:
        if row.variant is not None:
            continue
        for r in row.results:  # results are sorted by seed
            preds = r.predictions
            pairs = [(t, p) for t, p in zip(preds.true if preds else [],
                                             preds.pred if preds else [], strict=False)
                     if isinstance(t, (int, float)) and isinstance(p, (int, float))
                     and math.isfinite(t) and math.isfinite(p)]
            if pairs:
                panels.append((f"{row.label} (seed {r.seed})", pairs))
                break
    if not panels:
        return False
    ncols = min(4, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(3.0 * ncols, 3.0 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    # Log axes cannot show 0: clip to 1 token, the smallest length a response can have.
    values = [v for _, pairs in panels for pair in pairs for v in pair]
    lo = max(1.0, min(values) / 1.5)
    hi = max(lo * 10, max(values) * 1.5)
    for ax, (label, pairs) in zip(axes.flat, panels, strict=False):
        ts = [max(t, lo) for t, _ in pairs]
        ps = [max(p, lo) for _, p in pairs]
        few = len(pairs) < 500  # small test sets need visible points, large ones need alpha
        ax.scatter(ts, ps, s=12 if few else 3, alpha=0.8 if few else 0.25, linewidths=0)
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, linestyle="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_title(label, fontsize="small")
        ax.set_xlabel("true length")
        ax.set_ylabel("predicted length")
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title)
    save_png(fig, path)
    return True
