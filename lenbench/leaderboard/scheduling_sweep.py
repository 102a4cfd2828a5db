"""The value-of-prediction curves of a world's scheduling section: latency against offered load
for FCFS, the oracle, noisy oracles of known C-index, prompt-length SJF and every predictor, as
a table and a plot (sim/sweep.py makes them)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from lenbench.leaderboard.blocks import LEFT, RIGHT, Block, Caption, Heading, Image, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, number
from lenbench.results import Result
from lenbench.results.checks import is_number

_REF_C = {"oracle": "1.000", "fcfs": DASH}


def _own_row(sched: dict[str, Any]) -> str | None:
    rows = list((sched.get("sweep") or {}).get("rows") or {})
    return rows[0] if rows else None


def pooled_curve(records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """One predictor's curve over its runs (predictor seeds): each figure's mean at each load."""
    curves = [rec["sweep"]["rows"][_own_row(rec)] for rec in records if _own_row(rec)]
    if not curves or len({len(c) for c in curves}) != 1:
        return None
    points = []
    for at_load in zip(*curves):
        figures: dict[str, float | None] = {}
        for key in at_load[0]["figures"]:
            values = [p["figures"].get(key) for p in at_load]
            figures[key] = (statistics.fmean(values)
                            if all(is_number(v) for v in values) else None)
        points.append({"load_factor": at_load[0]["load_factor"], "figures": figures})
    return points


def sweep_lines(scored: list[Result], main: Result, out_dir: Path, stem: str,
                written: set[Path], title: str) -> list[Block]:
    """"Value of prediction by load": the table of mean latency of all requests at each load,
    one line per curve, its caption, and the plot of six figures against load."""
    sweep = main.scheduling.get("sweep")
    if not sweep:
        return []
    loads = list(sweep["loads"])
    by_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    c_index: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        other = r.scheduling.get("sweep") or {}
        if other.get("loads") != loads or other.get("seeds") != sweep.get("seeds"):
            continue
        by_name[r.predictor.name].append(r.scheduling)
        c = (r.metrics.static or {}).get("c_index")
        if is_number(c) and math.isfinite(c):
            c_index[r.predictor.name].append(float(c))
    refs = sweep["references"]
    noisy = sorted((n for n in refs if n in (sweep.get("noisy") or {})),
                   key=lambda n: sweep["noisy"][n].get("c_index") or 0.0)
    order = ["fcfs", "short prompt first", *noisy, "oracle"]
    curves: dict[str, list[dict[str, Any]]] = {
        name: refs[name] for name in [*order, *sorted(set(refs) - set(order))] if name in refs}
    head = sweep.get("headline_load")
    at = loads.index(head) if head in loads else len(loads) - 1  # where the table's order is read
    pooled = {name: curve for name in by_name if (curve := pooled_curve(by_name[name]))}

    def latency(name: str) -> float:  # the predictors fastest first at the headline's load
        value = pooled[name][at]["figures"].get("e2e_mean_all")
        return value if is_number(value) else math.inf

    for name in sorted(pooled, key=lambda n: (latency(n), n)):
        curves[name] = pooled[name]
    header = ["Curve", "C-index",
              *(f"{lf:g}" + (" (headline)" if head is not None and lf == head else "")
                for lf in loads)]
    body = []
    for name, points in curves.items():
        if name in refs:
            label = f"*{name}* (ref)"
            c = sweep.get("noisy", {}).get(name, {}).get("c_index")
            c_text = number(c, 3) if is_number(c) else _REF_C.get(name, DASH)
        else:
            label = cell_text(name)
            c_text = number(statistics.fmean(c_index[name]), 3) if c_index[name] else DASH
        cells = [f"{p['figures']['e2e_mean_all']:.2f}"
                 if is_number(p["figures"].get("e2e_mean_all")) else DASH for p in points]
        body.append([label, c_text, *cells])
    gains = sweep.get("oracle_gain") or []
    gain_s = sweep.get("oracle_gain_s") or []
    body.append(["*oracle's gain over FCFS*", DASH,
                 *(DASH if not is_number(g) else f"{s:.2f} s ({100 * g:.0f}%)"
                   for g, s in zip(gains, gain_s))])
    n_seeds = len(sweep.get("seeds") or [])
    rule = sweep.get("rule")
    caption = (
        f"Mean end-to-end latency of all requests (seconds) when the same traffic "
        f"({sweep.get('n_requests')} requests drawn from the test rows per simulator seed, "
        f"mean over {n_seeds} seeds) arrives at each offered load, in multiples of the "
        f"cluster's estimated saturation rate, under {sweep.get('policy')} with guard "
        f"{sweep.get('starvation')}. fcfs: first come, first served; oracle: shortest first by "
        f"the true lengths; noisy C=…: the true lengths times log-normal noise tuned so that "
        f"the C-index on the test rows is the one shown, which maps a predictor's C-index "
        f"column to seconds; short prompt first: shortest prompt first, what a scheduler "
        f"knows without a predictor; each predictor: its own predictions, mean over its seeds, "
        f"fastest first at the headline's load. "
        f"Loads above 1 are overload: the queue grows for the whole run, so those figures hold "
        f"for a run of {sweep.get('n_requests')} requests, not a steady state. The last line "
        f"is the oracle's gain over FCFS in seconds and as a share. "
        + (f"The headline score above is at {rule}." if rule else "")
        + " The plot adds the P99, the time to first token (the prefill instances emit the "
        "first token before a request queues for decoding, so no decode order changes it) "
        "and the classes.")
    lines: list[Block] = [Heading(4, "Value of prediction by load"),
                          Table(header, body, [LEFT, RIGHT] + [RIGHT] * len(loads),
                                caption="scheduling_sweep"),
                          Caption("scheduling_sweep", caption)]
    plot = out_dir / f"{stem}-load-curves.png"
    try:
        from lenbench.sim.plots import plot_load_curves

        plot_load_curves(curves, plot, references=[n for n in curves if n in refs],
                         headline_load=head, title=f"Latency against offered load, {title}")
        written.add(plot)
        lines.append(Image(f"Latency against offered load, {title}", plot.name))
    except (KeyError, TypeError, ValueError) as exc:  # a partial record
        lines.append(Text(f"(load plot skipped: {type(exc).__name__}: {exc})"))
    return lines
