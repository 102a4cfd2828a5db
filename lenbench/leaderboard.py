"""Results folder -> leaderboard: markdown tables per (dataset, model) and PNG plots beside them.

The leaderboard is a pure function of the results folder: no clock, no absolute path
and no machine state goes into README.md, and everything is sorted, so rebuilding from the same
folder gives byte-identical markdown and a diff of the leaderboard is a diff of the results.
Failed runs and unreadable files are listed, never dropped, so missing coverage stays visible.
Per (dataset, model), "Predictor details" shows what each predictor reported about itself
(`Predictor.report()`: flat entries, a speculative-decoding table) and every dynamic predictor's
MAE by observed steps; a report's ``row_labels`` name its rows in the main table.
"""

from __future__ import annotations

import argparse
import io
import math
import re
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lenbench.comparisons import DEFAULT_REFERENCE, choose_reference, paired_cell
from lenbench.results import config_hash, load_results, safe_name
from lenbench.stages import atomic_write_bytes

__all__ = ["build_leaderboard", "main"]

DASH = "—"
PLOT_PREFIX = "plot-"

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
    "median length, from an optimistic in-sample estimate (the median of all of the prompt's "
    "samples, the row's own included) to a pessimistic leave-one-out one (the median of the "
    "other samples); its interval joins the outer ends of their bootstrap intervals. It is "
    "scored on the uncensored rows of prompts with at least two of them. A prompt-only predictor cannot beat the "
    "true floor in expectation; one that reads y_1 (after prefill) knows more than the prompt. "
    "† at step t this predictor reads token y_{t+1} (an EAGLE-3 draft's input), one token more "
    "than a probe on the target's state at n−1+t: its dynamic MAE uses more information."
)


# ---------------------------------------------------------------------------------------------
# aggregation


@dataclass
class _Row:
    """One table row: a predictor (or one decoding variant of it) aggregated over seeds."""

    name: str
    kind: str
    variant: str | None
    params_key: str
    results: list[dict[str, Any]] = field(default_factory=list)
    label: str = ""
    base_label: str = ""  # the predictor's name (plus params), without the variant

    def static(self, r: dict[str, Any]) -> dict[str, Any] | None:
        metrics = r.get("metrics") or {}
        if self.variant is None:
            return metrics.get("static")
        return (metrics.get("variants") or {}).get(self.variant)

    def values(self, section: str, key: str) -> list[float]:
        """The finite values of one metric across seeds; missing or null entries are skipped."""
        out = []
        for r in self.results:
            if section == "static":
                m = self.static(r)
            elif section == "dynamic":
                m = None if self.variant else (r.get("metrics") or {}).get("dynamic")
            else:
                m = r.get(section)
            value = (m or {}).get(key)
            if _is_num(value) and math.isfinite(value):
                out.append(float(value))
        return out

    @property
    def sort_mae(self) -> float | None:
        vals = self.values("static", "mae")
        return statistics.fmean(vals) if vals else None


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _report(r: dict[str, Any]) -> dict[str, Any]:
    report = r.get("report")
    return report if isinstance(report, dict) else {}


def _row_label(row: _Row) -> str | None:
    """What the row shows after the name: the predictor's own description from
    ``report["row_labels"]`` ("predict" for the main row, else the variant's name), taken from
    the lowest seed that has one; else the variant's name; None for a plain main row."""
    key = "predict" if row.variant is None else row.variant
    for r in row.results:  # sorted by seed
        text = (_report(r).get("row_labels") or {}).get(key)
        if isinstance(text, str) and text.strip():
            return text
    return row.variant


def _mean(vals: Sequence[float]) -> float | None:
    return statistics.fmean(vals) if vals else None


def _params_key(r: dict[str, Any]) -> str:
    return config_hash((r.get("predictor") or {}).get("params") or {})


def _build_rows(ok: list[dict[str, Any]]) -> tuple[list[_Row], int]:
    """Group ok results into rows; per row and seed keep the newest result (reruns supersede).

    Returns the rows and how many superseded results were ignored.
    """
    rows: dict[tuple[str, str, str | None, str], _Row] = {}
    for r in ok:
        name, kind, pkey = r["predictor"]["name"], r["kind"], _params_key(r)
        variants = sorted(((r.get("metrics") or {}).get("variants") or {}).keys())
        for variant in [None, *variants]:
            key = (name, kind, variant, pkey)
            rows.setdefault(key, _Row(name, kind, variant, pkey)).results.append(r)

    superseded = 0
    for row in rows.values():
        newest: dict[int, dict[str, Any]] = {}
        for r in sorted(row.results, key=lambda r: (r["created_at"], r["_source"])):
            newest[r["seed"]] = r
        if row.kind == "reference":  # one reference per world, whatever seeds wrote it
            newest = {0: max(row.results, key=lambda r: (r["created_at"], r["_source"]))}
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


def _row_cells(row: _Row) -> list[str]:
    cis = [(row.static(r) or {}).get("mae_ci") for r in row.results]
    cis = [c for c in cis if isinstance(c, list) and len(c) == 2]
    ci = DASH
    if cis:
        ci = f"[{statistics.fmean(c[0] for c in cis):.1f}, {statistics.fmean(c[1] for c in cis):.1f}]"
    within = _mean(row.values("static", "within_25"))
    name = _cell(row.label)
    mae = _mean_std(row.values("static", "mae"))
    bounds = ((row.results[0].get("metrics") or {}).get("noise_floor")
              if row.kind == "reference" and row.results else None)
    if row.kind == "reference":
        name = f"*{name}* (ref)"
    if any((r.get("predictor") or {}).get("reads_next_token") for r in row.results):
        name += " †"
    if any((r.get("causality") or {}).get("passed") is False for r in row.results):
        name += " (non-causal)"  # lenbench.causality: its dynamic estimates read the future
    if row.kind == "reference" and not isinstance(bounds, dict):
        name += " (leave-one-out only)"  # recorded before the in-sample bound existed
    if isinstance(bounds, dict) and _is_num(bounds.get("in_sample")):
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


def _table(header: Sequence[str], align: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _predictor_row(sched: dict[str, Any]) -> dict[str, Any] | None:
    """The headline entry of the predictor itself (not baseline/oracle/constant)."""
    refs = ("baseline", "oracle", "constant")
    rows = [h for h in sched.get("headline") or [] if h.get("row") not in refs]
    return rows[0] if rows else None


_SCHED_REFS = ("baseline", "oracle", "constant")
_SCHED_CHANGES = (("e2e_mean_short", "Short mean"), ("e2e_p90_short", "Short P90"),
                  ("e2e_p99_short", "Short P99"), ("e2e_mean_long", "Long mean"),
                  ("e2e_p99_long", "Long P99"))
_SCHED_HEADER = ["Predictor", "Score [95% CI]", *(label for _, label in _SCHED_CHANGES),
                 "Kendall τ", "Runs"]
_SCORE_METRIC_TEXT = {
    "e2e_mean_short": "the mean end-to-end latency of short requests",
    "e2e_p90_short": "the P90 end-to-end latency of short requests",
    "e2e_p99_short": "the P99 end-to-end latency of short requests",
    "e2e_mean_all": "the mean end-to-end latency of all requests",
}
# One predictor seed's scheduling record as the table reads it: the row's headline entry,
# that record's reference entries by row name, and its simulator seeds.
_SchedRun = tuple[dict[str, Any], dict[str, dict[str, Any]], list[Any]]


def _sched_refs(sched: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The reference entries (baseline, oracle, constant) of one scheduling record by row."""
    return {h["row"]: h for h in sched.get("headline") or [] if h.get("row") in _SCHED_REFS}


def _sched_scored(sched: dict[str, Any]) -> bool:
    """Whether a record carries the same-dispatcher score with per-seed figures (records of
    older simulators compared lb+sjf against rr+fcfs and cannot be pooled)."""
    heads = sched.get("headline") or []
    return (bool(sched.get("score_metric")) and bool(heads)
            and all(isinstance(h.get("per_seed"), dict) for h in heads)
            and {"baseline", "oracle"} <= {h.get("row") for h in heads})


def _sched_pooled(runs: list[_SchedRun], metric: str) -> dict[str, dict[str, Any] | None]:
    """Score and changes against the baseline pooled over predictor seeds.

    Per-seed figures form predictor seeds x simulator seeds matrices; the score is the mean
    gain over the baseline divided by the oracle's mean gain (`sim.evaluate.score_interval`)
    and a change is mean(row) / mean(baseline) - 1, each with its 95% t-interval on the
    linearised ratio (`sim.metrics.ratio_interval`). Runs on different simulator seeds cannot
    be paired: everything is then None.
    """
    import numpy as np

    from lenbench.sim.evaluate import score_interval
    from lenbench.sim.metrics import ratio_interval

    keys = [metric, *(key for key, _ in _SCHED_CHANGES)]
    out: dict[str, dict[str, Any] | None] = dict.fromkeys(["score", *keys])
    if any(list(seeds) != list(runs[0][2]) for _, _, seeds in runs):
        return out

    def matrix(ref: str | None, key: str) -> Any:
        vals = [(entry if ref is None else refs[ref])["per_seed"].get(key)
                for entry, refs, _ in runs]
        if any(not isinstance(v, list) for v in vals) or len({len(v) for v in vals}) != 1:
            return None
        return np.array([[np.nan if x is None else float(x) for x in v] for v in vals])

    base, row, best = matrix("baseline", metric), matrix(None, metric), matrix("oracle", metric)
    if base is not None and row is not None and best is not None and base.shape[1]:
        out["score"] = score_interval(base - row, base - best, base.mean(axis=0))
    for key, _ in _SCHED_CHANGES:
        base, row = matrix("baseline", key), matrix(None, key)
        if base is not None and row is not None and base.shape[1]:
            out[key] = ratio_interval(row - base, base)
    return out


def _sched_score_text(score: dict[str, Any] | None) -> str:
    if not score or score.get("value") is None:
        return DASH
    text = f"{100 * score['value']:.0f}%"
    lo, hi = score.get("ci95_low"), score.get("ci95_high")
    if _is_num(lo) and _is_num(hi):
        text += f" [{100 * lo:.0f}, {100 * hi:.0f}]"
    return text


def _sched_run_scored(run: _SchedRun) -> bool:
    entry, refs, _ = run
    return (isinstance(entry.get("per_seed"), dict) and "baseline" in refs and "oracle" in refs
            and all(isinstance(refs[r].get("per_seed"), dict) for r in ("baseline", "oracle")))


def _sched_stats(runs: list[_SchedRun], metric: str | None) -> dict[str, dict[str, Any] | None]:
    """`_sched_pooled` over the runs that carry per-seed figures (all None if there are none)."""
    scored = [run for run in runs if _sched_run_scored(run)]
    if not scored or not metric:
        return dict.fromkeys(["score", *(key for key, _ in _SCHED_CHANGES)])
    return _sched_pooled(scored, metric)


def _sched_cells(name: str, runs: list[_SchedRun], metric: str | None) -> list[str]:
    """One table row. The baseline shows absolute seconds; every other row its score with
    the interval and its changes against the baseline, pooled over its runs (predictor
    seeds) that carry the same-dispatcher score, and their number (all runs if none does)."""
    entry = runs[0][0]
    taus = [e["kendall_tau"] for e, _, _ in runs
            if _is_num(e.get("kendall_tau")) and math.isfinite(e["kendall_tau"])]
    tau = _num(statistics.fmean(taus), 3) if taus else DASH
    if entry.get("row") == "baseline":
        secs = [DASH if not _is_num(entry.get(key)) else f"{entry[key]:,.2f} s"
                for key, _ in _SCHED_CHANGES]
        return [name, DASH, *secs, DASH, str(len(runs))]
    stats = _sched_stats(runs, metric)
    changes = []
    for key, _ in _SCHED_CHANGES:
        change = stats.get(key)
        value = None if change is None else change.get("value")
        changes.append(DASH if value is None else f"{100 * value:+.0f}%")
    n_scored = sum(_sched_run_scored(run) for run in runs)
    return [name, _sched_score_text(stats.get("score")), *changes, tau,
            str(n_scored or len(runs))]


def _sched_intro(first: dict[str, Any]) -> str:
    """The simulated setting (load, arrivals, seeds, cluster, classes) of a scored record."""
    cfg = first.get("config") or {}
    cv = cfg.get("arrival_cv")
    arrivals = ("Poisson arrivals" if cv == 1 else
                f"gamma arrivals (cv {cv:g})" if _is_num(cv) else "arrivals as configured")
    load = first.get("load_factor")
    return (f"Simulated disaggregated serving (lenbench.sim): {first.get('n_requests')} "
            f"requests drawn from the test rows per simulator seed, simulator seeds "
            f"{list(first.get('seeds') or [])}, {arrivals} at load factor "
            f"{_num(load, 2) if _is_num(load) else DASH} of the estimated saturation rate "
            f"({_num(first.get('qps'), 1)} req/s), {cfg.get('n_prefill')} prefill + "
            f"{cfg.get('n_decode')} decode instances, {cfg.get('max_num_seqs')} slots each. "
            f"Short/long classes: true length < {_num(first.get('short_threshold'), 0)} / "
            f">= {_num(first.get('long_threshold'), 0)} tokens.")


def _sched_caption(first: dict[str, Any]) -> str:
    """What the score is: its latency figure, baseline, policy, guard, dispatch and interval."""
    cfg = first.get("config") or {}
    metric = str(first.get("score_metric"))
    dispatch = ("balances on each run's predictions, so the score also credits "
                "prediction-driven dispatch" if cfg.get("dispatch_uses_predictions") else
                "does not read predictions, so runs differ in queue order only")
    return (
        f"Score = (baseline − predictor) / (baseline − oracle) of "
        f"{_SCORE_METRIC_TEXT.get(metric, metric)}: the baseline is "
        f"{first.get('baseline_policy')} (the same dispatcher with an FCFS queue); the "
        f"predictor, the oracle (true lengths) and the constant row (one value for all) run "
        f"{first.get('policy')} (SJF by predicted length, ties by arrival) with starvation "
        f"guard {first.get('starvation')}; dispatch {dispatch}. A constant predictor therefore "
        f"scores exactly 0% and the oracle exactly 100%; above 100% beats SJF on true "
        f"lengths, below 0% is harm. Numerator and denominator are means over the simulator "
        f"seeds (paired: one draw per seed serves every row) and over the predictor's seeds "
        f"(Runs). 95% CI: Student-t interval on the linearised ratio (delta method) with the "
        f"variance over simulator seeds, plus the variance over predictor seeds where there "
        f"are several (Welch-Satterthwaite degrees of freedom). Short/Long columns: change of "
        f"the mean, P90 and P99 end-to-end latency of short and long requests against the "
        f"baseline, ratio of seed means (the baseline row gives seconds).")


def _scheduling_section(results: list[dict[str, Any]], out_dir: Path, stem: str,
                        written: set[Path], title: str) -> list[str]:
    """Scheduling outcomes from the simulator: each predictor's score (the share of the
    oracle's latency gain over the same dispatcher with FCFS) with its interval and its
    short- and long-request changes, beside the baseline, oracle and constant rows."""
    with_sched = sorted((r for r in results if isinstance(r.get("scheduling"), dict)
                         and r.get("kind") == "predictor"),
                        key=lambda r: (r["predictor"]["name"], r["seed"], r.get("_source", "")))
    if not with_sched:
        return []
    newest: dict[tuple[str, str, Any], dict[str, Any]] = {}  # reruns supersede, as above
    for r in sorted(with_sched, key=lambda r: (str(r.get("created_at")), r.get("_source", ""))):
        newest[(r["predictor"]["name"], _params_key(r), r["seed"])] = r
    keep = {id(r) for r in newest.values()}
    with_sched = [r for r in with_sched if id(r) in keep]
    scored = [r for r in with_sched if _sched_scored(r["scheduling"])]
    n_old = len(with_sched) - len(scored)
    old_note = (f"{n_old} predictor result(s) were simulated before this score existed (their "
                "baseline was rr+fcfs and per-seed figures were not kept): re-run them to "
                "score them.")
    if not scored:
        return ["### Scheduling", "", old_note, ""]
    # One table, one simulated setting (the most common, then the newest): records of another
    # sim config or other simulator seeds are counted, not pooled.
    def setting(r: dict[str, Any]) -> str:
        return repr((r["scheduling"].get("config"), r["scheduling"].get("seeds")))

    counts: dict[str, int] = defaultdict(int)
    for r in scored:
        counts[setting(r)] += 1
    main = max(scored, key=lambda r: (counts[setting(r)], str(r.get("created_at")),
                                      r.get("_source", "")))
    first = main["scheduling"]
    other = {id(r) for r in scored if setting(r) != setting(main)}
    with_sched = [r for r in with_sched if id(r) not in other]
    scored = [r for r in scored if id(r) not in other]
    metric = first.get("score_metric")
    refs = _sched_refs(first)
    seeds = list(first.get("seeds") or [])
    by_name: dict[str, list[_SchedRun]] = defaultdict(list)
    for r in with_sched:
        sched = r["scheduling"]
        entry = _predictor_row(sched)
        if entry is not None:
            by_name[r["predictor"]["name"]].append((entry, _sched_refs(sched),
                                                    list(sched.get("seeds") or [])))
    body = [_sched_cells(f"*{name}* (ref)", [(refs[name], refs, seeds)], metric)
            for name in _SCHED_REFS if name in refs]

    def order(name: str) -> tuple[float, str]:
        score = _sched_stats(by_name[name], metric)["score"]
        value = None if score is None else score.get("value")
        return (-value if _is_num(value) else math.inf, name)

    body += [_sched_cells(_cell(name), by_name[name], metric)
             for name in sorted(by_name, key=order)]
    lines = ["### Scheduling", "", _sched_intro(first), "",
             _table(_SCHED_HEADER, [":---"] + ["---:"] * (len(_SCHED_HEADER) - 1), body), "",
             _sched_caption(first), ""]
    if n_old:
        lines += [old_note + f" They are left out of the scores and Runs (a predictor with no "
                  f"other result shows {DASH}).", ""]
    if other:
        lines += [(f"{len(other)} predictor result(s) simulated with another sim configuration "
                   "or other simulator seeds than the one above are not shown."), ""]
    plot = out_dir / f"{stem}-sched-quality.png"
    try:
        from lenbench.sim.plots import plot_score_vs_quality

        plot_score_vs_quality([r["scheduling"] for r in scored], plot)
        written.add(plot)
        lines += [f"![Scheduling score vs Kendall tau, {title}]({plot.name})", ""]
    except (KeyError, TypeError, ValueError) as exc:  # a partial scheduling record
        lines += [f"(scheduling plot skipped: {type(exc).__name__}: {exc})", ""]
    return lines


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
    nums = [float(v) for v in present if _is_num(v) and math.isfinite(v)]
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


def _observed_steps_table(rows: list[_Row]) -> list[str]:
    """Remaining-length MAE at t = 0, 8, 16, 32, ... observed steps, one row per dynamic
    predictor (the ForeLen/PLP warm-up reading), with the requests still decoding at each t."""
    entries = []
    for row in rows:
        if row.variant is not None:
            continue
        dyn = [((r.get("metrics") or {}).get("dynamic") or {}) for r in row.results]
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
        cells = [_cell(row.label)]
        if any((r.get("causality") or {}).get("passed") is False for r in row.results):
            cells[0] += " (non-causal)"  # lenbench.causality: it reads the response's future
        for t in ts:
            vals = [at(d, "mae_by_observed_steps", t) for d in dyn]
            cells.append(_mean_std([float(v) for v in vals if _is_num(v)]))
        cells.append(_time(_mean(row.values("timings", "predict_ms_per_step"))))
        body.append(cells)
    first = entries[0][1][0]
    counts = [at(first, "n_by_observed_steps", t) for t in ts]
    body.append(["*requests decoding at t*"] + [DASH if c is None else str(c) for c in counts]
                + [""])
    header = ["Predictor"] + [f"t = {t}" for t in ts] + ["ms/step"]
    return ["#### Dynamic MAE by observed steps", "",
            *_fixed_population_table(entries),
            _table(header, [":---"] + ["---:"] * (len(header) - 1), body), "",
            ("MAE of the remaining length L − t at exactly t generated tokens, over the requests "
             "still decoding at t (last row; from the lowest-seed result), mean ± std over seeds. "
             "Each column covers a different population (short requests leave as t grows), so "
             "compare predictors within a column, not a predictor across columns. "
             "ms/step: the predictor's own latency per decoding step."), ""]


def _fixed_population_table(entries: list[tuple[_Row, list[dict[str, Any]]]]) -> list[str]:
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
        cells = [_cell(row.label)]
        for i in range(len(ts)):
            cells.append(_mean_std([float(p["mae"][i]) for p in same if _is_num(p["mae"][i])]))
        body.append(cells)
    header = ["Predictor"] + [f"t = {t}" for t in ts]
    return [_table(header, [":---"] + ["---:"] * len(ts), body), "",
            (f"Over one population: the {first['n_requests']} requests longer than "
             f"{first['t_max']} tokens (the longest observed t that at least half of the test "
             "requests outlive), so every column covers the same requests. The table below "
             "covers all requests still decoding at each t."), ""]


def _depth_list(spec: dict[str, Any], key: str) -> list[float] | None:
    values = spec.get(key)
    if isinstance(values, list) and values and all(_is_num(v) for v in values):
        return [float(v) for v in values]
    return None


def _speculative_table(entries: list[tuple[str, list[dict[str, Any]]]]) -> list[str]:
    """τ and per-depth acceptance for predictors that report a ``speculative`` dict, each beside
    its random-init draft (``speculative.random_init``) when reported."""
    table_rows: list[tuple[str, list[dict[str, Any]]]] = []
    for label, specs in entries:
        table_rows.append((_cell(label), specs))
        rand = [s["random_init"] for s in specs if isinstance(s.get("random_init"), dict)]
        if rand:
            table_rows.append((f"*{_cell(label)}, random init* (ref)", rand))
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
        taus = [float(s["tau"]) for s in specs if _is_num(s.get("tau"))]
        cells = [label, _mean_std(taus, 2)]
        for key, _, _ in groups:
            lists = [v for v in (_depth_list(s, key) for s in specs) if v]
            if 0 < depth[key] <= MAX_DEPTH_COLUMNS:
                for i in range(depth[key]):
                    cells.append(_num(_mean([v[i] for v in lists if i < len(v)]), 3))
            elif depth[key]:
                cells.append(_num(_mean([statistics.fmean(v) for v in lists]), 3))
        body.append(cells)
    return ["#### Speculative decoding quality", "",
            _table(header, [":---"] + ["---:"] * (len(header) - 1), body), "",
            ("As reported by each predictor (`report()[\"speculative\"]`), means over seeds: τ is "
             "the mean acceptance length (tokens per drafting round), α_i the acceptance rate at "
             "draft depth i, acc_i the offline top-1 agreement of the draft with the target at "
             "depth i, E[acc]_i the expected acceptance at depth i from that agreement. The "
             "random-init row is the same draft untrained: the floor the training lifts."), ""]


def _details_section(rows: list[_Row]) -> list[str]:
    """Predictor details: the dynamic observed-steps table, the speculative-decoding table and,
    per predictor, the flat entries of its ``report`` (mean ± std over seeds for numbers)."""
    mains = [row for row in rows if row.variant is None and row.kind == "predictor"]
    mains.sort(key=lambda row: row.base_label)
    lines = _observed_steps_table(mains)
    spec_entries = []
    for row in mains:
        specs = [_report(r).get("speculative") for r in row.results]
        specs = [s for s in specs if isinstance(s, dict)]
        if specs:
            spec_entries.append((row.base_label, specs))
    if spec_entries:
        lines += _speculative_table(spec_entries)
    for row in mains:
        reports = [_report(r) for r in row.results]
        flat = [_flatten(rep) for rep in reports]
        keys = sorted({k for f, _ in flat for k in f}, key=_natural)
        if not keys:
            continue
        seeds = ", ".join(str(r["seed"]) for r in row.results)
        body = [[f"`{_cell(k)}`", _cell(_seed_values([f.get(k) for f, _ in flat]), 600)]
                for k in keys]
        lines += [f"#### {_cell(row.base_label)}", "",
                  f"Reported by the predictor (seeds {seeds}).", "",
                  _table(["Entry", "Value"], [":---", ":---"], body), ""]
        skipped = max(n for _, n in flat)
        if skipped:
            note = f"{skipped} longer list(s) are in the result files only."
            lines += [note, ""]
    if not lines:
        return []
    return ["### Predictor details", "",
            ("Figures each predictor measured about itself (`Predictor.report()`, stored in its "
             "result file) and dynamic predictors' error by observed steps. Numbers are means "
             "over seeds (± sample std when they differ); other entries show their distinct "
             "values in seed order."), "", *lines]


# ---------------------------------------------------------------------------------------------
# plots


def _save_png(fig: Any, path: Path) -> None:
    """Render to memory, then write atomically: a kill mid-plot never leaves a 0-byte PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    atomic_write_bytes(path, buf.getvalue())


def _progress_plot(rows: list[_Row], path: Path, title: str) -> bool:
    """Dynamic MAE by progress bin, one line per dynamic predictor; False when there is none."""
    from matplotlib.figure import Figure

    series = []
    for row in rows:
        if row.variant is not None:
            continue
        curves = [((r.get("metrics") or {}).get("dynamic") or {}).get("mae_by_progress")
                  for r in row.results]
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
    _save_png(fig, path)
    return True


def _scatter_plot(rows: list[_Row], path: Path, title: str) -> bool:
    """Predicted vs true total length per predictor (lowest seed), log-log with the y = x line."""
    from matplotlib.figure import Figure

    panels = []
    for row in rows:
        if row.variant is not None:
            continue
        for r in row.results:  # results are sorted by seed
            preds = r.get("predictions") or {}
            pairs = [(t, p) for t, p in zip(preds.get("true") or [], preds.get("pred") or [],
                                             strict=False)
                     if isinstance(t, (int, float)) and isinstance(p, (int, float))
                     and math.isfinite(t) and math.isfinite(p)]
            if pairs:
                panels.append((f"{row.label} (seed {r['seed']})", pairs))
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
    _save_png(fig, path)
    return True


# ---------------------------------------------------------------------------------------------
# document


def _provenance_lines(ok: list[dict[str, Any]]) -> list[str]:
    """How the labels were made (sampling, cap, censoring) and where the model came from, from
    the newest result: a reader must see what the cap cut before trusting a mean length."""
    latest = max(ok, key=lambda r: str(r.get("created_at", "")))
    gen, source = latest.get("generation") or {}, (latest.get("model") or {}).get("source")
    out = []
    sampling = gen.get("sampling") or {}
    if sampling and gen.get("n_prompts") is not None:
        n_prompts = int(gen["n_prompts"]) - int(gen.get("n_prompts_too_long") or 0)
        n_samples = int(gen.get("n_samples") or 1)
        generated = n_prompts * n_samples
        censored = int(gen.get("n_censored") or 0)
        share = f" ({100 * censored / generated:.0f}%)" if generated else ""
        skipped = (f", {gen['n_prompts_too_long']} longer prompts skipped"
                   if gen.get("n_prompts_too_long") else "")
        out.append(f"Labels: {n_prompts} prompts{skipped} x {n_samples} samples, generated by "
                   f"`{gen.get('backend') or 'hf'}` at temperature {sampling.get('temperature')}, "
                   f"top-p {sampling.get('top_p')}, max_new_tokens "
                   f"{sampling.get('max_new_tokens')}; {censored} of {generated} samples"
                   f"{share} hit the cap (censored, {gen.get('censored_rows', 'dropped')}); "
                   f"{gen.get('n_rows')} rows kept, mean L {gen.get('mean_L') or 0:.1f}.")
    if gen.get("label_source") == "imported":
        out.append(f"Labels: imported from the file, no model run: {gen.get('n_prompts')} "
                   f"prompts, {gen.get('n_rows')} rows, {gen.get('n_censored') or 0} flagged "
                   f"censored ({gen.get('censored_rows')}); "
                   f"{gen.get('n_prompts_unlabelled') or 0} prompts without a length dropped; "
                   f"predictions clipped to {gen.get('length_cap')} "
                   f"({gen.get('length_cap_from')}); prompt tokens: "
                   f"{gen.get('prompt_token_ids')}.")
    if source and source.get("source") == "gguf":
        packages = ", ".join(f"{k} {v}" for k, v in (source.get("packages") or {}).items())
        out.append(f"Model: {source.get('gguf_file')} (sha256 `{str(source.get('gguf_sha256'))[:12]}`"
                   f"{', from ' + packages if packages else ''}), {source.get('architecture')}, "
                   f"{(source.get('n_parameters') or 0) / 1e6:.0f}M parameters, converted to "
                   f"{source.get('dtype')} transformers weights.")
    return [line for text in out for line in (text, "")]


MIN_RANKING_PROMPTS = 30  # fewer test prompts than this: the table says it cannot rank


def _main_table(rows: list[_Row], reference: str) -> tuple[str, str | None]:
    """The main table with paired differences to the reference predictor (static, and dynamic
    when the reference is dynamic); returns the table and the reference used (None: no column)."""
    mains = {r.name: r for r in rows if r.variant is None and r.kind == "predictor"}
    ref_name = choose_reference(sorted(mains), reference)
    ref = mains.get(ref_name) if ref_name else None
    header, align = list(_HEADER), list(_ALIGN)
    body = [_row_cells(r) for r in rows]
    if ref is None:
        return _table(header, align, body), None
    with_dynamic = bool(ref.values("dynamic", "mae"))
    for row, cells in zip(rows, body):
        static = dynamic = DASH
        if row is ref:
            static = dynamic = "(reference)"
        elif row.variant is None and row.kind == "predictor":
            static = paired_cell(row.results, ref.results, "static")
            dynamic = paired_cell(row.results, ref.results, "dynamic")
        cells.insert(3, static)
        if with_dynamic:
            cells.insert(8, dynamic if row.values("dynamic", "mae") or row is ref else DASH)
    header.insert(3, f"Δ vs {ref_name}")
    align.insert(3, "---:")
    if with_dynamic:
        header.insert(8, f"Dyn. Δ vs {ref_name}")
        align.insert(8, "---:")
    return _table(header, align, body), ref_name


def _scoring_notes(ok: list[dict[str, Any]], rows: list[_Row]) -> list[str]:
    """What the reader must know before trusting a row: censored rows, clipped predictions,
    the noise floor's rows, and a test split too small to rank on."""
    notes = []
    if not any(r.get("fingerprints") for r in ok):
        notes.append("These results were recorded before lenbench kept label fingerprints and "
                     "row identities: they cannot be paired (Δ shows —), nor told apart from "
                     "results scored on other labels, and the markers newer runs record († and "
                     "non-causal) are missing. Re-run them to get all three.")
    prompts = [int(r["dataset"]["n_test_prompts"]) for r in ok
               if _is_num((r.get("dataset") or {}).get("n_test_prompts"))]
    if prompts and max(prompts) < MIN_RANKING_PROMPTS:
        notes.append(f"**Too few test prompts to rank predictors** ({max(prompts)} < "
                     f"{MIN_RANKING_PROMPTS}): differences here are anecdotes, not rankings.")
    censored = [r for r in ok if ((r.get("metrics") or {}).get("static") or {}).get("n_censored")]
    if censored:
        n = int(censored[0]["metrics"]["static"]["n_censored"])
        notes.append(f"{n} test rows are right-censored (cut off at the length cap): a "
                     "prediction at or above the cut-off scores 0 there, a shorter one its "
                     "shortfall; rank correlations use the uncensored rows.")
    clipped = []
    for row in rows:
        if row.variant is not None or row.kind != "predictor":
            continue
        for section, what in (("static", "totals"), ("dynamic", "remaining lengths")):
            low = _mean(row.values(section, "n_clipped_low"))
            high = _mean(row.values(section, "n_clipped_high"))
            if low or high:
                clipped.append(f"{row.label} ({what}: {low or 0:.0f} below 1, {high or 0:.0f} "
                               "above the cap)")
    if clipped:
        notes.append("Predictions clipped to [1, length cap] before scoring (mean count per "
                     "seed): " + "; ".join(clipped) + ".")
    floors = [r for r in rows if r.kind == "reference" and r.results]
    for row in floors:
        bounds = (row.results[0].get("metrics") or {}).get("noise_floor") or {}
        n_test = (row.results[0].get("dataset") or {}).get("n_test")
        if _is_num(bounds.get("n")) and bounds["n"] != n_test:
            notes.append(f"*{row.label}* is scored on {bounds['n']} of the {n_test} test rows "
                         f"(the uncensored rows of {bounds['n_prompts']} prompts with at least two of them).")
    return [line for note in notes for line in (note, "")]


def _section(dataset: str, model: str, ok: list[dict[str, Any]], out_dir: Path,
             written: set[Path], reference: str = DEFAULT_REFERENCE,
             fingerprint: str | None = None, split_by_fingerprint: bool = False) -> list[str]:
    rows, superseded = _build_rows(ok)
    heading = f"## {dataset} / {model}"
    if split_by_fingerprint:
        heading += (f" (labels `{fingerprint[:8]}`)" if fingerprint
                    else " (labels not fingerprinted)")
    lines = [heading, ""]
    if split_by_fingerprint:
        lines += [("**These results were scored on different labels from the other "
                   f"{dataset} / {model} table(s)** (another build of the data, or results "
                   "written before label fingerprints were recorded), so they are kept apart."),
                  ""]

    def distinct(field_path: tuple[str, str]) -> list[str]:
        vals = {str((r.get(field_path[0]) or {}).get(field_path[1])) for r in ok}
        return sorted(v for v in vals if v != "None")

    info = []
    n_test = distinct(("dataset", "n_test"))
    n_prompts = distinct(("dataset", "n_test_prompts"))
    if n_test:
        info.append(f"test set: {' / '.join(n_test)} rows"
                    + (f" from {' / '.join(n_prompts)} prompts" if n_prompts else ""))
    ds_keys, model_keys = distinct(("dataset", "key")), distinct(("model", "key"))
    if ds_keys:
        info.append("dataset key " + ", ".join(f"`{k}`" for k in ds_keys))
    if model_keys:
        info.append("model key " + ", ".join(f"`{k}`" for k in model_keys))
    if info:
        text = "; ".join(info)
        lines += [text[0].upper() + text[1:] + ".", ""]
    lines += _provenance_lines(ok)
    if len(ds_keys) > 1 or len(model_keys) > 1:
        lines += [("**Warning:** these results come from more than one build of the data set or "
                  "model (several keys above); rows may not be comparable."), ""]

    lines += _scoring_notes(ok, rows)
    table, ref_name = _main_table(rows, reference)
    lines += [table, ""]
    if superseded:
        lines += [(f"{superseded} older result(s) for a predictor and seed already shown were "
                  "superseded by newer runs and are not counted."), ""]
    lines += [LEGEND.replace("REF", ref_name or "the reference"), ""]

    stem = f"{PLOT_PREFIX}{safe_name(dataset)}__{safe_name(model)}"
    if split_by_fingerprint:
        stem += f"__{safe_name((fingerprint or 'none')[:8])}"
    title = f"{dataset} / {model}"
    progress = out_dir / f"{stem}-progress.png"
    if _progress_plot(rows, progress, title):
        written.add(progress)
        lines += [f"![Dynamic MAE by progress, {title}]({progress.name})", ""]
    scatter = out_dir / f"{stem}-scatter.png"
    if _scatter_plot(rows, scatter, title):
        written.add(scatter)
        lines += [f"![Predicted vs true length, {title}]({scatter.name})", ""]

    lines += _details_section(rows)
    lines += _scheduling_section(ok, out_dir, stem, written, title)
    return lines


def _failed_lines(failed: list[dict[str, Any]], problems: list[str]) -> list[str]:
    lines = ["## Failed runs", ""]
    if not failed:
        lines += ["None.", ""]
    else:
        def key(r: dict[str, Any]) -> tuple[Any, ...]:
            return (r["dataset"]["name"], r["model"]["name"], r["predictor"]["name"], r["seed"],
                    r["_source"])

        body = []
        for r in sorted(failed, key=key):
            err = r.get("error") or {}
            first = (str(err.get("message", "")).strip().splitlines() or [""])[0]
            body.append([_cell(r["dataset"]["name"]), _cell(r["model"]["name"]),
                         _cell(r["predictor"]["name"]), str(r["seed"]),
                         _cell(f"{err.get('type', '?')}: {first}"), f"`{_cell(r['_source'])}`"])
        lines += [_table(["Dataset", "Model", "Predictor", "Seed", "Error", "File"],
                         [":---"] * 3 + ["---:", ":---", ":---"], body), ""]
    if problems:
        lines += ["### Invalid result files", "",
                  "These files could not be read as results and are not in any table above.", ""]
        lines += [f"- {_cell(p)}" for p in problems]
        lines += [""]
    return lines


def build_leaderboard(results_dir: str | Path, out_dir: str | Path,
                      reference: str = DEFAULT_REFERENCE) -> Path:
    """Write ``out_dir/README.md`` and its plots from ``results_dir``; return the README path.

    Stale ``plot-*.png`` files from an earlier build are removed so that the folder matches the
    markdown exactly; no other file in ``out_dir`` is touched. `reference` names the predictor
    every other one is compared with, paired (the constant where it is absent).
    """
    return _build(results_dir, out_dir, reference)[0]


def labels_fingerprint(result: dict[str, Any]) -> str | None:
    return (result.get("fingerprints") or {}).get("labels")


def _build(results_dir: str | Path, out_dir: str | Path, reference: str = DEFAULT_REFERENCE
           ) -> tuple[Path, dict[str, int], list[str]]:
    results, problems = load_results(results_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    ok = [r for r in results if r["status"] == "ok"]
    failed = [r for r in results if r["status"] == "failed"]
    # one table per world and label fingerprint: results scored on other labels never mix
    by_pair: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list))
    for r in ok:
        by_pair[(r["dataset"]["name"], r["model"]["name"])][labels_fingerprint(r) or ""].append(r)

    lines = [
        "# lenbench leaderboard",
        "",
        (f"Built by `lenbench-leaderboard` from {len(results) + len(problems)} result file(s): "
        f"{len(ok)} ok, {len(failed)} failed, {len(problems)} invalid. "
        "Do not edit by hand; rebuild it from the results folder."),
        "",
    ]
    if not by_pair:
        lines += ["No successful results yet.", ""]
    written: set[Path] = set()
    for dataset, model in sorted(by_pair):
        groups = by_pair[(dataset, model)]
        for fp in sorted(groups, key=lambda f: (f == "", f)):
            lines += _section(dataset, model, groups[fp], out, written, reference, fp or None,
                              split_by_fingerprint=len(groups) > 1)
    lines += _failed_lines(failed, problems)

    for stale in out.glob(f"{PLOT_PREFIX}*.png"):
        if stale not in written:
            stale.unlink()
    readme = out / "README.md"
    atomic_write_bytes(readme, ("\n".join(lines).rstrip("\n") + "\n").encode("utf-8"))
    counts = {"ok": len(ok), "failed": len(failed), "invalid": len(problems)}
    return readme, counts, problems


def main(argv: Sequence[str] | None = None) -> int:
    """Console script ``lenbench-leaderboard``: rebuild the leaderboard from a results folder."""
    parser = argparse.ArgumentParser(
        prog="lenbench-leaderboard",
        description="Turn a folder of lenbench result JSON files into a markdown leaderboard "
                    "with plots.")
    parser.add_argument("--results", default="leaderboard/results",
                        help="folder of result JSON files (default: %(default)s)")
    parser.add_argument("--out", default="leaderboard",
                        help="folder for README.md and plots (default: %(default)s)")
    parser.add_argument("--reference", default=DEFAULT_REFERENCE,
                        help="predictor the others are compared with, paired over the same "
                             "test rows (default: %(default)s; the constant where absent)")
    args = parser.parse_args(argv)

    results_dir = Path(args.results)
    if not results_dir.is_dir():
        print(f"lenbench-leaderboard: results folder '{results_dir}' does not exist. Run "
              "`lenbench` first, or pass --results PATH to the folder holding the result JSON "
              "files.", file=sys.stderr)
        return 2
    readme, counts, problems = _build(results_dir, args.out, args.reference)
    for p in problems:
        print(f"warning: invalid result file {p}", file=sys.stderr)
    print(f"wrote {readme} and its plots from {results_dir}: {counts['ok']} ok, "
          f"{counts['failed']} failed, {counts['invalid']} invalid result file(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
