"""The "Scheduling comparison" table: what dynamic and distributional predictions add to a
scheduler (preemptive re-ranking, distributional ordering), scored on the draws of the scheduling
score against its baseline and oracle."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from lenbench.leaderboard.blocks import LEFT, RIGHT, Block, Caption, Heading, Table
from lenbench.leaderboard.cells import DASH, cell_text
from lenbench.leaderboard.scheduling_cells import pct, sched_refs, score_text
from lenbench.results import Result
from lenbench.results.checks import is_number

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
        refs = sched_refs(r.scheduling)
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
    each record's own baseline and oracle, as the scheduling table pools the main score (without
    the cap, but for static SJF: the preemptive rows may beat the non-preemptive oracle)."""
    from lenbench.sim.score import score_interval

    mats = _cmp_matrices(records, row, metric)
    if mats is None:
        return None
    row_m, base, best = mats
    return score_interval(base - row_m, base - best, base.mean(axis=0),
                          capped=row == "static_sjf")


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


def comparison_lines(scored: list[Result], main: Result) -> list[Block]:
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
    head = sched_refs(ref.scheduling).get("oracle") or {}
    ci = head.get("score_ci95") or [None, None]
    body = [["*oracle* (ref)", "Static SJF",
             score_text({"value": head.get("score"), "ci95_low": ci[0],
                                "ci95_high": ci[1], "reason": head.get("score_reason")}),
             *(pct(head.get(f"{key}_change")) for key, _ in _CMP_CHANGES), DASH, "1"],
            ["*oracle* (ref)", "Static preemptive (SRPT bound)",
             score_text(_cmp_score([ref], "oracle_preemptive", metric)),
             *(_cmp_change([ref], "oracle_preemptive", key) for key, _ in _CMP_CHANGES),
             _cmp_preemptions([ref], "oracle_preemptive"), "1"]]
    for name in sorted(by_name):
        records = by_name[name]
        for row, label in _CMP_POLICIES:
            if not _cmp_has(records, row):
                continue
            n_runs = sum(_cmp_has([r], row) for r in records)
            body.append([cell_text(name), label,
                         score_text(_cmp_score(records, row, metric)),
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

