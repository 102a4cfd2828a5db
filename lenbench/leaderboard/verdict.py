"""The verdict that opens the leaderboard: for each real world, one row per predictor family that
says how accurate it is, what it is worth to a scheduler, what it costs and when to use it, a
cost-against-accuracy plot, and "which predictor when" in a few sentences.

A family is a predictor with its decoding variants; its row shows its most accurate reading.
Tiers come from the tables' own paired test: in order of MAE, a row joins the tier of the
tier's first row unless the paired difference to it is separated (its 95% interval excludes 0
and both sides have several seeds), in which case it opens the next tier. The sentences carry
the findings checker's markers, so a test recomputes every figure they cite from the results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lenbench.leaderboard.blocks import (
    LEFT,
    RIGHT,
    Block,
    Caption,
    Comment,
    Heading,
    Image,
    Items,
    Table,
    Text,
)
from lenbench.leaderboard.cells import DASH, cell_text, mean
from lenbench.leaderboard.greedy_beside_sampled import section_floor
from lenbench.leaderboard.rows import Row
from lenbench.leaderboard.scheduling import serving_gain
from lenbench.leaderboard.site import World
from lenbench.scoring.comparisons import (
    FALLBACK_REFERENCE,
    PROMPTS_ONLY,
    paired_rows,
    separated,
)

__all__ = ["HEADING", "Pick", "family_picks", "real_worlds", "verdict_blocks",
           "which_predictor_when"]

HEADING = "Verdict: which predictor when"

TOY_MODEL = "toy"  # the default world's model: a demonstration, not a verdict
SLOW_MS = 10.0  # a predictor costing more than this per request says so in its advice


@dataclass
class Pick:
    """One family's verdict row: its most accurate reading and its own (main) reading."""

    best: Row
    main: Row
    tier: int | None = 1  # None: its rows cannot be paired with its tier's first row
    prompts_only: bool = False  # its tier rests on a pair with one seed a side (prompts only)

    @property
    def mae(self) -> float:
        return mean(self.best.values("static.mae")) or math.inf

    @property
    def ms(self) -> float | None:
        return mean(self.main.values("timings.predict_ms_per_request"))

    @property
    def fit_s(self) -> float | None:
        return mean(self.main.values("timings.fit_s"))

    @property
    def reads_states(self) -> bool:
        """It reads the target's internals: its states or the model itself, as its results
        record (`predictor.reads`); for results written before that, a features fingerprint or
        a remaining-length reading (every dynamic predictor here reads decoding states)."""
        for r in self.main.results:
            if (reads := r.predictor.reads) is not None:
                return bool(reads.get("target_states") or reads.get("target_model"))
        return any(r.fingerprints is not None and r.fingerprints.features
                   for r in self.main.results) or self.dynamic

    @property
    def dynamic(self) -> bool:
        return bool(self.main.values("dynamic.mae"))

    @property
    def check_name(self) -> str:
        """The best reading as the findings checker names it (`predictor/variant`)."""
        return self.best.name + (f"/{self.best.variant}" if self.best.variant else "")


def real_worlds(worlds: Sequence[World]) -> list[World]:
    """The sections a verdict is given for, newest first: a real target model and enough test
    prompts to rank predictors on."""
    real = [w for w in worlds if w.results and w.too_few is None
            and all(r.model.name != TOY_MODEL for r in w.results)
            and any(row.kind == "predictor" for row in w.rows)]
    return sorted(real, key=lambda w: max(r.created_at or "" for r in w.results), reverse=True)


def family_picks(world: World) -> list[Pick]:
    """One pick per predictor of the world, in order of MAE, with its tier."""
    families: dict[str, list[Row]] = {}
    for row in world.rows:
        if row.kind == "predictor" and row.values("static.mae"):
            families.setdefault(row.name, []).append(row)
    picks = []
    for rows in families.values():
        main = next((r for r in rows if r.variant is None), None)
        if main is not None:
            picks.append(Pick(min(rows, key=lambda r: mean(r.values("static.mae"))), main))
    picks.sort(key=lambda p: (p.mae, p.best.label))
    leader = None
    tier = 0
    for pick in picks:
        d = None if leader is None else paired_rows(pick.best.scored_rows(),
                                                    leader.best.scored_rows())
        one_seed = d is not None and min(d.get("seeds") or (2, 2)) < 2
        if leader is None or (d is not None and (
                excludes_zero(d["ci"]) if one_seed else separated(d))):
            tier, leader = tier + 1, pick
        pick.tier = tier if leader is pick or d is not None else None
        pick.prompts_only = one_seed
    return picks


def excludes_zero(ci) -> bool:
    return ci is not None and (ci[0] > 0 or ci[1] < 0)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return DASH
    if seconds < 90:
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {round(seconds % 3600 / 60):.0f} min"


def _ms(value: float | None) -> str:
    if value is None:
        return DASH
    return f"{value:.2g}" if value < 1 else f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


def _hardware(world: World) -> str:
    env = world.results[0].environment or {}
    device = "GPU" if str(env.get("device", "cpu")).startswith("cuda") else "CPU"
    cores = env.get("cpu_count")
    return f"{device}, {cores} cores" if device == "CPU" and cores else device


def _share(pick: Pick, const: Pick | None, floor: float | None) -> str:
    if const is None or floor is None or pick is const:
        return DASH if pick is not const else "0%"
    c = const.mae
    return DASH if c - floor <= 0 else f"{100 * (c - pick.mae) / (c - floor):.0f}%"


def _serving(pick: Pick) -> str:
    gain = serving_gain(pick.main.results)
    if gain is None:
        return DASH
    text = f"{gain[0]:+.2f} s ({100 * gain[1]:+.1f}%)"
    return text + (" ¹" if pick.best is not pick.main else "")


def advice(pick: Pick, top_tier: int = 1) -> str:
    """One plain-words line: when this family is the one to use."""
    if pick.main.name == FALLBACK_REFERENCE:
        return "The yardstick, not a choice: every predictor must beat the train median."
    parts = ["Among the most accurate here." if pick.tier == top_tier else
             "Its accuracy cannot be paired with the others' (results without row ids)."
             if pick.tier is None else
             f"Accuracy tier {pick.tier}: less accurate than tier {top_tier}."]
    parts.append("Needs the target's hidden states: for an engine you run yourself."
                 if pick.reads_states else "Reads the prompt alone: fits in front of any engine "
                 "or API.")
    if pick.dynamic:
        parts.append("Also re-predicts the remaining length while decoding.")
    if pick.ms is not None and pick.ms >= SLOW_MS:
        parts.append(f"Adds {_ms(pick.ms)} ms a request.")
    return " ".join(parts)


def _table(world: World, picks: list[Pick]) -> Table:
    const = next((p for p in picks if p.main.name == FALLBACK_REFERENCE), None)
    found = section_floor(world.rows)
    floor = None if found is None else found["estimate"]
    hardware = _hardware(world)
    body = [[cell_text(p.best.label),
             DASH if p.tier is None else f"{p.tier}{PROMPTS_ONLY if p.prompts_only else ''}",
             f"{p.mae:.1f}", _share(p, const, floor), _serving(p), _ms(p.ms),
             _duration(p.fit_s), advice(p)] for p in picks]
    return Table(["Predictor", "Tier", "MAE", "Share of gap", "Serving gain",
                  f"ms/request ({hardware})", "Training", "Use it when"], body,
                 [LEFT, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, RIGHT, LEFT], caption="verdict")


def _plot(world: World, picks: list[Pick], path: Path) -> bool:
    """Static MAE against ms/request (log), each family's best reading, the Pareto front
    joined: the rows no other beats on both."""
    from matplotlib.figure import Figure

    from lenbench.leaderboard.plots import save_png

    points = [(max(p.ms, 1e-3), p.mae, p.best.label) for p in picks if p.ms is not None]
    if len(points) < 2:
        return False
    fig = Figure(figsize=(7.2, 4.2), layout="constrained")
    ax = fig.subplots()
    ax.scatter([x for x, _, _ in points], [y for _, y, _ in points], color="tab:blue")
    front = [pt for pt in sorted(points) if not any(
        o[0] <= pt[0] and o[1] < pt[1] or o[0] < pt[0] and o[1] <= pt[1] for o in points)]
    ax.plot([x for x, _, _ in front], [y for _, y, _ in front], color="tab:orange",
            label="no other row is both cheaper and more accurate")
    ax.set_xscale("log")
    ax.set_xlabel(f"prediction cost, ms per request ({_hardware(world)}; floor 0.001)")
    ax.set_ylabel("static MAE, tokens (lower is better)")
    ax.set_title(f"Cost against accuracy: {world.title.replace('`', '')}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")
    place_labels(fig, ax, points)
    save_png(fig, path)
    return True


# where a point's label may go, in points from the point: right, left, above, below, further out
LABEL_OFFSETS = ((6, 3), (6, -10), (-6, 3), (-6, -10), (0, 9), (0, -15), (6, 16), (6, -23),
                 (-6, 16), (-6, -23), (0, 27), (0, -33))


def place_labels(fig, ax, points: list[tuple[float, float, str]]) -> None:
    """Label each point where its text overlaps no other label, point or the legend: the first
    of `LABEL_OFFSETS` that is free (the last one tried when none is)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw_without_rendering()
    taken = [ax.get_legend().get_window_extent(renderer)] if ax.get_legend() else []
    dots = [ax.transData.transform((x, y)) for x, y, _ in points]
    for x, y, label in sorted(points, key=lambda p: p[1]):
        for dx, dy in LABEL_OFFSETS:
            text = ax.annotate(label, (x, y), xytext=(dx, dy), textcoords="offset points",
                               fontsize=7, ha="left" if dx >= 0 else "right")
            box = text.get_window_extent(renderer).expanded(1.05, 1.1)
            inside = ax.get_window_extent(renderer).contains(box.x0, box.y0) and \
                ax.get_window_extent(renderer).contains(box.x1, box.y1)
            clear = inside and not any(box.overlaps(t) for t in taken) and not any(
                box.contains(px, py) for px, py in dots)
            if clear or (dx, dy) == LABEL_OFFSETS[-1]:
                taken.append(box)
                break
            text.remove()


def _sentences(world: World, picks: list[Pick]) -> list[Block]:
    """Which predictor when, each sentence with the checks of the figures it cites."""
    first = world.results[0]
    marker = (f"world: {first.dataset.name}/{first.model.name}"
              + (f" labels={first.labels_fingerprint[:8]}" if first.labels_fingerprint else ""))
    items = []
    top = [p for p in picks if p.tier == 1]
    best = picks[0]
    every = "*"
    tied = "" if len(top) < 2 else \
        f"; not separated {best.check_name} vs {','.join(p.check_name for p in top[1:])} static.mae"
    items.append(
        f"Most accurate: `{best.best.label}`, MAE {best.mae:.1f}"
        + (f"; in its accuracy tier: {', '.join(f'`{p.best.label}`' for p in top[1:])}."
           if len(top) > 1 else ".")
        + f" <!-- check: {best.check_name} static.mae = {best.mae:.1f}; "
          f"lowest {every} static.mae: {best.check_name}{tied} -->")
    text_only = [p for p in picks if not p.reads_states and p.main.name != FALLBACK_REFERENCE]
    if text_only:
        t = text_only[0]
        names = ",".join(p.check_name for p in text_only)
        items.append(
            f"Without the target's internals (an API, or any engine): `{t.best.label}`, MAE "
            f"{t.mae:.1f}, the most accurate of the predictors that read the prompt alone."
            f" <!-- check: {t.check_name} static.mae = {t.mae:.1f}; lowest {names} static.mae: "
            f"{t.check_name} -->")
    costs = [p for p in top if p.ms is not None]
    if len(costs) > 1:
        cheap = min(costs, key=lambda p: p.ms)
        names = ",".join(p.main.name for p in costs)
        items.append(
            f"Cheapest of the most accurate: `{cheap.main.name}`, by its prediction cost per "
            f"request. <!-- check: lowest {names} timings.predict_ms_per_request: "
            f"{cheap.main.name} -->")
    scored = [p for p in picks if p.main.values("scheduling.score")
              and p.main.name != FALLBACK_REFERENCE]
    if scored:
        s = max(scored, key=lambda p: mean(p.main.values("scheduling.score")))
        names = ",".join(p.main.name for p in scored)
        items.append(
            f"Worth most to a length-aware scheduler here: `{s.main.name}`, by the mean "
            f"latency its order cuts at the headline load. <!-- check: highest {names} "
            f"scheduling.score: {s.main.name} -->")
    return [Comment(marker), Items(items)]


def verdict_blocks(worlds: Sequence[World], out_dir: Path, written: set[Path]) -> list[Block]:
    """The verdict section: per real world, newest first, its table, plot and sentences."""
    chosen = real_worlds(worlds)
    if not chosen:
        return []
    blocks: list[Block] = [Heading(2, HEADING), Text(
        "One table for each world of a real model with enough test prompts to rank predictors "
        "on, newest first (the toy worlds and smaller ones follow in their own sections). What "
        "the columns and marks mean is written under the last table.")]
    for world in chosen:
        picks = family_picks(world)
        if not picks:
            continue
        blocks += [Heading(3, world.title), _table(world, picks)]
        plot = out_dir / f"plot-{world.stem}-cost-accuracy.png"
        if _plot(world, picks, plot):
            written.add(plot)
            blocks.append(Image(f"Cost against accuracy, {world.title}", plot.name))
        blocks += _sentences(world, picks)
    blocks.append(Caption("verdict", (
        "Tier: from the tables' paired test, in order of MAE: a row shares the tier of the "
        "tier's first row unless their paired difference is separated (95% interval excludes "
        f"0, both sides with several seeds; {PROMPTS_ONLY}: a side has one seed, so the "
        "interval covers the prompts only, not the training); — where the rows cannot be "
        "paired (no stored row ids). MAE: static MAE of the family's most accurate "
        "reading, tokens. Share of gap: (the constant's MAE − the row's) / (the constant's MAE "
        "− the noise floor's estimate). Serving gain: seconds cut from the FCFS baseline's mean "
        "latency of all requests at the world's headline load, and as a share of it (¹: "
        "simulated on the family's own reading, not the one shown). ms/request and Training: "
        "measured where the results were made, on the hardware named.")))
    return blocks


def which_predictor_when(markdown: str) -> str:
    """The verdict's sentences out of a built README: each world's marker and its list items,
    what the findings checker reads (the tables' figures are the results' own)."""
    section = markdown.split(f"## {HEADING}\n", 1)[-1].split("\n## ", 1)[0]
    keep = [line for line in section.splitlines()
            if line.startswith(("<!-- world:", "- "))]
    return "\n\n".join(keep) + "\n"
