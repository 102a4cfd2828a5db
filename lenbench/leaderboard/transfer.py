"""The transfer section of a world: its predictors, fitted on its train split, scored on a second
prompt set answered by the same model (the `transfer` block of each result, lenbench.transfer).

One table per transfer set (by name and label fingerprint), headed by both sets' names, keys and
fingerprints, with each predictor's transfer MAE beside its in-world MAE from the same results.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from lenbench.leaderboard.blocks import Block, Caption, Heading, Table, Text
from lenbench.leaderboard.rows import DASH, _build_rows, _cell, _mean, _mean_std, _num, _Row
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


def _fingerprint(block: dict[str, Any]) -> str:
    return str((block.get("fingerprints") or {}).get("labels") or "")


def _as_result(r: dict[str, Any]) -> dict[str, Any]:
    """A result whose metrics and predictions are its transfer scores, keeping its in-world MAE
    under `in_world`, so the main table's row code aggregates it."""
    t = r["transfer"]
    own = r.get("metrics") or {}
    return {**r, "metrics": {**(t.get("metrics") or {}), "variants": {}},
            "predictions": t.get("predictions"),
            "in_world": {"mae": (own.get("static") or {}).get("mae"),
                         "dynamic_mae": (own.get("dynamic") or {}).get("mae"),
                         "noise_floor": own.get("noise_floor")}}


def _mae_cells(row: _Row) -> tuple[str, str]:
    """(MAE, 95% CI) of a row; a noise floor shows its bounds and their joined interval."""
    bounds = (row.results[0].get("metrics") or {}).get("noise_floor") \
        if row.kind == "reference" else None
    if isinstance(bounds, dict) and is_number(bounds.get("in_sample")):
        interval = bounds.get("interval")
        return (f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}",
                DASH if not interval else f"[{interval[0]:.1f}, {interval[1]:.1f}]")
    cis = [c for r in row.results
           if isinstance(c := ((r.get("metrics") or {}).get("static") or {}).get("mae_ci"), list)
           and len(c) == 2]
    ci = DASH if not cis else (f"[{statistics.fmean(c[0] for c in cis):.1f}, "
                               f"{statistics.fmean(c[1] for c in cis):.1f}]")
    return _mean_std(row.values("static", "mae")), ci


def _in_world(row: _Row) -> str:
    """The same results' in-world MAE; a noise floor's in-world bounds."""
    bounds = (row.results[0].get("in_world") or {}).get("noise_floor")
    if row.kind == "reference" and isinstance(bounds, dict) and is_number(bounds.get("in_sample")):
        return f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}"
    return _mean_std(row.values("in_world", "mae"))


def _change(row: _Row) -> str:
    away, home = _mean(row.values("static", "mae")), _mean(row.values("in_world", "mae"))
    if row.kind == "reference" or away is None or home is None:
        return DASH
    return f"{away - home:+.1f}"


def _set_line(side: str, block: dict[str, Any]) -> str:
    keys = block.get("keys") or {}
    fp = _fingerprint(block)
    return (f"{side} **{_cell(block.get('name'))}**: promptset `{keys.get('promptset')}`, "
            f"labels `{block.get('key')}`" + (f" (fingerprint `{fp[:8]}`)" if fp else "")
            + f", {block.get('n_rows')} rows from {block.get('n_prompts')} prompts")


def _table_lines(results: list[dict[str, Any]], reference: str, min_prompts: int
                 ) -> list[Block]:
    newest = max(results, key=lambda r: (r["created_at"], r["_source"]))["transfer"]
    home, away = newest["trained_on"], newest["scored_on"]
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
    scored = [r for r in results if (r["transfer"].get("metrics") or {}).get("static")]
    failed = [r for r in results if r["transfer"].get("error")]
    rows, _ = _build_rows([_as_result(r) for r in scored])
    names = sorted({r.name for r in rows if r.kind == "predictor"})
    ref_name = choose_reference(names, reference)
    ref = next((r for r in rows if r.name == ref_name and r.kind == "predictor"), None)
    body = []
    for row in rows:
        mae, ci = _mae_cells(row)
        delta = DASH
        if ref is not None and row.kind == "predictor":
            delta = "(reference)" if row is ref else paired_cell(row.results, ref.results)
        name = _cell(row.base_label) + (" (ref)" if row.kind == "reference" else "")
        body.append([f"*{name}*" if row.kind == "reference" else name, mae, ci, delta,
                     _in_world(row), _change(row),
                     _num(_mean(row.values("static", "kendall_tau")), 3),
                     _mean_std(row.values("dynamic", "mae")),
                     _mean_std(row.values("in_world", "dynamic_mae")), str(len(row.results))])
    header = ["Predictor", "Transfer MAE", "95% CI", f"Δ vs {ref_name or 'reference'}",
              "In-world MAE", "Change", "Kendall τ", "Dynamic MAE", "In-world dynamic MAE",
              "Seeds"]
    lines += [Table(header, body, caption="transfer"),
              Caption("transfer", TRANSFER_LEGEND.replace("REF", ref_name or "the reference"))]
    if failed:
        lines += [Text("Failed on the transfer set (their in-world scores stand): " + "; ".join(
            f"{_cell(r['predictor']['name'])} (seed {r['seed']}): "
            f"{_cell(r['transfer']['error'].get('type'))}: "
            f"{_cell((str(r['transfer']['error'].get('message', '')).splitlines() or [''])[0])}"
            for r in sorted(failed, key=lambda r: (r["predictor"]["name"], r["seed"]))) + ".")]
    return lines


def _transfer_section(ok: list[dict[str, Any]], reference: str, min_prompts: int
                      ) -> list[Block]:
    """One table per transfer set scored from this world's results (none: no lines)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in ok:
        t = r.get("transfer")
        if isinstance(t, dict) and isinstance(t.get("scored_on"), dict):
            groups[(str(t["scored_on"].get("name")), _fingerprint(t["scored_on"]))].append(r)
    lines: list[Block] = []
    for key in sorted(groups):
        lines += _table_lines(groups[key], reference, min_prompts)
    return lines
