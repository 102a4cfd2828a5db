"""The transfer section of a world: its predictors, fitted on its train split, scored on a second
prompt set answered by the same model (the `transfer` block of each result, lenbench.transfer).

One table per transfer set (by name and label fingerprint), headed by both sets' names, keys and
fingerprints, with each predictor's transfer MAE beside its in-world MAE from the same results.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lenbench.leaderboard.blocks import Block, Caption, Heading, Table, Text
from lenbench.leaderboard.rows import (
    DASH,
    _build_rows,
    _cell,
    _mean,
    _mean_std,
    _num,
    _Row,
    finite,
)
from lenbench.results import Metrics, Result, Transfer
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import choose_reference, paired_cell

TRANSFER_LEGEND = (
    "Transfer MAE: static MAE on the transfer set's scored rows (mean ± std over seeds); 95% CI: "
    "bootstrap over its prompts. Δ vs REF: paired difference to the reference predictor on the "
    "same transfer rows, **bold** where its 95% interval excludes 0. In-world MAE: the same runs' "
    "MAE on this world's test split; Change: transfer minus in-world (positive: worse on the "
    "other prompt set). Dynamic: remaining-length MAE on the transfer set and in-world. "
    "*noise_floor* (ref): the in-sample – leave-one-out bounds on the transfer set's uncensored "
    "rows of prompts with two samples or more."
)


def _fingerprint(block: Mapping[str, Any]) -> str:
    return str((block.get("fingerprints") or {}).get("labels") or "")


def _as_result(r: Result, t: Transfer) -> Result:
    """A result whose metrics and predictions are its transfer scores `t`, so the main table's
    row code aggregates it."""
    return replace(r, metrics=replace(t.metrics or Metrics(), variants={}),
                   predictions=t.predictions)


def _mae_cells(row: _Row) -> tuple[str, str]:
    """(MAE, 95% CI) of a row; a noise floor shows its bounds and their joined interval."""
    bounds = row.results[0].metrics.noise_floor if row.kind == "reference" else None
    if bounds is not None and is_number(bounds.get("in_sample")):
        interval = bounds.get("interval")
        return (f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}",
                DASH if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]")
    cis = [c for r in row.results
           if isinstance(c := (r.metrics.static or {}).get("mae_ci"), list) and len(c) == 2]
    ci = DASH if not cis else (f"[{statistics.fmean(c[0] for c in cis):.1f}, "
                               f"{statistics.fmean(c[1] for c in cis):.1f}]")
    return _mean_std(row.values("static", "mae")), ci


def _in_world_values(row: _Row, home: dict[int, Result], part: str) -> list[float]:
    """The MAE (`part`: "static" or "dynamic") the row's results scored in their own world."""
    metrics = [home[id(r)].metrics for r in row.results]
    return finite(((m.static if part == "static" else m.dynamic) or {}).get("mae")
                  for m in metrics)


def _in_world(row: _Row, home: dict[int, Result]) -> str:
    """The same results' in-world MAE; a noise floor's in-world bounds."""
    bounds = home[id(row.results[0])].metrics.noise_floor
    if row.kind == "reference" and bounds is not None and is_number(bounds.get("in_sample")):
        return f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}"
    return _mean_std(_in_world_values(row, home, "static"))


def _change(row: _Row, home: dict[int, Result]) -> str:
    away = _mean(row.values("static", "mae"))
    own = _mean(_in_world_values(row, home, "static"))
    if row.kind == "reference" or away is None or own is None:
        return DASH
    return f"{away - own:+.1f}"


def _set_line(side: str, block: Mapping[str, Any]) -> str:
    keys = block.get("keys") or {}
    fp = _fingerprint(block)
    return (f"{side} **{_cell(block.get('name'))}**: promptset `{keys.get('promptset')}`, "
            f"labels `{block.get('key')}`" + (f" (fingerprint `{fp[:8]}`)" if fp else "")
            + f", {block.get('n_rows')} rows from {block.get('n_prompts')} prompts")


def _table_lines(results: list[tuple[Result, Transfer]], reference: str, min_prompts: int
                 ) -> list[Block]:
    """The table of one transfer set: its results, each with its transfer scores."""
    _, newest = max(results, key=lambda rt: (rt[0].created_at, rt[0].source))
    home, away = newest.trained_on, newest.scored_on
    lines = [Heading(3, f"Transfer: trained on {_cell(home['name'])}, scored on "
                        f"{_cell(away['name'])}"),
             Text(f"Fitted on {_cell(home['name'])}'s train split ({home.get('n_train')} "
                  f"rows; val {home.get('n_val')}) and scored on every prompt of "
                  f"{_cell(away['name'])}, all of its splits: {away.get('n_scored')} rows from "
                  f"{away.get('n_scored_prompts')} prompts ({away.get('n_prompts_left_out')} "
                  f"prompts left out: also in {_cell(home['name'])}'s train or val split). Same "
                  "model and generation settings."),
             Text(_set_line("Trained on", home) + "."),
             Text(_set_line("Scored on", away) + f", mean L {away.get('mean_L') or 0:.1f}.")]
    if is_number(away.get("n_scored_prompts")) and away["n_scored_prompts"] < min_prompts:
        lines.append(Text(f"**Too few transfer prompts to rank predictors** "
                          f"({away['n_scored_prompts']} < {min_prompts}): differences here are "
                          "anecdotes, not rankings."))
    pairs = [(r, t) for r, t in results if t.metrics and t.metrics.static]
    scored = [_as_result(r, t) for r, t in pairs]
    in_world = {id(away): r for away, (r, _) in zip(scored, pairs)}  # for the in-world scores
    rows, _ = _build_rows(scored)
    names = sorted({r.name for r in rows if r.kind == "predictor"})
    ref_name = choose_reference(names, reference)
    ref = next((r for r in rows if r.name == ref_name and r.kind == "predictor"), None)
    body = []
    for row in rows:
        mae, ci = _mae_cells(row)
        delta = DASH
        if ref is not None and row.kind == "predictor":
            delta = "(reference)" if row is ref else paired_cell(row.scored_rows(),
                                                                  ref.scored_rows())
        name = _cell(row.base_label) + (" (ref)" if row.kind == "reference" else "")
        body.append([f"*{name}*" if row.kind == "reference" else name, mae, ci, delta,
                     _in_world(row, in_world), _change(row, in_world),
                     _num(_mean(row.values("static", "kendall_tau")), 3),
                     _mean_std(row.values("dynamic", "mae")),
                     _mean_std(_in_world_values(row, in_world, "dynamic")),
                     str(len(row.results))])
    header = ["Predictor", "Transfer MAE", "95% CI", f"Δ vs {ref_name or 'reference'}",
              "In-world MAE", "Change", "Kendall τ", "Dynamic MAE", "In-world dynamic MAE",
              "Seeds"]
    lines += [Table(header, body, caption="transfer"),
              Caption("transfer", TRANSFER_LEGEND.replace("REF", ref_name or "the reference"))]
    errors = sorted(((r, t.error) for r, t in results if t.error),
                    key=lambda re: (re[0].predictor.name, re[0].seed))
    if errors:
        lines += [Text("Failed on the transfer set (their in-world scores stand): " + "; ".join(
            f"{_cell(r.predictor.name)} (seed {r.seed}): {_cell(error.type)}: "
            f"{_cell((error.message.splitlines() or [''])[0])}" for r, error in errors) + ".")]
    return lines


def _transfer_section(ok: list[Result], reference: str, min_prompts: int) -> list[Block]:
    """One table per transfer set scored from this world's results (none: no lines)."""
    groups: dict[tuple[str, str], list[tuple[Result, Transfer]]] = defaultdict(list)
    for r in ok:
        if (t := r.transfer) is not None:
            groups[(str(t.scored_on.get("name")), _fingerprint(t.scored_on))].append((r, t))
    lines: list[Block] = []
    for key in sorted(groups):
        lines += _table_lines(groups[key], reference, min_prompts)
    return lines
