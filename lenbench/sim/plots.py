"""PNG plots of scheduling results, drawn from `simulate_predictions` result dicts alone.

Plots read the JSON-serialisable results (not per-request arrays) so they can be redrawn from
saved result files. matplotlib is imported inside each function: the simulator needs numpy only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lenbench.runtime.figure_files import write_png

CLASS_TITLES = {"all": "all requests", "short": "short requests", "long": "long requests"}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: str | Path) -> Path:
    """Render to memory, then write atomically: a kill mid-plot never leaves a 0-byte PNG."""
    fig.tight_layout()
    written = write_png(fig, path, dpi=120)
    _pyplot().close(fig)
    return written


def plot_latency_cdfs(result: Mapping[str, Any], path: str | Path,
                      rows: Sequence[str] | None = None) -> Path:
    """End-to-end latency CDFs, one panel per class (all/short/long), one line per row
    (labelled with its policy), from the rows' pooled `e2e_quantiles`."""
    plt = _pyplot()
    names = list(rows or result["rows"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, cls in zip(axes, ("all", "short", "long")):
        for row in names:
            q = result["rows"][row].get("e2e_quantiles")
            if not q or q.get(cls) is None:
                continue
            ax.plot(q[cls], q["levels"], label=f"{row} ({result['rows'][row]['policy']})")
        ax.set_title(CLASS_TITLES[cls])
        ax.set_xlabel("end-to-end latency (s)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("fraction of requests")
    axes[-1].legend(fontsize=8, loc="lower right")
    return _save(fig, path)


def plot_p99_vs_load(results: Sequence[Mapping[str, Any]], path: str | Path,
                     metric: str = "e2e_p99_short", rows: Sequence[str] | None = None) -> Path:
    """A figure (default short-request P99) against load factor, one line per row with 95%
    intervals; `results` as returned by `evaluate.load_sweep`."""
    plt = _pyplot()
    ordered = sorted(results, key=lambda r: r["load_factor"])
    names = list(rows or ordered[0]["rows"])
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for row in names:
        xs, ys, lo, hi = [], [], [], []
        for res in ordered:
            fig_ = res["rows"].get(row, {}).get("figures", {}).get(metric)
            if not fig_ or fig_["mean"] is None:
                continue
            xs.append(res["load_factor"])
            ys.append(fig_["mean"])
            lo.append(fig_["mean"] - (fig_["ci95_low"] if fig_["ci95_low"] is not None
                                      else fig_["mean"]))
            hi.append((fig_["ci95_high"] if fig_["ci95_high"] is not None
                       else fig_["mean"]) - fig_["mean"])
        if xs:
            label = f"{row} ({ordered[0]['rows'][row]['policy']})"
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
    ax.set_xlabel("load factor (arrival rate / estimated saturation rate)")
    ax.set_ylabel(f"{metric} (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_p99_vs_quality(results: Mapping[str, Any] | Sequence[Mapping[str, Any]],
                        path: str | Path, metric: str = "e2e_p99_short") -> Path:
    """A figure (default short-request P99) against each predictor's Kendall tau, with
    horizontal lines for the prediction-free baseline and the oracle.

    `results` is one `simulate_predictions` result (e.g. a noisy-oracle sweep) or a sequence
    of them (one per predictor); baseline and oracle lines come from the first.
    """
    plt = _pyplot()
    many = [results] if isinstance(results, Mapping) else list(results)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    seen: set[str] = set()
    for res in many:
        for row, entry in res["rows"].items():
            if row in ("baseline", "oracle") or row in seen:
                continue
            tau = entry.get("quality", {}).get("kendall_tau")
            value = entry["figures"][metric]["mean"]
            if value is None:
                continue
            seen.add(row)
            x = 0.0 if tau is None else tau
            ax.scatter([x], [value])
            ax.annotate(row, (x, value), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ref = many[0]["rows"]
    for row, style in (("baseline", "--"), ("oracle", ":")):
        value = ref[row]["figures"][metric]["mean"]
        if value is not None:
            ax.axhline(value, linestyle=style, color="gray",
                       label=f"{row} ({ref[row]['policy']})")
    ax.set_xlabel("Kendall tau of predictions (constant predictor at 0)")
    ax.set_ylabel(f"{metric} (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_score_vs_quality(results: Mapping[str, Any] | Sequence[Mapping[str, Any]],
                          path: str | Path, rank: Mapping[str, float] | None = None,
                          rank_label: str = "rank score") -> Path:
    """Each predictor row's scheduling score (with its 95% interval over seeds) against a rank
    score of its predictions, with reference lines at 0 (baseline and constant) and 1 (oracle).

    `results` is one `simulate_predictions` result or a sequence of them (e.g. one per
    predictor and seed; a row name is labelled once); each is plotted on its own score metric.
    `rank` gives each row's rank score (named `rank_label` on the axis; a row it lacks is not
    plotted), so that the plot shares a table's rank column; without it, the simulator's Kendall
    tau of the row's predictions (the constant predictor at 0).
    """
    plt = _pyplot()
    many = [results] if isinstance(results, Mapping) else list(results)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    seen: set[str] = set()
    metrics: set[str] = set()
    for res in many:
        metric = res["score_metric"]
        for row, entry in res["rows"].items():
            if row in ("baseline", "oracle", "constant"):
                continue
            score = entry["score"][metric]
            value = score["value"]
            if rank is not None:
                x = rank.get(row)
            else:
                tau = entry.get("quality", {}).get("kendall_tau")
                x = 0.0 if tau is None else tau
            if value is None or x is None:
                continue
            metrics.add(metric)
            lo, hi = score["ci95_low"], score["ci95_high"]
            yerr = None if lo is None or hi is None else [[value - lo], [hi - value]]
            ax.errorbar([x], [value], yerr=yerr, marker="o", capsize=3)
            if row not in seen:
                seen.add(row)
                ax.annotate(row, (x, value), fontsize=7, xytext=(3, 3),
                            textcoords="offset points")
    ax.axhline(1.0, linestyle=":", color="gray", label="oracle (true lengths) = 1")
    ax.axhline(0.0, linestyle="--", color="gray", label="baseline (FCFS) and constant = 0")
    ax.set_xlabel(rank_label if rank is not None
                  else "Kendall tau of predictions (constant predictor at 0)")
    ax.set_ylabel("score: gain over baseline / oracle's gain (at most 1)"
                  + (f"\non {', '.join(sorted(metrics))}" if metrics else ""))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


# The panels of the value-of-prediction plot: (figure, title).
LOAD_PANELS = (("e2e_mean_all", "mean latency, all requests (s)"),
               ("e2e_p99_all", "P99 latency, all requests (s)"),
               ("ttft_mean_all", "mean time to first token (s; before the decode queue)"),
               ("e2e_mean_short", "mean latency, short requests (s)"),
               ("e2e_mean_long", "mean latency, long requests (s)"),
               ("e2e_p99_capped", "P99 latency, capped requests (s)"))


def plot_load_curves(curves: Mapping[str, Sequence[Mapping[str, Any]]], path: str | Path, *,
                     references: Sequence[str], headline_load: float | None = None,
                     title: str = "") -> Path:
    """Latency against offered load, one panel per figure of LOAD_PANELS, one line per curve
    (a row's points: {"load_factor", "figures"}): the `references` grey or dashed, the
    predictors in colour; a vertical line at the headline's load and at saturation (1)."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    greys = {"fcfs": ("black", "-"), "oracle": ("black", "--"),
             "short prompt first": ("0.45", ":")}
    noisy = [name for name in references if name not in greys]
    predictors = [name for name in curves if name not in references]
    colours = plt.get_cmap("tab10" if len(predictors) <= 10 else "tab20")
    for ax, (key, label) in zip(axes.flat, LOAD_PANELS):
        drawn = 0
        for name, points in curves.items():
            xs = [p["load_factor"] for p in points if p["figures"].get(key) is not None]
            ys = [p["figures"][key] for p in points if p["figures"].get(key) is not None]
            if not xs:
                continue
            drawn += 1
            if name in greys:
                colour, style = greys[name]
                ax.plot(xs, ys, color=colour, linestyle=style, linewidth=1.2, label=name)
            elif name in references:  # noisy oracles: darker the better they rank
                shade = 0.75 - 0.45 * noisy.index(name) / max(len(noisy) - 1, 1)
                ax.plot(xs, ys, color=str(round(shade, 2)), linestyle="-.", linewidth=1.1,
                        label=name)
            else:
                ax.plot(xs, ys, color=colours(predictors.index(name) % colours.N), marker="o",
                        markersize=3, linewidth=1.5, label=name)
        if not drawn:
            ax.text(0.5, 0.5, "no request in this class", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
        ax.axvline(1.0, color="0.8", linewidth=0.8)
        if headline_load is not None:
            ax.axvline(headline_load, color="tab:red", linewidth=0.8, linestyle="--")
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("offered load (x estimated saturation rate)")
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(6, len(labels)), fontsize=8,
               frameon=False)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.08 + 0.03 * (len(labels) // 7), 1, 1))
    written = write_png(fig, path, dpi=110)
    plt.close(fig)
    return written
