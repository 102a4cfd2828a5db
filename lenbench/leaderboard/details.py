"""The "Predictor details" section: what each predictor reported about itself, flattened into
tables (flat entries, fixed-population and speculative-decoding tables, MAE by observed steps)."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from lenbench.leaderboard.blocks import LEFT, Block, Caption, Heading, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, mean, mean_std, number, seconds
from lenbench.leaderboard.dynamic_steps import paired_steps_lines
from lenbench.leaderboard.rows import Row, non_causal
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import choose_reference

# ---------------------------------------------------------------------------------------------
# predictor details: what each predictor reported about itself


MAX_LIST = 8  # longer lists in a report are per-row or per-step data, not a figure to print
SPEC_KEYS = ("tau", "alpha", "acc", "expected_acceptance")
MAX_DEPTH_COLUMNS = 6  # deeper drafts show the mean over depths instead of one column per depth


def _is_scalar(x: Any) -> bool:
    return x is None or isinstance(x, (str, bool, int, float))


def _flatten(report: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], int]:
    """Dotted keys -> printable values (scalars and short lists of scalars), and how many entries
    were left out as too long or not flat. ``row_labels`` (used by the tables) and the figures
    the speculative-decoding table shows are skipped here."""
    out: dict[str, Any] = {}
    skipped = 0
    for key in sorted(report, key=_natural):
        value, dotted = report[key], f"{prefix}{key}"
        if dotted == "row_labels":
            continue
        if dotted.startswith("speculative.") and _speculative_key(dotted):
            continue
        if isinstance(value, dict):
            sub, n = _flatten(value, dotted + ".")
            out.update(sub)
            skipped += n
        elif isinstance(value, list):
            if len(value) <= MAX_LIST and all(_is_scalar(v) for v in value):
                out[dotted] = value
            else:
                skipped += 1
        else:
            out[dotted] = value
    return out, skipped


def _natural(key: Any) -> tuple[tuple[int, Any], ...]:
    """Sort key that orders digits by value: "t=8" before "t=16", "alpha_2" before "alpha_10"."""
    parts = re.split(r"(\d+)", str(key))
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in parts)


def _speculative_key(dotted: str) -> bool:
    parts = dotted.split(".")[1:]
    if parts and parts[0] == "random_init":
        parts = parts[1:]
    return len(parts) == 1 and parts[0] in SPEC_KEYS


def _fmt_value(x: Any) -> str:
    if x is None:
        return DASH
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return f"{x:.4g}"
    if isinstance(x, list):
        return "[" + ", ".join(_fmt_value(v) for v in x) + "]"
    return str(x)


def _seed_values(values: list[Any]) -> str:
    """One cell from a report entry's values over seeds: numbers as mean ± sample std, anything
    else as its distinct values in seed order."""
    present = [v for v in values if v is not None]
    nums = [float(v) for v in present if is_number(v) and math.isfinite(v)]
    if present and len(nums) == len(present):
        if len(nums) == 1 or len(set(nums)) == 1:
            return _fmt_value(present[0])
        return f"{statistics.fmean(nums):.4g} ± {statistics.stdev(nums):.2g}"
    shown: list[str] = []
    for v in values:
        text = _fmt_value(v)
        if text not in shown:
            shown.append(text)
    return " / ".join(shown) if shown else DASH


def _observed_steps_table(rows: list[Row], reference: str | None = None) -> list[Block]:
    """Remaining-length MAE at t = 0, 8, 16, 32, ... observed steps, one row per dynamic
    predictor (the ForeLen/PLP warm-up reading), with the requests still decoding at each t;
    before it, the same over one population, and paired with the `reference` predictor."""
    entries = []
    for row in rows:
        if row.variant is not None:
            continue
        dyn = [r.metrics.dynamic or {} for r in row.results]
        dyn = [d for d in dyn if isinstance(d.get("observed_steps"), list)]
        if dyn:
            entries.append((row, dyn))
    if not entries:
        return []
    ts = sorted({int(t) for _, dyn in entries for d in dyn for t in d["observed_steps"]})

    def at(d: dict[str, Any], key: str, t: int) -> Any:
        values = d.get(key) or []
        i = d["observed_steps"].index(t) if t in d["observed_steps"] else None
        return values[i] if i is not None and i < len(values) else None

    body = []
    for row, dyn in entries:
        cells = [cell_text(row.label)]
        if non_causal(row.results):
            cells[0] += " (non-causal)"
        for t in ts:
            vals = [at(d, "mae_by_observed_steps", t) for d in dyn]
            cells.append(mean_std([float(v) for v in vals if is_number(v)]))
        cells.append(seconds(mean(row.values("timings.predict_ms_per_step"))))
        body.append(cells)
    first = entries[0][1][0]
    counts = [at(first, "n_by_observed_steps", t) for t in ts]
    foot = [["*requests decoding at t*"] + [DASH if c is None else str(c) for c in counts]
            + [""]]
    header = ["Predictor"] + [f"t = {t}" for t in ts] + ["ms/step"]
    ref = choose_reference([row.name for row in rows], reference) if reference else None
    return [Heading(4, "Dynamic MAE by observed steps"),
            *_fixed_population_table(entries),
            *paired_steps_lines(rows, ref),
            Table(header, body, foot=foot, caption="observed_steps"),
            Caption("observed_steps",
                    "MAE of the remaining length L − t at exactly t generated tokens, over the "
                    "requests still decoding at t (last row; from the lowest-seed result), mean "
                    "± std over seeds. Each column covers a different population (short requests "
                    "leave as t grows), so compare predictors within a column, not a predictor "
                    "across columns. ms/step: the predictor's own latency per decoding step.")]


def _fixed_population_table(entries: list[tuple[Row, list[dict[str, Any]]]]) -> list[Block]:
    """The same reading over one population (requests longer than T, metrics._fixed_population),
    so a predictor can be followed across columns."""
    fixed = [(row, [d["fixed_population"] for d in dyn if d.get("fixed_population")])
             for row, dyn in entries]
    fixed = [(row, f) for row, f in fixed if f]
    if not fixed:
        return []
    first = fixed[0][1][0]
    ts = first["observed_steps"]
    body = []
    for row, pops in fixed:
        same = [p for p in pops if p["observed_steps"] == ts and p["t_max"] == first["t_max"]]
        cells = [cell_text(row.label)]
        for i in range(len(ts)):
            cells.append(mean_std([float(p["mae"][i]) for p in same if is_number(p["mae"][i])]))
        body.append(cells)
    header = ["Predictor"] + [f"t = {t}" for t in ts]
    return [Table(header, body, caption="fixed_population"),
            Caption("fixed_population",
                    f"Over one population: the {first['n_requests']} requests longer than "
                    f"{first['t_max']} tokens (the longest observed t that at least half of the "
                    "test requests outlive), so every column covers the same requests. The table "
                    "below covers all requests still decoding at each t.")]


def _depth_list(spec: dict[str, Any], key: str) -> list[float] | None:
    values = spec.get(key)
    if isinstance(values, list) and values and all(is_number(v) for v in values):
        return [float(v) for v in values]
    return None


def _speculative_table(entries: list[tuple[str, list[dict[str, Any]]]]) -> list[Block]:
    """τ and per-depth acceptance for predictors that report a ``speculative`` dict, each beside
    its random-init draft (``speculative.random_init``) when reported."""
    table_rows: list[tuple[str, list[dict[str, Any]]]] = []
    for label, specs in entries:
        table_rows.append((cell_text(label), specs))
        rand = [s["random_init"] for s in specs if isinstance(s.get("random_init"), dict)]
        if rand:
            table_rows.append((f"*{cell_text(label)}, random init* (ref)", rand))
    # (column key, index base, header symbol)
    groups = [("alpha", 1, "α"), ("acc", 0, "acc"), ("expected_acceptance", 0, "E[acc]")]
    depth = {key: max((len(_depth_list(s, key) or []) for _, specs in table_rows for s in specs),
                      default=0) for key, _, _ in groups}
    header = ["Predictor", "τ"]
    for key, base, sym in groups:
        if 0 < depth[key] <= MAX_DEPTH_COLUMNS:
            header += [f"{sym}_{base + i}" for i in range(depth[key])]
        elif depth[key]:
            header.append(f"mean {sym}")
    body = []
    for label, specs in table_rows:
        taus = [float(s["tau"]) for s in specs if is_number(s.get("tau"))]
        cells = [label, mean_std(taus, 2)]
        for key, _, _ in groups:
            lists = [v for v in (_depth_list(s, key) for s in specs) if v]
            if 0 < depth[key] <= MAX_DEPTH_COLUMNS:
                for i in range(depth[key]):
                    cells.append(number(mean([v[i] for v in lists if i < len(v)]), 3))
            elif depth[key]:
                cells.append(number(mean([statistics.fmean(v) for v in lists]), 3))
        body.append(cells)
    return [Heading(4, "Speculative decoding quality"),
            Table(header, body, caption="speculative"),
            Caption("speculative",
                    "As reported by each predictor (`report()[\"speculative\"]`), means over "
                    "seeds: τ is the mean acceptance length (tokens per drafting round), α_i the "
                    "acceptance rate at draft depth i, acc_i the offline top-1 agreement of the "
                    "draft with the target at depth i, E[acc]_i the expected acceptance at depth "
                    "i from that agreement. The random-init row is the same draft untrained: the "
                    "floor the training lifts.")]


def details_section(rows: list[Row], reference: str | None = None) -> list[Block]:
    """Predictor details: the dynamic observed-steps tables (paired with the `reference`
    predictor where its step errors are stored), the speculative-decoding table and, per
    predictor, the flat entries of its ``report`` (mean ± std over seeds for numbers)."""
    mains = [row for row in rows if row.variant is None and row.kind == "predictor"]
    mains.sort(key=lambda row: row.base_label)
    blocks = _observed_steps_table(mains, reference)
    spec_entries = []
    for row in mains:
        specs = [r.report.get("speculative") for r in row.results]
        specs = [s for s in specs if isinstance(s, dict)]
        if specs:
            spec_entries.append((row.base_label, specs))
    if spec_entries:
        blocks += _speculative_table(spec_entries)
    for row in mains:
        reports = [r.report for r in row.results]
        flat = [_flatten(rep) for rep in reports]
        keys = sorted({k for f, _ in flat for k in f}, key=_natural)
        if not keys:
            continue
        seeds = ", ".join(str(r.seed) for r in row.results)
        body = [[f"`{cell_text(k)}`", cell_text(_seed_values([f.get(k) for f, _ in flat]), 600)]
                for k in keys]
        blocks += [Heading(4, cell_text(row.base_label)),
                  Text(f"Reported by the predictor (seeds {seeds})."),
                  Table(["Entry", "Value"], body, [LEFT, LEFT])]
        skipped = max(n for _, n in flat)
        if skipped:
            blocks.append(Text(f"{skipped} longer list(s) are in the result files only."))
    if not blocks:
        return []
    return [Heading(3, "Predictor details"),
            Text("Figures each predictor measured about itself (`Predictor.report()`, stored in "
                 "its result file) and dynamic predictors' error by observed steps. Numbers are "
                 "means over seeds (± sample std when they differ); other entries show their "
                 "distinct values in seed order."), *blocks]
