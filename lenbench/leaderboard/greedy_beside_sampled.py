"""Greedy beside sampled: one table for two worlds that answer the same test prompts with the same
model, cap and repetition penalty, one greedily (temperature 0), one by sampling.

At temperature 0 an answer's length is a function of its prompt, so the greedy world has no
noise floor: a predictor's whole error there is what it failed to learn. Beside the sampled
world's figures, each predictor's row shows how much of its error the sampler adds and how
much of the learnable gap (constant to floor) it closes in each world.

Two sections pair when their results agree on the data set, the model, the cap and the
repetition penalty, one was generated at temperature 0 and the other above it, and their scored
test rows come from the same prompts (compared by prompt id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lenbench.leaderboard.blocks import LEFT, RIGHT, Block, Caption, Heading, Table, Text
from lenbench.leaderboard.cells import DASH, cell_text, mean
from lenbench.leaderboard.metric_specs import main_spec
from lenbench.leaderboard.rows import Row, floor_estimate, gap_share_cell
from lenbench.leaderboard.site import World
from lenbench.results import Result
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import FALLBACK_REFERENCE

__all__ = ["GREEDY_FLOOR", "companion_pairs", "greedy_beside_sampled", "is_greedy",
           "section_floor"]

# what must agree between the two worlds' generation, besides the prompts
SHARED_SAMPLING = ("max_new_tokens", "repetition_penalty")
# the greedy world's floor: a repeated greedy answer is the same answer
GREEDY_FLOOR: Mapping[str, Any] = {"estimate": 0.0, "ci": [0.0, 0.0]}


def is_greedy(result: Result) -> bool:
    """Its labels were generated at temperature 0."""
    return ((result.generation or {}).get("sampling") or {}).get("temperature") == 0


def _sampling(world: World) -> Mapping[str, Any] | None:
    """The sampling settings every result of the world records (None: none, or they differ)."""
    seen = {repr(sorted(((r.generation or {}).get("sampling") or {}).items()))
            for r in world.results}
    if len(seen) != 1:
        return None
    sampling = (world.results[0].generation or {}).get("sampling") or {}
    return sampling if is_number(sampling.get("temperature")) else None


def _test_prompts(world: World) -> frozenset | None:
    """The prompt ids of the world's scored test rows (from the first result that stores them)."""
    for r in world.results:
        if r.predictions is not None and r.predictions.prompt_id:
            return frozenset(r.predictions.prompt_id)
    return None


def _names(world: World) -> tuple[str, str]:
    r = world.results[0]
    return r.dataset.name, r.model.name


def companion_pairs(worlds: Sequence[World]) -> list[tuple[World, World]]:
    """(sampled, greedy) pairs of sections over the same prompts, model, cap and penalty; a greedy
    world with several sampled companions pairs with the one with the most results."""
    pairs = []
    described = [(w, s, _test_prompts(w)) for w in worlds if w.results
                 and (s := _sampling(w)) is not None]
    for greedy, g_sampling, g_prompts in described:
        if g_sampling["temperature"] != 0 or not g_prompts:
            continue
        matches = [w for w, s, prompts in described
                   if s["temperature"] > 0 and prompts == g_prompts
                   and _names(w) == _names(greedy)
                   and all(s.get(k) == g_sampling.get(k) for k in SHARED_SAMPLING)]
        if matches:
            pairs.append((max(matches, key=lambda w: len(w.results)), greedy))
    return pairs


def _predictors(world: World) -> dict[str, Row]:
    return {row.label: row for row in world.rows if row.kind == "predictor"}


def section_floor(rows: Sequence[Row]) -> Mapping[str, Any] | None:
    """A section's floor: its noise-floor row's single estimate, or 0 where every result is
    greedy (a greedy answer repeats exactly); None where it has neither."""
    found = next((est for row in rows if row.kind == "reference"
                  and (est := floor_estimate(row)) is not None), None)
    if found is None and rows and all(is_greedy(r) for row in rows for r in row.results):
        return GREEDY_FLOOR
    return found


def _mae(row: Row | None) -> str:
    return DASH if row is None else main_spec("static.mae").cell(row)


def _c_index(row: Row | None) -> str:
    value = None if row is None else mean(row.values("static.c_index"))
    return DASH if value is None else f"{value:.2f}"


def _share(row: Row | None, const: Row | None, floor: Mapping[str, Any] | None) -> str:
    if row is None or const is None or floor is None:
        return DASH
    return gap_share_cell(row, const, floor)


def _censored_share(world: World) -> float | None:
    generation = world.results[0].generation or {}
    rows, censored = generation.get("n_rows"), generation.get("n_censored")
    return censored / rows if is_number(rows) and is_number(censored) and rows else None


def greedy_beside_sampled(sampled: World, greedy: World) -> list[Block]:
    """The side-by-side section of one pair: a table row per predictor scored in either world
    (MAE, share of the gap, C-index, seeds), the floors, and what bounds a greedy predictor."""
    s_rows, g_rows = _predictors(sampled), _predictors(greedy)
    s_const, g_const = s_rows.get(FALLBACK_REFERENCE), g_rows.get(FALLBACK_REFERENCE)
    s_floor = section_floor(sampled.rows)
    order = sorted(set(s_rows) | set(g_rows), key=lambda label: (
        mean((g_rows.get(label) or s_rows[label]).values("static.mae")) or float("inf"), label))
    body = []
    for label in order:
        s, g = s_rows.get(label), g_rows.get(label)
        body.append([cell_text(label), _mae(s), _mae(g), _share(s, s_const, s_floor),
                     _share(g, g_const, GREEDY_FLOOR), _c_index(s), _c_index(g),
                     f"{len(s.results) if s else 0} / {len(g.results) if g else 0}"])
    floor_cell = DASH if s_floor is None else f"{s_floor['estimate']:.1f}"
    foot = [["*noise floor* (ref)", floor_cell, "0 (by construction)", DASH, DASH, DASH, DASH,
             DASH]]
    temperature = _sampling(sampled)["temperature"]
    dataset, model = _names(greedy)
    blocks: list[Block] = [
        Heading(3, f"Greedy beside sampled: {dataset} / {model}"),
        Text(f"The same {len(_test_prompts(greedy))} test prompts, model, cap and repetition "
             f"penalty, answered at temperature {temperature:g} in section «{sampled.title}» "
             f"and greedily in «{greedy.title}»."),
        Table(["Predictor", "MAE sampled", "MAE greedy", "Share of gap sampled",
               "Share of gap greedy", "C-index sampled", "C-index greedy",
               "Seeds (sampled / greedy)"], body, [LEFT] + [RIGHT] * 7, foot=foot,
              caption="greedy_beside_sampled"),
    ]
    s_cens, g_cens = _censored_share(sampled), _censored_share(greedy)
    censored = ("" if s_cens is None or g_cens is None else
                f" {100 * g_cens:.1f}% of the greedy answers reach the cap, against "
                f"{100 * s_cens:.1f}% of the sampled ones.")
    blocks.append(Text(
        "**What bounds a predictor on the greedy world.** Its floor is 0: asked again, the "
        "model gives the same answer, so nothing in the length is left to chance and a "
        "predictor's whole error is what it did not learn. What bounds it is then what the "
        "predictor sees and how much it can learn from the training prompts: the prompt text or "
        "the target's state after prefill must carry the length, and a small training split "
        "caps how finely it can be read." + censored))
    blocks.append(Caption("greedy_beside_sampled", (
        "MAE: mean ± std over seeds, tokens, in each world. Share of gap: (the constant's MAE − "
        "the row's) / (the constant's MAE − the floor), with a conservative 95% interval from "
        "the paired gain over the constant and the floor's interval; the sampled world's floor "
        "is its prompt-median estimate (the main table's noise floor row), the greedy world's "
        "0. C-index: Harrell's C, mean over seeds. Seeds: results pooled in each world's row. "
        f"{DASH}: not scored in that world.")))
    return blocks
