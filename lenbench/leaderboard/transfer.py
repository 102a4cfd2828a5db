"""The transfer section of a world: its predictors, fitted on its train split, scored on a second
prompt set answered by the same model (the `transfer` block of each result, lenbench.transfer).

One table per transfer set (by name and label fingerprint), headed by both sets' names, keys and
fingerprints, with each predictor's transfer MAE beside its in-world MAE from the same results.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lenbench.leaderboard.blocks import Block, Caption, Heading, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, mean, mean_std
from lenbench.leaderboard.metric_specs import main_spec
from lenbench.leaderboard.rows import Row, build_rows, metric_cell
from lenbench.leaderboard.table import figures
from lenbench.results import Metrics, Result, Transfer
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import choose_reference, paired_cell

TRANSFER_LEGEND = (
    "Transfer MAE: static MAE on the transfer set's scored rows (mean ± std over seeds); 95% CI: "
    "bootstrap over its prompts. Δ vs REF: paired difference to the reference predictor on the "
    "same transfer rows, **bold** where its 95% interval excludes 0 and both sides have several "
    "seeds (° a side has one seed: the interval covers the prompts only). In-world MAE: the "
    "same runs' "
    "MAE on this world's test split; Change: transfer minus in-world (positive: worse on the "
    "other prompt set). C-index: Harrell's C on the transfer rows, as in the main table. "
    "Dynamic: remaining-length MAE on the transfer set and in-world. "
    "*noise_floor* (ref): the in-sample – leave-one-out bounds on the transfer set's rows of "
    "prompts with two samples or more, censored rows counted at their cut-off as the predictors' "
    "are."
)


def _fingerprint(block: Mapping[str, Any]) -> str:
    return str((block.get("fingerprints") or {}).get("labels") or "")


def _as_result(r: Result, t: Transfer) -> Result:
    """A result whose metrics and predictions are its transfer scores `t`, so the main table's
    row code aggregates it."""
    return replace(r, metrics=replace(t.metrics or Metrics(), variants={}),
                   predictions=t.predictions)


def _in_world_values(row: Row, home: dict[int, Result], key: str) -> list[float]:
    """A figure (`static.mae`, `dynamic.mae`) of the row's results in their own world."""
    return [f[key] for r in row.results if key in (f := figures(home[id(r)]))]


def _in_world(row: Row, home: dict[int, Result]) -> str:
    """The same results' in-world MAE; a noise floor's in-world bounds."""
    bounds = home[id(row.results[0])].metrics.noise_floor
    if row.kind == "reference" and bounds is not None and is_number(bounds.get("in_sample")):
        return f"{bounds['in_sample']:.1f} – {bounds['leave_one_out']:.1f}"
    return mean_std(_in_world_values(row, home, "static.mae"))


def _change(row: Row, home: dict[int, Result]) -> str:
    away = mean(row.values("static.mae"))
    own = mean(_in_world_values(row, home, "static.mae"))
    if row.kind == "reference" or away is None or own is None:
        return DASH
    return f"{away - own:+.1f}"


SELECTION_IGNORED = ("split", "split_salt")  # the transfer set is scored on all of its splits


def selections(config: Mapping[str, Any]) -> tuple[str, str]:
    """How the two prompt sets' dataset settings differ (`min_words 1, max_words 60` against
    `min_words 61, max_words 120`), from a result's config: two sets drawn from one source share
    its name, and only these settings tell them apart. Empty where not recorded."""
    home, away = config.get("dataset") or {}, config.get("transfer") or {}
    keys = sorted(k for k in set(home) | set(away)
                  if k not in SELECTION_IGNORED and home.get(k) != away.get(k))

    def text(cfg: Mapping[str, Any]) -> str:
        return ", ".join(f"{k} {cfg.get(k, DASH)}" for k in keys) if cfg else ""

    return text(home), text(away)


def _named(block: Mapping[str, Any], selection: str) -> str:
    return cell_text(block.get("name")) + (f" ({selection})" if selection else "")


def _set_line(side: str, block: Mapping[str, Any], selection: str = "") -> str:
    keys = block.get("keys") or {}
    fp = _fingerprint(block)
    return (f"{side} **{_named(block, selection)}**: promptset `{keys.get('promptset')}`, "
            f"labels `{block.get('key')}`" + (f" (fingerprint `{fp[:8]}`)" if fp else "")
            + f", {block.get('n_rows')} rows from {block.get('n_prompts')} prompts")


def _table_lines(results: list[tuple[Result, Transfer]], reference: str, min_prompts: int
                 ) -> list[Block]:
    """The table of one transfer set: its results, each with its transfer scores."""
    result, newest = max(results, key=lambda rt: (rt[0].created_at, rt[0].source))
    home, away = newest.trained_on, newest.scored_on
    picked = selections(result.config)
    heading = (_named(home, picked[0]), _named(away, picked[1])) \
        if home.get("name") == away.get("name") else (cell_text(home["name"]),
                                                       cell_text(away["name"]))
    lines = [Heading(3, f"Transfer: trained on {heading[0]}, scored on {heading[1]}"),
             Text(f"Fitted on {cell_text(home['name'])}'s train split ({home.get('n_train')} "
                  f"rows; val {home.get('n_val')}) and scored on every prompt of "
                  f"{cell_text(away['name'])}, all of its splits: {away.get('n_scored')} rows from "
                  f"{away.get('n_scored_prompts')} prompts ({away.get('n_prompts_left_out')} "
                  f"prompts left out: also in {cell_text(home['name'])}'s train or val split). "
                  "Same model and generation settings."),
             Text(_set_line("Trained on", home, picked[0]) + "."),
             Text(_set_line("Scored on", away, picked[1])
                  + f", mean L {away.get('mean_L') or 0:.1f}.")]
    if is_number(away.get("n_scored_prompts")) and away["n_scored_prompts"] < min_prompts:
        lines.append(Text(f"**Too few transfer prompts to rank predictors** "
                          f"({away['n_scored_prompts']} < {min_prompts}): differences here are "
                          "anecdotes, not rankings."))
    pairs = [(r, t) for r, t in results if t.metrics and t.metrics.static]
    scored = [_as_result(r, t) for r, t in pairs]
    in_world = {id(away): r for away, (r, _) in zip(scored, pairs)}  # for the in-world scores
    rows, _ = build_rows(scored)
    names = sorted({r.name for r in rows if r.kind == "predictor"})
    ref_name = choose_reference(names, reference)
    ref = next((r for r in rows if r.name == ref_name and r.kind == "predictor"), None)
    body = []
    mae, ci, tau, dynamic = (main_spec(key) for key in ("static.mae", "static.mae_ci",
                                                        "static.c_index", "dynamic.mae"))
    for row in rows:
        delta = DASH
        if ref is not None and row.kind == "predictor":
            delta = "(reference)" if row is ref else paired_cell(row.scored_rows(),
                                                                  ref.scored_rows())
        name = cell_text(row.base_label) + (" (ref)" if row.kind == "reference" else "")
        body.append([f"*{name}*" if row.kind == "reference" else name, metric_cell(row, mae),
                     metric_cell(row, ci), delta, _in_world(row, in_world),
                     _change(row, in_world), metric_cell(row, tau), metric_cell(row, dynamic),
                     mean_std(_in_world_values(row, in_world, "dynamic.mae")),
                     str(len(row.results))])
    header = ["Predictor", "Transfer MAE", "95% CI", f"Δ vs {ref_name or 'reference'}",
              "In-world MAE", "Change", "C-index", "Dynamic MAE", "In-world dynamic MAE",
              "Seeds"]
    lines += [Table(header, body, caption="transfer"),
              Caption("transfer", TRANSFER_LEGEND.replace("REF", ref_name or "the reference"))]
    errors = sorted(((r, t.error) for r, t in results if t.error),
                    key=lambda re: (re[0].predictor.name, re[0].seed))
    if errors:
        lines += [Text("Failed on the transfer set (their in-world scores stand): " + "; ".join(
            f"{cell_text(r.predictor.name)} (seed {r.seed}): {cell_text(error.type)}: "
            f"{cell_text((error.message.splitlines() or [''])[0])}" for r, error in errors) + ".")]
    return lines


def transfer_section(ok: list[Result], reference: str, min_prompts: int) -> list[Block]:
    """One table per transfer set scored from this world's results (none: no lines)."""
    groups: dict[tuple[str, str], list[tuple[Result, Transfer]]] = defaultdict(list)
    for r in ok:
        if (t := r.transfer) is not None:
            groups[(str(t.scored_on.get("name")), _fingerprint(t.scored_on))].append((r, t))
    lines: list[Block] = []
    for key in sorted(groups):
        lines += _table_lines(groups[key], reference, min_prompts)
    return lines
