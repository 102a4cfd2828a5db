"""The "Scheduling" section: simulator scores pooled over seeds, beside the baseline, oracle
and constant references; its own idea with its own statistics."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from lenbench.leaderboard.blocks import LEFT, RIGHT, Block, Caption, Heading, Image, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, number
from lenbench.leaderboard.rows import params_key
from lenbench.results import Result
from lenbench.results.checks import is_number

_SCHED_REFS = ("baseline", "oracle", "constant")
_SCHED_CHANGES = (("e2e_mean_short", "Short mean"), ("e2e_p90_short", "Short P90"),
                  ("e2e_p99_short", "Short P99"), ("e2e_mean_long", "Long mean"),
                  ("e2e_p99_long", "Long P99"))
_SCHED_HEADER = ["Predictor", "Score [95% CI]", *(label for _, label in _SCHED_CHANGES),
                 "C-index", "Runs"]
# the C-index (the main table's rank score) of the rows that rank by definition
_REF_C_INDEX = {"oracle": 1.0, "constant": 0.5}
_SCORE_METRIC_TEXT = {
    "e2e_mean_short": "the mean end-to-end latency of short requests",
    "e2e_p90_short": "the P90 end-to-end latency of short requests",
    "e2e_p99_short": "the P99 end-to-end latency of short requests",
    "e2e_mean_all": "the mean end-to-end latency of all requests",
}
# One predictor seed's scheduling record as the table reads it: the row's headline entry,
# that record's reference entries by row name, and its simulator seeds.
_SchedRun = tuple[dict[str, Any], dict[str, dict[str, Any]], list[Any]]


def _predictor_row(sched: dict[str, Any]) -> dict[str, Any] | None:
    """The headline entry of the predictor itself (not baseline/oracle/constant)."""
    rows = [h for h in sched.get("headline") or [] if h.get("row") not in _SCHED_REFS]
    return rows[0] if rows else None


def _sched_refs(sched: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The reference entries (baseline, oracle, constant) of one scheduling record by row."""
    return {h["row"]: h for h in sched.get("headline") or [] if h.get("row") in _SCHED_REFS}


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
    gain over the baseline divided by the oracle's mean gain (`sim.score.score_interval`)
    and a change is mean(row) / mean(baseline) - 1, each with its 95% t-interval on the
    linearised ratio (`sim.metrics.ratio_interval`). Runs on different simulator seeds cannot
    be paired: everything is then None.
    """
    import numpy as np

    from lenbench.sim.metrics import ratio_interval
    from lenbench.sim.score import score_interval

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
    """"62% [55, 70]"; a dash with the reason when no score is given (sim/score.py)."""
    if not score or score.get("value") is None:
        reason = (score or {}).get("reason")
        return f"{DASH} ({reason})" if reason else DASH
    text = f"{100 * score['value']:.0f}%"
    lo, hi = score.get("ci95_low"), score.get("ci95_high")
    if is_number(lo) and is_number(hi):
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
    taus = [e["c_index"] for e, _, _ in runs
            if is_number(e.get("c_index")) and math.isfinite(e["c_index"])]
    tau = number(statistics.fmean(taus), 3) if taus else DASH
    if entry.get("row") == "baseline":
        secs = [DASH if not is_number(entry.get(key)) else f"{entry[key]:,.2f} s"
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
                f"gamma arrivals (cv {cv:g})" if is_number(cv) else "arrivals as configured")
    load = first.get("load_factor")
    return (f"Simulated disaggregated serving (lenbench.sim): {first.get('n_requests')} "
            f"requests drawn from the test rows per simulator seed, simulator seeds "
            f"{list(first.get('seeds') or [])}, {arrivals} at load factor "
            f"{number(load, 2) if is_number(load) else DASH} of the estimated saturation rate "
            f"({number(first.get('qps'), 1)} req/s), {cfg.get('n_prefill')} prefill + "
            f"{cfg.get('n_decode')} decode instances, {cfg.get('max_num_seqs')} slots each. "
            f"Short/long classes: true length < {number(first.get('short_threshold'), 0)} / "
            f">= {number(first.get('long_threshold'), 0)} tokens.")


def _sched_caption(first: dict[str, Any]) -> str:
    """What the score is: its latency figure, baseline, policy, guard, dispatch and interval."""
    from lenbench.sim.metrics import MIN_ORACLE_GAIN

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
        f"{first.get('policy')} (SJF by each row's predictions as rank quantiles on the test "
        f"rows, ties by arrival) with starvation guard {first.get('starvation')}; dispatch "
        f"{dispatch}. Keys are ranks, not tokens, so the order and the weight of the aging "
        f"guard depend on a predictor's ranking alone: a rescaled copy of a predictor scores "
        f"the same, and no inflation of the true lengths beats the oracle. A constant "
        f"predictor therefore scores exactly 0% and the oracle exactly 100%; above 100% beats "
        f"SJF on true lengths, below 0% is harm. No score ({DASH}, with the reason) when the "
        f"oracle gains less than {100 * MIN_ORACLE_GAIN:g}% of the baseline's figure or loses: "
        f"a share of a gain that is not there would be noise or flip its sign. Numerator and "
        f"denominator are means over the simulator "
        f"seeds (paired: one draw per seed serves every row) and over the predictor's seeds "
        f"(Runs). 95% CI: Student-t interval on the linearised ratio (delta method) with the "
        f"variance over simulator seeds, plus the variance over predictor seeds where there "
        f"are several (Welch-Satterthwaite degrees of freedom). Short/Long columns: change of "
        f"the mean, P90 and P99 end-to-end latency of short and long requests against the "
        f"baseline, ratio of seed means (the baseline row gives seconds). C-index: the "
        f"main table's rank score of the predictor on the test rows (Harrell's C, mean over "
        f"its seeds; 1 for the oracle, 0.5 for the constant).")


def scheduling_section(results: list[Result], out_dir: Path, stem: str,
                        written: set[Path], title: str) -> list[Block]:
    """Scheduling outcomes from the simulator: each predictor's score (the share of the
    oracle's latency gain over the same dispatcher with FCFS) with its interval and its
    short- and long-request changes, beside the baseline, oracle and constant rows."""
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
    main = max(scored, key=lambda r: (counts[setting(r)], r.created_at,
                                      r.source))
    first = main.scheduling
    other = {id(r) for r in scored if setting(r) != setting(main)}
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
    body = [_sched_cells(f"*{name}* (ref)", [({**refs[name], "c_index": _REF_C_INDEX.get(name)},
                                               refs, seeds)], metric)
            for name in _SCHED_REFS if name in refs]

    def order(name: str) -> tuple[float, str]:
        score = _sched_stats(by_name[name], metric)["score"]
        value = None if score is None else score.get("value")
        return (-value if is_number(value) else math.inf, name)

    body += [_sched_cells(cell_text(name), by_name[name], metric)
             for name in sorted(by_name, key=order)]
    lines = [Heading(3, "Scheduling"), Text(_sched_intro(first)),
             Table(_SCHED_HEADER, body, caption="scheduling"),
             Caption("scheduling", _sched_caption(first))]
    if n_old:
        lines.append(Text(old_note + " They are left out of the scores and Runs (a predictor "
                          f"with no other result shows {DASH})."))
    if other:
        lines.append(Text(f"{len(other)} predictor result(s) simulated with another sim "
                          "configuration or other simulator seeds than the one above are not "
                          "shown."))
    lines += _comparison_lines(scored, main)
    plot = out_dir / f"{stem}-sched-quality.png"
    try:
        from lenbench.sim.plots import plot_score_vs_quality

        plot_score_vs_quality([r.scheduling for r in scored], plot)
        written.add(plot)
        lines.append(Image(f"Scheduling score vs Kendall tau, {title}", plot.name))
    except (KeyError, TypeError, ValueError) as exc:  # a partial scheduling record
        lines.append(Text(f"(scheduling plot skipped: {type(exc).__name__}: {exc})"))
    return lines


_CMP_POLICIES = (("static_sjf", "Static SJF"), ("static_preemptive", "Static preemptive"),
                 ("dynamic_preemptive", "Dynamic preemptive"), ("distributional", "Distributional"))
_CMP_CHANGES = (("e2e_mean_long", "Long mean"), ("e2e_p99_long", "Long P99"))
_CMP_HEADER = ["Predictor", "Policy", "Score [95% CI]", *(label for _, label in _CMP_CHANGES),
               "Preemptions / request", "Runs"]


def _cmp_matrices(records: list[Result], row: str, key: str) -> Any:
    """(row, baseline, oracle) predictor seeds x simulator seeds of one figure, over the records
    that have the comparison row (each against its own baseline and oracle); None if none do
    or their seeds differ in number."""
    import numpy as np

    mats: dict[str, list[list[float]]] = {"row": [], "baseline": [], "oracle": []}
    for r in records:
        entry = ((r.scheduling.get("comparison") or {}).get("rows") or {}).get(row)
        refs = _sched_refs(r.scheduling)
        if not entry or not {"baseline", "oracle"} <= set(refs):
            continue
        for name, seeds in (("row", entry["per_seed"].get(key)),
                            ("baseline", refs["baseline"]["per_seed"].get(key)),
                            ("oracle", refs["oracle"]["per_seed"].get(key))):
            mats[name].append([np.nan if x is None else float(x) for x in seeds or []])
    if not mats["row"] or len({len(v) for vs in mats.values() for v in vs}) != 1:
        return None
    return tuple(np.array(mats[k]) for k in ("row", "baseline", "oracle"))


def _cmp_score(records: list[Result], row: str, metric: str) -> dict[str, Any] | None:
    """A comparison row's score pooled over predictor seeds (records with that row), against
    each record's own baseline and oracle, as `_sched_pooled` pools the main score."""
    from lenbench.sim.score import score_interval

    mats = _cmp_matrices(records, row, metric)
    if mats is None:
        return None
    row_m, base, best = mats
    return score_interval(base - row_m, base - best, base.mean(axis=0))


def _cmp_change(records: list[Result], row: str, key: str) -> str:
    """A comparison row's change of `key` against the baseline, pooled like the main table's."""
    from lenbench.sim.metrics import ratio_interval

    mats = _cmp_matrices(records, row, key)
    if mats is None:
        return DASH
    row_m, base, _ = mats
    value = ratio_interval(row_m - base, base).get("value")
    return DASH if value is None else f"{100 * value:+.0f}%"


def _cmp_preemptions(records: list[Result], row: str) -> str:
    """Mean preemptions per request of a preemptive row, over runs and simulator seeds."""
    if not row.endswith("preemptive"):
        return DASH
    vals = [float(x) for r in records
            for x in ((((r.scheduling.get("comparison") or {}).get("rows") or {})
                       .get(row) or {}).get("per_seed", {}).get("preemptions_per_request")
                      or []) if is_number(x)]
    return f"{statistics.fmean(vals):.2f}" if vals else DASH


def _cmp_has(records: list[Result], row: str) -> bool:
    return any(row in ((r.scheduling.get("comparison") or {}).get("rows") or {})
               for r in records)


def _comparison_lines(scored: list[Result], main: Result) -> list[Block]:
    """The "Scheduling comparison" table: one line per predictor and policy (static SJF,
    preemptive re-ranking on static and dynamic estimates, distributional ordering) with its
    score and its long-request mean and P99 changes, beside the oracle's SJF and SRPT-bound
    lines. Empty when no record carries a comparison."""
    with_cmp = [r for r in scored if isinstance(r.scheduling.get("comparison"), dict)]
    if not with_cmp:
        return []
    metric = str(main.scheduling.get("score_metric"))
    by_name: dict[str, list[Result]] = defaultdict(list)
    for r in with_cmp:
        by_name[r.predictor.name].append(r)
    ref = next((r for r in with_cmp if r is main), with_cmp[0])  # one draw: the oracle rows
    head = _sched_refs(ref.scheduling).get("oracle") or {}
    ci = head.get("score_ci95") or [None, None]
    body = [["*oracle* (ref)", "Static SJF",
             _sched_score_text({"value": head.get("score"), "ci95_low": ci[0],
                                "ci95_high": ci[1], "reason": head.get("score_reason")}),
             *(_pct(head.get(f"{key}_change")) for key, _ in _CMP_CHANGES), DASH, "1"],
            ["*oracle* (ref)", "Static preemptive (SRPT bound)",
             _sched_score_text(_cmp_score([ref], "oracle_preemptive", metric)),
             *(_cmp_change([ref], "oracle_preemptive", key) for key, _ in _CMP_CHANGES),
             _cmp_preemptions([ref], "oracle_preemptive"), "1"]]
    for name in sorted(by_name):
        records = by_name[name]
        for row, label in _CMP_POLICIES:
            if not _cmp_has(records, row):
                continue
            n_runs = sum(_cmp_has([r], row) for r in records)
            body.append([cell_text(name), label,
                         _sched_score_text(_cmp_score(records, row, metric)),
                         *(_cmp_change(records, row, key) for key, _ in _CMP_CHANGES),
                         _cmp_preemptions(records, row), str(n_runs)])
    cmp = ref.scheduling["comparison"]
    caption = (
        f"Scores as above (same draws, baseline and oracle; {metric}), per policy: Static SJF "
        f"is the predictor's score above; Static preemptive re-ranks by the static prediction "
        f"minus the tokens generated and preempts (queue srpt); Dynamic preemptive does so on "
        f"the predictor's dynamic remaining-length estimates (the latest step whose estimate "
        f"reads no token not yet generated, minus the tokens since); Distributional orders SJF "
        f"by the rank quantiles of {cmp.get('order_by')}, so an inflated statistic gains "
        f"nothing. Preemptive policies order by remaining tokens and so keep the predictions' "
        f"units: a rescaled copy of a predictor can score differently there, which is why the "
        f"headline score is static SJF's. The oracle's Static preemptive line is SRPT on true "
        f"lengths (remaining L − t), which may exceed 100% because the score's oracle does not "
        f"preempt. Long mean / Long P99: change of the long requests' mean and P99 end-to-end "
        f"latency against the baseline. Re-ranking every {cmp.get('repredict_every')} "
        f"iteration(s), margin {cmp.get('preempt_margin')} tokens, at most "
        f"{cmp.get('max_preemptions')} preemptions per request, cost "
        f"{cmp.get('preempt_cost')}, charged in simulated time. A policy a predictor has no "
        f"input for (no dynamic or no distributional predictions) is not listed. Preemptions / "
        f"request: mean over runs and simulator seeds.")
    return [Heading(4, "Scheduling comparison"),
            Table(_CMP_HEADER, body, [LEFT, LEFT] + [RIGHT] * (len(_CMP_HEADER) - 2),
                  caption="scheduling_comparison"), Caption("scheduling_comparison", caption)]


def _pct(value: Any) -> str:
    return f"{100 * value:+.0f}%" if is_number(value) else DASH
