"""The paired step table: each dynamic predictor's remaining-length error minus the reference
predictor's at each listed step, on one population of requests.

The tables by observed steps read each predictor on its own at each t; a predictor can be ahead
at every listed t and behind on the dynamic MAE, or look worse at t = 8 than at t = 0, for
reasons that are not its accuracy at those steps (which requests are counted, and how the
aggregate weighs them). Read paired, on the same rows at every t, a difference is the two
predictors' difference at that step and nothing else.
"""

from __future__ import annotations

from lenbench.leaderboard.blocks import Block, Caption, Table
from lenbench.leaderboard.cells import DASH, cell_text
from lenbench.leaderboard.rows import Row
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import delta_text, paired_steps


def paired_steps_lines(rows: list[Row], reference: str | None) -> list[Block]:
    """The table (one line per dynamic predictor, one column per listed t up to the population's
    T, the reference's own error on the first line) and its caption; [] when the reference is
    not a dynamic predictor with stored step errors or no predictor pairs with it."""
    ref = next((r for r in rows if r.name == reference and r.variant is None), None)
    if ref is None:
        return []
    body, first = [], None
    for row in rows:
        if row is ref or row.variant is not None or row.kind != "predictor":
            continue
        found = paired_steps(row.scored_rows(), ref.scored_rows())
        if found is None:
            continue
        if first is None:
            first = found
        if found["t"] != first["t"] or found["n_requests"] != first["n_requests"]:
            continue  # another population (other rows): not in this table
        body.append([cell_text(row.label), *(delta_text(c) for c in found["cells"])])
    if first is None:
        return []
    true = ref.results[0].predictions.true if ref.results[0].predictions else []
    cut = ref.results[0].predictions.censored if ref.results[0].predictions else None
    members = first["rows"]
    n_cut = sum(bool(c) for c, m in zip(cut or [], members) if m)
    mean_len = (sum(float(t) for t, m in zip(true, members) if m) / first["n_requests"]
                if first["n_requests"] else None)
    header = ["Predictor", *(f"Δ t = {t}" for t in first["t"])]
    body.insert(0, [f"*{cell_text(ref.label)}* (reference): its MAE",
                    *(f"{v:.1f}" if is_number(v) else DASH for v in first["reference_mae"])])
    caption = (
        f"Each predictor's remaining-length error |(L − t) − r̂_t| at exactly t generated tokens "
        f"minus {cell_text(ref.label)}'s, on one population for every column and both "
        f"predictors: the {first['n_requests']} requests longer than {first['t_max']} tokens "
        f"(the longest listed t that at least half of the test requests outlive; "
        f"{first['n_prompts']} prompts, mean length "
        f"{DASH if mean_len is None else f'{mean_len:.0f}'}), {n_cut} of them cut at the "
        f"length cap, whose error counts only a shortfall. Errors are averaged over each "
        f"predictor's seeds row by row; 95% interval: paired bootstrap over prompts and each "
        f"side's seeds; **bold** "
        f"where it excludes 0 and both sides have several seeds (negative: better than the "
        f"reference; ° a side has one seed: the interval covers the prompts only). The first "
        f"line is the "
        f"reference's own MAE on this population. The main table's dynamic MAE weighs requests "
        f"differently: for each request, the mean of its error over all its scored steps, then "
        f"the plain mean over requests, so every request counts once whatever its length, all "
        f"of a request's steps count (those past the last listed t too), and short requests, "
        f"which leave this population, count as much as long ones. A predictor can therefore "
        f"lead here at every t and trail on the dynamic MAE.")
    return [Table(header, body, caption="dynamic_steps"), Caption("dynamic_steps", caption)]
