"""Where a run's wall time went, stage by stage, so that the cost of reproducing a leaderboard
can be read off one run instead of pieced together from result files.

A run opens one `StageClock` (`recording()`); code anywhere below times its work with
`timed(name)`. Stages nest: "world / features" is the features stage of the run's world, and
"mlp_probe / fit" the probe's fit. `timed` outside a recording records nothing, so library
callers (tests, notebooks) pay nothing; either way it yields the stage's seconds.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TIMES_FILE = "stage_times.json"


@dataclass
class Lap:
    """One timed stage's seconds, set when it ends (for callers that record them too)."""

    seconds: float = 0.0


@dataclass
class StageClock:
    """The stages timed so far as (order started, path, depth, seconds)."""

    started: float = field(default_factory=time.perf_counter)
    stages: list[tuple[int, str, int, float]] = field(default_factory=list)
    at_once: int = 1  # stages timed in that many processes at a time (their times overlap)
    _open: list[str] = field(default_factory=list)
    _opened: int = 0

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[Lap]:
        self._open.append(name)
        path, depth, order = " / ".join(self._open), len(self._open) - 1, self._opened
        self._opened += 1
        lap, t0 = Lap(), time.perf_counter()
        try:
            yield lap
        finally:
            lap.seconds = time.perf_counter() - t0
            self._open.pop()
            self.stages.append((order, path, depth, lap.seconds))

    def laps_since(self, opened: int) -> list[tuple[int, str, int, float]]:
        """The stages started since `opened` stages had been (`_opened` then), numbered from
        0: what a forked process sends back of the work it did (`adopt`)."""
        return [(order - opened, path, depth, seconds)
                for order, path, depth, seconds in self.stages if order >= opened]

    def adopt(self, laps: list[tuple[int, str, int, float]]) -> None:
        """Record stages timed in another process (`laps_since`) as started now, in their
        order."""
        for order, path, depth, seconds in laps:
            self.stages.append((self._opened + order, path, depth, seconds))
        self._opened += 1 + max((lap[0] for lap in laps), default=-1)

    def total(self) -> float:
        return time.perf_counter() - self.started

    def rows(self) -> list[dict]:
        """Finished stages in the order they started (a parent before its children), each with
        its seconds and share of the run's wall time so far."""
        total = max(self.total(), 1e-9)
        return [{"stage": path, "depth": depth, "seconds": round(seconds, 3),
                 "share": round(seconds / total, 4)}
                for _, path, depth, seconds in sorted(self.stages)]

    def table(self) -> str:
        """One line a stage, indented under its parent: time, share of the run, name."""
        return "\n".join(f"  {readable(r['seconds']):>9}  {100 * r['share']:5.1f}%  "
                         f"{'  ' * r['depth']}{r['stage'].rsplit(' / ', 1)[-1]}"
                         for r in self.rows())

    def record(self) -> dict:
        return {"total_seconds": round(self.total(), 3), "at_once": self.at_once,
                "stages": self.rows()}

    def heading(self) -> str:
        """The table's title: the run's wall time, and whether its stages overlap."""
        overlap = (f"; predictors {self.at_once} at a time, so their times overlap"
                   if self.at_once > 1 else "")
        return f"where the time went ({self.total():.0f} s in all{overlap})"

    def write(self, folder: Path, **context) -> Path:
        """Keep the record in `folder`, with `context` (the run's overrides, its machine)."""
        path = Path(folder) / TIMES_FILE
        path.write_text(json.dumps({**self.record(), **context}, indent=1) + "\n")
        return path


def readable(seconds: float) -> str:
    """4.3s, 4m05s, 1h02m: a stage's time as a person reads it."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, sec = divmod(round(seconds), 60)
    return f"{minutes}m{sec:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


_clock: StageClock | None = None


def current_clock() -> StageClock | None:
    """The recording open in this process, if any."""
    return _clock


@contextlib.contextmanager
def recording() -> Iterator[StageClock]:
    """Time the stages of one run (the harness opens one per process run)."""
    global _clock
    outer, _clock = _clock, StageClock()
    try:
        yield _clock
    finally:
        _clock = outer


@contextlib.contextmanager
def timed(name: str) -> Iterator[Lap]:
    """Time `name`, as a stage of the current recording if there is one; the Lap it yields
    holds the seconds when the stage ends either way."""
    with (_clock or StageClock()).timed(name) as lap:  # no recording: a clock thrown away
        yield lap
