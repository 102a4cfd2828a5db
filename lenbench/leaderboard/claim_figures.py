"""A figure of a results folder by name, for the claims a document makes about the tables.

A prose reading of the leaderboard names each figure it cites as a predictor and a dotted path
(`outlets static.mae`), so that a test can recompute it from the result files and the prose
cannot drift from the tables (`claims.py` reads the names out of the document). A path is first
a metric of the tidy table (`table.py`: `static.mae`, `scheduling.score`, with its `_ci_low` and
`_ci_high` as its interval), else a dotted path into the result file (`report.speculative.tau`,
`generation.n_censored`, `metrics.` understood: `dynamic.mae_by_observed_steps`). A list is read
at a step, `@256`: the entry whose `observed_steps` beside it is 256, or the 256th entry where
the list has no steps beside it. A block with a `value` gives it, with `ci95_low`/`ci95_high` as
its interval. Figures are means over the predictor's seeds, as the leaderboard shows them;
`static.mae.seed_std` is a figure's sample standard deviation over the seeds (the ± beside it).

`paired` is the leaderboard's paired difference of two predictors on the same rows: static or
dynamic MAE (`scoring.comparisons.paired_rows`), CRPS (against the sibling reference), the
scheduling score (on the same simulator draws); for any other figure, the plain difference.
"""

from __future__ import annotations

import copy
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lenbench.leaderboard.table import results_table
from lenbench.results import Result, load_results
from lenbench.results.checks import is_number
from lenbench.scoring.comparisons import gain_split, paired_rows
from lenbench.scoring.metrics import paired_difference

SEED_STD = ".seed_std"  # a path's suffix: the figure's spread over seeds, not its mean
SIBLINGS = "noise_floor"  # the reference result that holds the sibling distribution's CRPS

# `a vs b` of these: the paired MAE difference from the rows that ended, and from the censored
GAIN_PARTS = ("static.mae.ended", "static.mae.capped")


class FigureError(ValueError):
    """A figure the results do not hold, or a name that does not say which one."""


@dataclass(frozen=True)
class Figure:
    """A value with its 95% interval where the results record one."""

    value: float
    ci: tuple[float, float] | None = None
    seeds: tuple[int, ...] | None = None  # a paired difference's seeds on each side


@dataclass(frozen=True)
class World:
    """A leaderboard section: dataset/model, and a prefix of its labels fingerprint where one
    world was scored on several label sets."""

    dataset: str
    model: str
    labels: str = ""

    @classmethod
    def parse(cls, text: str) -> World:
        """"toyworld/toy labels=90d544e5" or "sharegpt_wheel/smollm2-135m-instruct"."""
        name, *rest = text.split()
        if name.count("/") != 1 or any(not r.startswith("labels=") for r in rest):
            raise FigureError(f"world: '{text}' is not 'dataset/model [labels=<prefix>]'")
        dataset, model = name.split("/")
        return cls(dataset, model, rest[0].removeprefix("labels=") if rest else "")

    def __str__(self) -> str:
        return f"{self.dataset}/{self.model}" + (f" labels={self.labels}" if self.labels else "")


def _walk(block: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(block, Mapping) or key not in block:
            return None
        block = block[key]
    return block


def _at_step(block: Mapping[str, Any], path: str, found: Any, step: int) -> Any:
    """Entry `step` of the list `found` at `path`: by the `observed_steps` beside it, if any."""
    parent = _walk(block, path.rpartition(".")[0]) if "." in path else block
    steps = parent.get("observed_steps") if isinstance(parent, Mapping) else None
    if isinstance(steps, list) and len(steps) == len(found):
        return found[steps.index(step)] if step in steps else None
    return found[step] if 0 <= step < len(found) else None


def _figure(found: Any) -> Figure | None:
    if is_number(found):
        return Figure(float(found))
    if isinstance(found, Mapping) and is_number(found.get("value")):
        lo, hi = found.get("ci95_low"), found.get("ci95_high")
        return Figure(float(found["value"]),
                      (float(lo), float(hi)) if is_number(lo) and is_number(hi) else None)
    return None


class Figures:
    """Every figure of one results folder, read by (world, predictor, variant, path, step)."""

    def __init__(self, results_dir: str | Path):
        self.root = Path(results_dir)
        self.results, problems = load_results(self.root)
        if problems:
            raise FigureError(f"results: {problems[0]}")
        self.table = results_table(self.results)
        self._files: dict[str, Any] = {}

    def _rows(self, world: World, predictor: str | None = None) -> Any:
        t = self.table
        keep = (t.dataset == world.dataset) & (t.model == world.model) & \
            t.labels.str.startswith(world.labels)
        if predictor is not None:
            keep &= t.predictor == predictor
        rows = t[keep]
        if rows.empty:
            raise FigureError(f"no results for {predictor or 'any predictor'} in {world}")
        if rows.labels.nunique() > 1:
            sets = ", ".join(sorted(set(rows.labels)))
            raise FigureError(f"{world} holds several label sets ({sets}): name one with "
                              f"labels=<prefix>")
        if predictor is not None and rows.params.nunique() > 1:
            raise FigureError(f"{predictor} in {world} has several parameter sets")
        return rows

    def predictors(self, world: World) -> list[str]:
        """The world's predictors (references aside), for claims about each of them."""
        rows = self._rows(world)
        return sorted(set(rows[rows.kind == "predictor"].predictor))

    def results_of(self, world: World, predictor: str) -> list[Result]:
        """The predictor's results in the world, one per seed, in seed order (the leaderboard's,
        which a paired bootstrap's draws follow)."""
        sources = set(self._rows(world, predictor).result)
        return sorted((r for r in self.results if r.source in sources), key=lambda r: r.seed)

    def _json(self, source: str) -> Any:
        if source not in self._files:
            self._files[source] = json.loads((self.root / source).read_text())
        return self._files[source]

    def get(self, world: World, predictor: str, path: str, step: int | None = None,
            variant: str = "") -> Figure:
        """One figure, as the module doc reads it; FigureError when the results lack it."""
        if path.endswith(SEED_STD):
            return self._seed_std(world, predictor, path.removesuffix(SEED_STD), step, variant)
        rows = self._rows(world, predictor)
        rows = rows[rows.variant == variant]
        if step is None and path in set(rows.metric):
            def mean(metric: str) -> float | None:
                vals = rows[rows.metric == metric].value
                return float(vals.mean()) if len(vals) else None
            lo, hi = mean(f"{path}_ci_low"), mean(f"{path}_ci_high")
            return Figure(mean(path), (lo, hi) if lo is not None and hi is not None else None)
        values = []
        for source in sorted(set(rows.result)):
            block = self._json(source)
            if variant:
                block = _walk(block, f"metrics.variants.{variant}") or {}
            for where in (path, f"metrics.{path}"):
                found = _walk(block, where)
                if found is not None:
                    break
            if isinstance(found, list) and step is not None:
                found = _at_step(block, where, found, step)
            elif step is not None:
                found = None
            if (figure := _figure(found)) is not None:
                values.append(figure)
        if not values:
            at = "" if step is None else f" at {step}"
            raise FigureError(f"no figure {path}{at} for {predictor} in {world}")
        cis = [f.ci for f in values if f.ci is not None]
        return Figure(statistics.fmean(f.value for f in values),
                      (statistics.fmean(c[0] for c in cis), statistics.fmean(c[1] for c in cis))
                      if len(cis) == len(values) else None)

    def _seed_std(self, world: World, predictor: str, path: str, step: int | None,
                  variant: str) -> Figure:
        """The sample standard deviation over seeds of a figure: each seed's result read alone."""
        values = []
        for result in self.results_of(world, predictor):
            alone = copy.copy(self)  # this folder's figures, as if it held this seed alone
            alone.results = [result]
            alone.table = self.table[self.table.result == result.source]
            values.append(alone.get(world, predictor, path, step, variant).value)
        if len(values) < 2:
            raise FigureError(f"{predictor} in {world} has {len(values)} seed(s): no spread")
        return Figure(statistics.stdev(values))

    def steps(self, world: World, predictor: str, path: str) -> list[int]:
        """The steps a list figure is read at (its `observed_steps`, else its indices)."""
        for r in self.results_of(world, predictor):
            block = self._json(r.source)
            for where in (path, f"metrics.{path}"):
                found = _walk(block, where)
                if isinstance(found, list):
                    parent = _walk(block, where.rpartition(".")[0]) if "." in where else block
                    steps = parent.get("observed_steps") if isinstance(parent, Mapping) else None
                    return [int(s) for s in steps] if isinstance(steps, list) and \
                        len(steps) == len(found) else list(range(len(found)))
        raise FigureError(f"{path} of {predictor} in {world} is not a list of steps")

    def scored_rows(self, world: World, name: str) -> list[Any]:
        """The scored rows of `name` (`predictor` or `predictor/variant`: that decoding's
        stored rows), one per seed in seed order."""
        predictor, _, variant = name.partition("/")
        runs = [r.predictions for r in self.results_of(world, predictor)]
        return [p.decoded(variant) if variant and p is not None else p for p in runs]

    def paired(self, world: World, a: str, b: str, path: str, step: int | None = None
               ) -> Figure:
        """a's figure minus b's, paired as the module doc says; FigureError where the two
        cannot be paired. A side may name a decoding variant (`predictor/variant`) for the
        static MAE and its parts."""
        if "/" in a + b and not (step is None and path in ("static.mae", *GAIN_PARTS)):
            raise FigureError(f"{a} vs {b}: a variant pairs on the static MAE and its parts only")
        if step is None and path in ("static.mae", "dynamic.mae"):
            return self._paired_rows(world, a, b, path.split(".")[0])
        if step is None and path == "distribution.static.crps":
            return self._paired_crps(world, a, b)
        if step is None and path == "scheduling.score":
            return self._paired_schedule(world, a, b)
        if step is None and path in GAIN_PARTS:
            return self._paired_part(world, a, b, GAIN_PARTS.index(path))
        return Figure(self.get(world, a, path, step).value - self.get(world, b, path, step).value)

    def _paired_rows(self, world: World, a: str, b: str, kind: str) -> Figure:
        found = paired_rows(self.scored_rows(world, a), self.scored_rows(world, b), kind)
        if found is None:
            raise FigureError(f"{a} and {b} in {world} cannot be paired on {kind} errors")
        return _paired_figure(found)

    def _paired_part(self, world: World, a: str, b: str, part: int) -> Figure:
        """a's MAE minus b's from the rows that ended (part 0) or the censored ones (1), in
        tokens per test row, as the main table's gain column splits it (with the sign flipped:
        there b's MAE minus a's)."""
        split = gain_split(self.scored_rows(world, a), self.scored_rows(world, b))
        if split is None:
            raise FigureError(f"{a} and {b} in {world} cannot be paired on censored rows")
        return Figure(-split[part])

    def _paired_crps(self, world: World, a: str, b: str) -> Figure:
        def rows(name: str) -> tuple[np.ndarray, np.ndarray]:
            runs = [r.predictions for r in self.results_of(world, name)]
            if any(p is None or p.crps is None or p.prompt_id is None for p in runs):
                raise FigureError(f"{name} in {world} stores no CRPS per row")
            crps = np.array([[np.nan if v is None else v for v in p.crps] for p in runs],
                            dtype=np.float64)  # seeds x rows
            return crps, np.asarray(runs[0].prompt_id)
        (mine, ids), (ref, ref_ids) = rows(a), rows(b)
        if b != SIBLINGS or not np.array_equal(ids, ref_ids):
            raise FigureError(f"CRPS pairs against {SIBLINGS} on the same rows, not {b}")
        _, inverse, counts = np.unique(ids, return_inverse=True, return_counts=True)
        keep = (counts[inverse.reshape(-1)] >= 2) & np.isfinite(mine).all(axis=0) \
            & np.isfinite(ref).all(axis=0)
        return _paired_figure(paired_difference(mine[:, keep], ref[:, keep], ids[keep]))

    def _paired_schedule(self, world: World, a: str, b: str) -> Figure:
        from lenbench.leaderboard.scheduling import paired_runs
        from lenbench.leaderboard.scheduling_scores import paired_delta

        runs = {name: paired_runs(self.results_of(world, name)) for name in (a, b)}
        for name, found in runs.items():
            if not found:
                raise FigureError(f"{name} in {world} stores no per-seed scheduling figures")
        metric = next((r.scheduling or {}).get("score_metric")
                      for r in self.results_of(world, a))
        d = paired_delta(runs[a], runs[b], str(metric))
        if d is None:
            raise FigureError(f"{a} and {b} in {world} were not simulated on the same draws")
        if not is_number(d.get("value")):
            raise FigureError(f"no paired scheduling score in {world}: {d.get('reason')}")
        lo, hi = d.get("ci95_low"), d.get("ci95_high")
        return Figure(float(d["value"]),
                      (float(lo), float(hi)) if is_number(lo) and is_number(hi) else None)

def _paired_figure(d: Mapping[str, Any]) -> Figure:
    ci: Sequence[float] | None = d.get("ci")
    seeds = d.get("seeds")
    return Figure(float(d["mean"]), (float(ci[0]), float(ci[1])) if ci is not None else None,
                  None if seeds is None else tuple(int(n) for n in seeds))
