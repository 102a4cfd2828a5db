"""The scheduling score beyond its own column: the classes it reports, what it is in words, the
paired difference of two predictors' scores, and the score at several aging weights.

Two predictors' scores come from the same draws (same test rows, seeds, arrivals and baseline),
so their difference is read seed by seed, which cancels what the draws share; two unpaired
intervals would overlap almost always.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lenbench.leaderboard.blocks import LEFT, RIGHT, Block, Caption, Heading, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, number
from lenbench.leaderboard.scheduling_cells import sched_refs, score_text
from lenbench.results import Result
from lenbench.results.checks import is_number

_METRIC_TEXT = {
    "e2e_mean_all": "the mean end-to-end latency of all requests",
    "e2e_mean_short": "the mean end-to-end latency of short requests",
    "e2e_p90_short": "the P90 end-to-end latency of short requests",
    "e2e_p99_short": "the P99 end-to-end latency of short requests",
}
# (predictor headline entry, its record's reference entries, simulator seeds), as scheduling.py
Run = tuple[dict[str, Any], dict[str, dict[str, Any]], list[Any]]


def metric_text(metric: str) -> str:
    return _METRIC_TEXT.get(metric, metric)


def classes_text(first: dict[str, Any]) -> str:
    """The classes of a record in words, with their shares of the test rows."""
    shares = first.get("class_shares") or {}

    def share(cls: str) -> str:
        value = shares.get(cls)
        return f" ({100 * value:.1f}% of test rows)" if is_number(value) else ""

    short, long_ = number(first.get("short_threshold"), 0), number(first.get("long_threshold"), 0)
    if "capped" not in shares:  # a record written before the capped class existed
        return f"Short/long classes: true length < {short} / >= {long_} tokens."
    text = f"Classes: short = true length < {short} tokens{share('short')}; long = "
    if not shares["capped"]:
        return text + f"at least {long_} tokens{share('long')}; no request was cut at a cap."
    cfg = first.get("config") or {}

    def basis(key: str) -> str:
        spec = str(cfg.get(key))
        return f" (the {spec[1:]}th percentile of their lengths)" if spec.startswith("q") else ""

    return (f"Classes, among the requests that ended before the length cap: short = true length "
            f"< {short} tokens{basis('short_threshold')}{share('short')}; long = at least "
            f"{long_} tokens{basis('long_threshold')}{share('long')}; "
            f"capped = cut at the cap{share('capped')}, a class of their own, so that the long "
            f"class is the tail of the known lengths, not the cap.")


def score_definition(first: dict[str, Any]) -> str:
    """The headline score in words: its figure, its cap, when it is given and its interval."""
    metric = str(first.get("score_metric"))
    scope = ("on all requests, unlike on one class, no key gains by delaying requests the "
             "figure does not count" if metric == "e2e_mean_all" else
             "on one class a key can gain by delaying the requests the figure does not count, "
             "which the cap bounds but does not undo")
    return (
        f"Score = (baseline − predictor) / (baseline − oracle) of {metric_text(metric)}, "
        f"the predictor's mean gain counted up to the oracle's: the oracle scores exactly 100%, "
        f"no predictor above it (one that reaches it shows 100% and the lower end of its "
        f"interval), a constant predictor exactly 0%, below 0% is harm. SJF on true lengths "
        f"is not the best order on every draw (no fixed order is, once requests arrive over "
        f"time, and lengths tied at the cap leave many orders equal to it), so the cap makes "
        f"it the ceiling by construction; {scope}. No score "
        f"({DASH}, with the reason) unless the oracle's mean gain is positive and at least "
        f"twice its standard error over the simulator seeds. Numerator and denominator are "
        f"means over the simulator seeds (paired: one draw per seed serves every row) and over "
        f"the predictor's seeds (Runs). 95% CI: Student-t interval on the linearised ratio (delta "
        f"method) with the variance over simulator seeds (each draws its own requests from the "
        f"test rows and its own arrivals), plus the variance over predictor seeds where there "
        f"are several (Welch-Satterthwaite degrees of freedom); its ends at most 100%.")


def _matrix(runs: Sequence[Run], key: str, ref: str | None) -> Any:
    """Predictor seeds x simulator seeds of one figure (the row's own, or a reference row's),
    None where a run lacks it or the runs differ in length."""
    import numpy as np

    vals = [(entry if ref is None else refs.get(ref, {})).get("per_seed", {}).get(key)
            for entry, refs, _ in runs]
    if any(not isinstance(v, list) for v in vals) or len({len(v) for v in vals}) != 1:
        return None
    return np.array([[np.nan if x is None else float(x) for x in v] for v in vals])


def same_draws(a: Sequence[Run], b: Sequence[Run], metric: str) -> bool:
    """Whether two predictors' records served the same draws: the same simulator seeds and the
    same baseline figures seed by seed (the baseline reads no prediction)."""
    if not a or not b or list(a[0][2]) != list(b[0][2]):
        return False
    base_a, base_b = _matrix(a[:1], metric, "baseline"), _matrix(b[:1], metric, "baseline")
    return base_a is not None and base_b is not None and bool((base_a == base_b).all())


def paired_delta(a: Sequence[Run], b: Sequence[Run], metric: str) -> dict[str, Any] | None:
    """Score of a minus score of b on their shared draws (`sim.score.paired_score_difference`),
    None when they cannot be paired."""
    from lenbench.sim.score import paired_score_difference

    if not same_draws(a, b, metric):
        return None
    base = _matrix(a, metric, "baseline")
    row_a, row_b = _matrix(a, metric, None), _matrix(b, metric, None)
    best = _matrix(a, metric, "oracle")
    if base is None or row_a is None or row_b is None or best is None:
        return None
    base_b = _matrix(b, metric, "baseline")
    return paired_score_difference(base - row_a, base_b - row_b, (base - best).mean(axis=0),
                                   base.mean(axis=0))


def delta_text(delta: dict[str, Any] | None) -> str:
    """"+4.7 [−5.7, +15.1]" in points of score, bold where the interval excludes 0."""
    if not delta or delta.get("value") is None:
        return DASH
    value, lo, hi = delta["value"], delta.get("ci95_low"), delta.get("ci95_high")
    text = f"{100 * value:+.1f}"
    if not (is_number(lo) and is_number(hi)):
        return text
    if lo > 0 or hi < 0:
        text = f"**{text}**"
    return f"{text} [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def leader_note(order: Sequence[str], by_name: dict[str, list[Run]], metric: str) -> list[Block]:
    """The two highest-scoring predictors' paired difference, said in a sentence."""
    if len(order) < 2:
        return []
    first, second = order[0], order[1]
    delta = paired_delta(by_name[first], by_name[second], metric)
    if delta is None or delta.get("value") is None:
        return []
    lo, hi = delta.get("ci95_low"), delta.get("ci95_high")
    verdict = ("" if not (is_number(lo) and is_number(hi)) else
               " (separated: the interval excludes 0)" if lo > 0 or hi < 0 else
               " (not separated: the interval holds 0)")
    return [Text(f"The two highest scores, paired on the same draws: {cell_text(first)} − "
                 f"{cell_text(second)} = {delta_text(delta)} points{verdict}.")]


def _alpha_runs(records: Sequence[Result], alpha: float, metric: str) -> Any:
    """(baseline, row, oracle) predictor seeds x simulator seeds at one aging weight, over the
    records whose sweep has it; None when none does or they differ in shape."""
    import numpy as np

    mats: dict[str, list[list[float]]] = {"base": [], "row": [], "best": []}
    for r in records:
        sweep = r.scheduling.get("by_alpha") or {}
        entry = next((e for e in sweep.get("entries") or [] if e.get("aging_alpha") == alpha),
                     None)
        refs = sched_refs(r.scheduling)
        rows = (entry or {}).get("rows") or {}
        own = [v for k, v in rows.items() if k != "oracle"]
        if sweep.get("score_metric") != metric or not own or "oracle" not in rows \
                or "baseline" not in refs:
            continue
        for key, values in (("base", refs["baseline"]["per_seed"].get(metric)),
                            ("row", own[0]["per_seed"].get(metric)),
                            ("best", rows["oracle"]["per_seed"].get(metric))):
            mats[key].append([np.nan if x is None else float(x) for x in values or []])
    if not mats["row"] or len({len(v) for vs in mats.values() for v in vs}) != 1:
        return None
    return tuple(np.array(mats[k]) for k in ("base", "row", "best"))


def alpha_lines(records: dict[str, list[Result]], order: Sequence[str], main: Result,
                label: Callable[[str], str]) -> list[Block]:
    """"Scheduling score by aging weight": one line per predictor (in `order`, the main
    table's), one column per weight of the main record's sweep, and the oracle's gain at each
    weight (the share of the baseline's figure that the score shares out)."""
    from lenbench.sim.score import score_interval

    sweep = main.scheduling.get("by_alpha") or {}
    alphas = [a for a in sweep.get("alphas") or [] if is_number(a)]
    metric = sweep.get("score_metric")
    if not alphas or not metric:
        return []
    header = ["Predictor", *(f"α = {a:g}" + (" (no guard)" if a == 0 else "") for a in alphas)]
    oracle_cells = []
    for alpha in alphas:
        mats = _alpha_runs([main], alpha, metric)
        if mats is None:
            oracle_cells.append(DASH)
            continue
        base, _, best = mats
        oracle_cells.append(f"{100 * ((best - base).mean() / base.mean()):+.1f}%")
    body = [["*oracle* (ref): change of the figure", *oracle_cells]]
    for name in order:
        cells = [label(name)]
        for alpha in alphas:
            mats = _alpha_runs(records[name], alpha, metric)
            if mats is None:
                cells.append(DASH)
                continue
            base, row, best = mats
            cells.append(score_text(score_interval(base - row, base - best, base.mean(axis=0),
                                                   capped=True)))
        body.append(cells)
    headline = main.scheduling.get("config", {}).get("aging_alpha")
    caption = (
        f"The score as above ({metric_text(str(metric))}, at most the oracle's 100%) with the "
        f"starvation guard's aging weight α set to each value, in quantiles per second of "
        f"waiting (0: plain SJF, no guard): the oracle and the predictor are "
        f"served again on the same draws, against the same FCFS baseline, which no weight "
        f"changes. A stronger guard keeps less of SJF's gain and bounds long waits; a ranking "
        f"right at the extremes and wrong in the middle loses less under it, so the order of "
        f"two predictors can change with α. The oracle's line is its change of the figure "
        f"against the baseline at each weight: the gain each score is a share of. The headline "
        f"score is α = {number(headline, 3) if is_number(headline) else DASH}.")
    return [Heading(4, "The starvation guard: score by aging weight"),
            Table(header, body, [LEFT] + [RIGHT] * len(alphas), caption="scheduling_alpha"),
            Caption("scheduling_alpha", caption)]
