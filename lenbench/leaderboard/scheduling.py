"""The "Scheduling" section: simulator scores pooled over seeds, beside the baseline, oracle
and constant references; its own idea with its own statistics."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenbench.leaderboard.blocks import Block, Caption, Heading, Image, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, number
from lenbench.leaderboard.rows import params_key
from lenbench.leaderboard.scheduling_cells import SCHED_REFS as _SCHED_REFS
from lenbench.leaderboard.scheduling_cells import sched_refs as _sched_refs
from lenbench.leaderboard.scheduling_cells import score_text as _sched_score_text
from lenbench.leaderboard.scheduling_comparison import comparison_lines
from lenbench.leaderboard.scheduling_scores import (
    alpha_lines,
    classes_text,
    delta_text,
    leader_note,
    paired_delta,
    score_definition,
)
from lenbench.leaderboard.scheduling_sweep import sweep_lines
from lenbench.results import PROTOCOL_CHANGES, Result
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import DEFAULT_REFERENCE, choose_reference

_SCHED_CHANGES = (("e2e_mean_all", "All mean"), ("e2e_mean_short", "Short mean"),
                  ("e2e_p99_short", "Short P99"), ("e2e_mean_long", "Long mean"),
                  ("e2e_p99_long", "Long P99"), ("e2e_mean_capped", "Capped mean"),
                  ("e2e_p99_capped", "Capped P99"))
_SCHED_HEADER = ["Predictor", "Score [95% CI]", "Gain (s)",
                 *(label for _, label in _SCHED_CHANGES), "C-index", "Runs"]
# the C-index (the main table's rank score) of the rows that rank by definition
_REF_C_INDEX = {"oracle": 1.0, "constant": 0.5}
# One predictor seed's scheduling record as the table reads it: the row's headline entry,
# that record's reference entries by row name, and its simulator seeds.
_SchedRun = tuple[dict[str, Any], dict[str, dict[str, Any]], list[Any]]


def _predictor_row(sched: dict[str, Any]) -> dict[str, Any] | None:
    """The headline entry of the predictor itself (not baseline/oracle/constant)."""
    rows = [h for h in sched.get("headline") or [] if h.get("row") not in _SCHED_REFS]
    return rows[0] if rows else None


def _sched_scored(sched: dict[str, Any]) -> bool:
    """Whether a record carries the same-dispatcher score on rank keys with per-seed figures
    (records of older simulators compared lb+sjf against rr+fcfs, or keyed queues by predicted
    tokens, whose score depends on the predictions' scale: they cannot be pooled)."""
    heads = sched.get("headline") or []
    return (bool(sched.get("score_metric")) and bool(sched.get("queue_key")) and bool(heads)
            and all(isinstance(h.get("per_seed"), dict) for h in heads)
            and {"baseline", "oracle"} <= {h.get("row") for h in heads})


def _sched_pooled(runs: list[_SchedRun], metric: str) -> dict[str, dict[str, Any] | None]:
    """Score and changes against the baseline pooled over predictor seeds.

    Per-seed figures form predictor seeds x simulator seeds matrices; the score is the mean
    gain over the baseline, each seed's counted up to the oracle's, divided by the oracle's
    mean gain (`sim.score.score_interval` with the cap)
    and a change is mean(row) / mean(baseline) - 1, each with its 95% t-interval on the
    linearised ratio (`sim.metrics.ratio_interval`). Runs on different simulator seeds cannot
    be paired: everything is then None.
    """
    import numpy as np

    from lenbench.sim.metrics import ratio_interval
    from lenbench.sim.score import score_interval

    keys = [metric, *(key for key, _ in _SCHED_CHANGES)]
    out: dict[str, dict[str, Any] | None] = dict.fromkeys(["score", "gain_s", *keys])
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
        out["score"] = score_interval(base - row, base - best, base.mean(axis=0),
                                      capped=True)
        out["gain_s"] = {"value": float(np.nanmean(base - row))}
    for key, _ in _SCHED_CHANGES:
        base, row = matrix("baseline", key), matrix(None, key)
        if base is not None and row is not None and base.shape[1]:
            out[key] = ratio_interval(row - base, base)
    return out


def _sched_run_scored(run: _SchedRun) -> bool:
    entry, refs, _ = run
    return (isinstance(entry.get("per_seed"), dict) and "baseline" in refs and "oracle" in refs
            and all(isinstance(refs[r].get("per_seed"), dict) for r in ("baseline", "oracle")))


def paired_runs(results: Sequence[Result]) -> list[_SchedRun]:
    """One predictor's scheduling records as its paired score Δ reads them (its own headline row,
    the references, the simulator seeds), those without per-seed figures left out: the table's
    Δ column and a claim about it (`claim_figures`) pair the same runs."""
    runs = []
    for r in results:
        sched = r.scheduling or {}
        entry = _predictor_row(sched) if _sched_scored(sched) else None
        if entry is not None:
            run = (entry, _sched_refs(sched), list(sched.get("seeds") or []))
            if _sched_run_scored(run):
                runs.append(run)
    return runs


def _sched_stats(runs: list[_SchedRun], metric: str | None) -> dict[str, dict[str, Any] | None]:
    """`_sched_pooled` over the runs that carry per-seed figures (all None if there are none)."""
    scored = [run for run in runs if _sched_run_scored(run)]
    if not scored or not metric:
        return dict.fromkeys(["score", "gain_s", *(key for key, _ in _SCHED_CHANGES)])
    return _sched_pooled(scored, metric)


def serving_gain(results: Sequence[Result]) -> tuple[float, float] | None:
    """What a predictor's order is worth at its section's headline setting: the seconds it cuts
    from the FCFS baseline's mean latency of all requests, and that as a share of the
    baseline's, pooled over its scored runs as the scheduling table pools them; None where it
    was not scored there, or the section withholds its score (no load where queueing matters)."""
    if any((r.scheduling or {}).get("score_withheld") for r in results):
        return None
    metric = next(((r.scheduling or {}).get("score_metric") for r in results
                   if (r.scheduling or {}).get("score_metric")), None)
    stats = _sched_stats(paired_runs(results), metric)
    gain = (stats.get("gain_s") or {}).get("value")
    change = (stats.get("e2e_mean_all") or {}).get("value")
    if not is_number(gain) or not is_number(change):
        return None
    return float(gain), float(-change)


def _sched_cells(name: str, runs: list[_SchedRun], metric: str | None,
                 withheld: bool = False) -> list[str]:
    """One table row. The baseline shows absolute seconds; every other row its score with
    the interval, its mean gain in seconds and its changes against the baseline, pooled over
    its runs (predictor seeds) that carry the same-dispatcher score, and their number (all runs
    if none does). A `withheld` score (no load where queueing matters) shows a dash."""
    entry = runs[0][0]
    taus = [e["c_index"] for e, _, _ in runs
            if is_number(e.get("c_index")) and math.isfinite(e["c_index"])]
    tau = number(statistics.fmean(taus), 3) if taus else DASH
    if entry.get("row") == "baseline":
        secs = [DASH if not is_number(entry.get(key)) else f"{entry[key]:,.2f} s"
                for key, _ in _SCHED_CHANGES]
        return [name, DASH, DASH, *secs, DASH, str(len(runs))]
    stats = _sched_stats(runs, metric)
    changes = []
    for key, _ in _SCHED_CHANGES:
        change = stats.get(key)
        value = None if change is None else change.get("value")
        changes.append(DASH if value is None else f"{100 * value:+.0f}%")
    n_scored = sum(_sched_run_scored(run) for run in runs)
    gain = (stats.get("gain_s") or {}).get("value")
    score = DASH if withheld else _sched_score_text(stats.get("score"))
    return [name, score, DASH if not is_number(gain) else f"{gain:+.2f}", *changes, tau,
            str(n_scored or len(runs))]


def _sched_intro(first: dict[str, Any]) -> str:
    """The simulated setting (load, arrivals, seeds, cluster, classes) of a scored record."""
    cfg = first.get("config") or {}
    cv = cfg.get("arrival_cv")
    arrivals = ("Poisson arrivals" if cv == 1 else
                f"gamma arrivals (cv {cv:g})" if is_number(cv) else "arrivals as configured")
    load = first.get("load_factor")
    sweep = first.get("sweep") or {}
    why = (f", the lowest load of the sweep below at which the oracle cuts the mean latency of "
           f"all requests by at least {100 * cfg['headline_min_gain']:g}%"
           if sweep.get("headline_load") is not None and is_number(cfg.get("headline_min_gain"))
           else "")
    heads = _sched_refs(first)
    base, best = (heads.get(row, {}).get("e2e_mean_all") for row in ("baseline", "oracle"))
    gain = (f" There the oracle (shortest first by the true lengths) cuts the mean latency of all "
            f"requests from {base:.2f} s to {best:.2f} s: **{base - best:.2f} s "
            f"({100 * (base - best) / base:.0f}%)** is what a perfect predictor is worth, and each "
            f"score below is a share of it." if is_number(base) and is_number(best) and base > 0
            and not first.get("score_withheld") else "")
    return (f"Simulated disaggregated serving (lenbench.sim): {first.get('n_requests')} "
            f"requests drawn from the test rows per simulator seed, simulator seeds "
            f"{list(first.get('seeds') or [])}, {arrivals} at load factor "
            f"{number(load, 2) if is_number(load) else DASH} of the estimated saturation rate "
            f"({number(first.get('qps'), 1)} req/s){why}; {cfg.get('n_prefill')} prefill + "
            f"{cfg.get('n_decode')} decode instances, {cfg.get('max_num_seqs')} slots each."
            + gain)


def _sched_caption(first: dict[str, Any]) -> str:
    """What the score is: its latency figure, baseline, policy, guard, dispatch and interval."""
    cfg = first.get("config") or {}
    dispatch = ("balances on each run's predictions, so the score also credits "
                "prediction-driven dispatch" if cfg.get("dispatch_uses_predictions") else
                "does not read predictions, so runs differ in queue order only")
    return (
        f"{score_definition(first)} The baseline is "
        f"{first.get('baseline_policy')} (the same dispatcher with an FCFS queue); the "
        f"predictor, the oracle (true lengths) and the constant row (one value for all) run "
        f"{first.get('policy')} (SJF by each row's predictions as rank quantiles on the test "
        f"rows, ties by arrival) with starvation guard {first.get('starvation')}; dispatch "
        f"{dispatch}. Keys are ranks, not tokens, so the order and the weight of the aging "
        f"guard depend on a predictor's ranking alone: a rescaled copy of a predictor scores "
        f"the same, and no inflation of the true lengths beats the oracle. Score Δ: this "
        f"predictor's score minus the reference predictor's, in points, paired seed by seed "
        f"on the same draws (the same interval, on the paired differences); **bold** where "
        f"the interval excludes 0. Gain (s): how many seconds the row cuts from the baseline's "
        f"mean latency of all requests (the score's numerator, in seconds). "
        f"{classes_text(first)} All/Short/Long/Capped columns: "
        f"change of the mean (and P99) end-to-end latency of all requests and of each class "
        f"against the "
        f"baseline, ratio of seed means (the baseline row gives seconds). C-index: the "
        f"main table's rank score of the predictor on the test rows (Harrell's C, mean over "
        f"its seeds; 1 for the oracle, 0.5 for the constant).")


def _protocol_note(stale: list[Result], n_shown: int) -> list[Block]:
    """One line when some records shown were scored under a scheduling score a later protocol
    changed: what changed, and how to rescore them."""
    if not stale:
        return []
    since = sorted({v for r in stale for v in r.outdated("scheduling")})
    changes = "; ".join(f"{PROTOCOL_CHANGES.get(v, 'its changes')} (protocol {v})"
                        for v in since)
    return [Text(f"**Scored under an earlier protocol** ({len(stale)} of {n_shown} predictor "
                 f"results, marked ‡): their scheduling figures were computed before {changes}, "
                 "and keep the score of their own protocol (the caption names its latency "
                 "figure): rescore them from their stored predictions with `python -m "
                 "lenbench.rescore_scheduling`, or rerun them, to compare them with current "
                 "results.")]


def _c_index_by_row(scored: list[Result]) -> dict[str, float]:
    """Each predictor row's C-index (the main table's, mean over its seeds), by its row name in
    the scheduling records."""
    values: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        entry = _predictor_row(r.scheduling)
        value = (r.metrics.static or {}).get("c_index")
        if entry is not None and is_number(value) and math.isfinite(value):
            values[str(entry.get("row"))].append(float(value))
    return {row: statistics.fmean(v) for row, v in values.items()}


def scheduling_section(results: list[Result], out_dir: Path, stem: str,
                        written: set[Path], title: str,
                        reference: str = DEFAULT_REFERENCE) -> list[Block]:
    """Scheduling outcomes from the simulator: each predictor's score (the share of the
    oracle's latency gain over the same dispatcher with FCFS) with its interval, its paired
    difference to the `reference` predictor and its class changes, beside the baseline,
    oracle and constant rows; then the score at several aging weights."""
    with_sched = sorted((r for r in results if r.scheduling is not None
                         and r.kind == "predictor"),
                        key=lambda r: (r.predictor.name, r.seed, r.source))
    if not with_sched:
        return []
    newest: dict[tuple[str, str, Any], Result] = {}  # reruns supersede, as above
    for r in sorted(with_sched, key=lambda r: (r.created_at, r.source)):
        newest[(r.predictor.name, params_key(r), r.seed)] = r
    keep = {id(r) for r in newest.values()}
    with_sched = [r for r in with_sched if id(r) in keep]
    scored = [r for r in with_sched if _sched_scored(r.scheduling)]
    n_old = len(with_sched) - len(scored)
    old_note = (f"{n_old} predictor result(s) were simulated before this score existed (their "
                "queues were keyed by predicted tokens, so their score depended on the "
                "predictions' scale, or their baseline was rr+fcfs without per-seed figures): "
                "re-run them to score them.")
    if not scored:
        return [Heading(3, "Scheduling"), Text(old_note)]
    # One table, one simulated setting (the most common, then the newest): records of another
    # sim config or other simulator seeds are counted, not pooled.
    def setting(r: Result) -> str:
        return repr((r.scheduling.get("config"), r.scheduling.get("seeds")))

    counts: dict[str, int] = defaultdict(int)
    for r in scored:
        counts[setting(r)] += 1
    # records of the current score first: one of an earlier protocol is shown only among its own
    main = max(scored, key=lambda r: (not r.outdated("scheduling"), counts[setting(r)],
                                      r.created_at, r.source))
    first = main.scheduling
    other = {id(r) for r in scored if setting(r) != setting(main)}
    scored_all = scored
    with_sched = [r for r in with_sched if id(r) not in other]
    scored = [r for r in scored if id(r) not in other]
    metric = first.get("score_metric")
    refs = _sched_refs(first)
    seeds = list(first.get("seeds") or [])
    by_name: dict[str, list[_SchedRun]] = defaultdict(list)
    for r in with_sched:
        sched = r.scheduling
        entry = _predictor_row(sched)
        if entry is not None and not _sched_scored(sched):  # counted in the note, not pooled
            entry = {k: v for k, v in entry.items() if k != "per_seed"}
        if entry is not None:
            entry = {**entry, "c_index": (r.metrics.static or {}).get("c_index")}
            by_name[r.predictor.name].append((entry, _sched_refs(sched),
                                                    list(sched.get("seeds") or [])))
    withheld = first.get("score_withheld")
    body = [_sched_cells(f"*{name}* (ref)", [({**refs[name], "c_index": _REF_C_INDEX.get(name)},
                                               refs, seeds)], metric, bool(withheld))
            for name in _SCHED_REFS if name in refs]

    def order(name: str) -> tuple[float, str]:
        score = _sched_stats(by_name[name], metric)["score"]
        value = None if score is None else score.get("value")
        return (-value if is_number(value) else math.inf, name)

    names = sorted(by_name, key=order)
    stale = [r for r in with_sched if r.outdated("scheduling")]
    marked = {r.predictor.name for r in stale}
    body += [_sched_cells(cell_text(name) + (" ‡" if name in marked else ""), by_name[name],
                          metric, bool(withheld)) for name in names]
    paired = {name: paired_runs([r for r in with_sched if r.predictor.name == name])
              for name in by_name}
    header = list(_SCHED_HEADER)
    ref_name = choose_reference(names, reference) if metric and not withheld else None
    if ref_name is not None:
        header.insert(2, f"Score Δ vs {ref_name}")
        deltas = [DASH] * (len(body) - len(names)) + [
            "(reference)" if name == ref_name else
            delta_text(paired_delta(paired[name], paired[ref_name], str(metric)))
            for name in names]
        for cells, delta in zip(body, deltas):
            cells.insert(2, delta)
    ranked = [] if withheld else [name for name in names if order(name)[0] != math.inf]
    lines = [Heading(3, "Scheduling"), *_protocol_note(stale, len(with_sched)),
             Text(_sched_intro(first)),
             *([Text(f"**No scheduling score for this world:** {withheld}. The table gives the "
                     "latencies at the sweep's highest load; the curves below show why.")]
               if withheld else []),
             Table(header, body, caption="scheduling"),
             Caption("scheduling", _sched_caption(first)),
             *leader_note(ranked, paired, str(metric))]
    if n_old:
        lines.append(Text(old_note + " They are left out of the scores and Runs (a predictor "
                          f"with no other result shows {DASH})."))
    if other:
        n_earlier = sum(bool(r.outdated("scheduling")) for r in scored_all if id(r) in other)
        earlier = (f" ({n_earlier} of them scored under an earlier protocol's scheduling score: "
                   "rescore them with `python -m lenbench.rescore_scheduling`)"
                   if n_earlier else "")
        lines.append(Text(f"{len(other)} predictor result(s) simulated with another sim "
                          f"configuration or other simulator seeds than the one above{earlier} "
                          "are not shown."))
    records: dict[str, list[Result]] = defaultdict(list)
    for r in scored:
        records[r.predictor.name].append(r)
    if not withheld:
        lines += alpha_lines(records, [name for name in names if name in records], main,
                             cell_text)
    lines += sweep_lines(scored, main, out_dir, stem, written, title)
    lines += comparison_lines(scored, main)
    plot = out_dir / f"{stem}-sched-quality.png"
    try:
        from lenbench.sim.plots import plot_score_vs_quality

        plot_score_vs_quality([r.scheduling for r in scored], plot, rank=_c_index_by_row(scored),
                              rank_label="C-index of predictions (Harrell's C, the main "
                                         "table's; constant predictor at 0.5)")
        written.add(plot)
        lines.append(Image(f"Scheduling score vs C-index, {title}", plot.name))
    except (KeyError, TypeError, ValueError) as exc:  # a partial scheduling record
        lines.append(Text(f"(scheduling plot skipped: {type(exc).__name__}: {exc})"))
    return lines
