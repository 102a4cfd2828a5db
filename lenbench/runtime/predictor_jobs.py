"""A run's predictors evaluated in turn, or several at a time on a machine with cores to spare.

Most of a small predictor's evaluation (its head's training steps, the simulator's event loop)
keeps one core busy, so on a CPU run the predictors are evaluated `jobs` at a time, each in a
fork of the run made once the world is ready (`lenbench.runtime.fork_pool`). Each predictor seeds
itself before its fit and reads nothing another one writes, so its result is the one it gets in
turn. Where the predictors share heavy state in one process (a predictor that runs the target
model itself, a GPU), or a failure must be raised at once (`eval.raise_on_error`), they run in
turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from lenbench.runtime.fork_pool import JobDied, can_fork, run_forked, usable_cores
from lenbench.runtime.stage_times import current_clock

log = logging.getLogger(__name__)

Outcome = tuple[dict | None, BaseException | None]  # a result and the failure that made it


class FailedElsewhere(RuntimeError):
    """A predictor failed in the process that evaluated it (its traceback is in its result)."""


def predictor_jobs(jobs: int, threads: int, device: str, raise_on_error: bool,
                   built: Sequence[tuple[str, dict, Any]]) -> int:
    """How many predictors to evaluate at once: `jobs` (0: one per core, on a CPU run whose
    predictors do not run the target model themselves), never more than there are predictors;
    1 where processes cannot be forked, a failure must stop the run, torch runs more than one
    thread (`threads`) or the device is not the CPU."""
    if jobs < 0:
        raise ValueError(f"jobs={jobs}: give the number of predictors to evaluate at once "
                         "(0 picks it from the cores, 1 evaluates them in turn)")
    if len(built) < 2 or raise_on_error or not can_fork():
        return 1
    # torch's OpenMP threads and a GPU context do not survive a fork: the forks would hang
    why_not = ("threads=1" if threads != 1 else "a CPU run" if device != "cpu" else None)
    if why_not is not None:
        if jobs > 1:
            log.warning("jobs=%d needs %s (torch's thread pool and a GPU's context do not "
                        "survive the fork that runs a predictor); evaluating the predictors in "
                        "turn", jobs, why_not)
        return 1
    if jobs == 0:
        if any(p.needs.target_model for _, _, p in built):  # one model shared in this process
            return 1
        jobs = usable_cores()
    return max(1, min(jobs, len(built)))


def _in_fork() -> None:
    """A forked evaluation simulates on the cores its siblings leave free
    (`fork_pool.idle_cores`) and draws no live progress bars over its siblings'."""
    import rich

    rich.reconfigure(stderr=True, force_terminal=False, force_interactive=False)


def evaluated(built: Sequence[tuple[str, dict, Any]],
              evaluate_one: Callable[[str, dict, Any], Outcome], jobs: int) -> Iterator[Outcome]:
    """Each predictor's (result, failure), in order: in turn when `jobs` is 1, else `jobs` at a
    time in forks. A fork's stage times join the run's clock; a fork that dies yields
    (None, JobDied)."""
    if jobs <= 1:
        for name, pcfg, predictor in built:
            yield evaluate_one(name, pcfg, predictor)
        return
    clock = current_clock()
    if clock is not None:
        clock.at_once = jobs

    def job(name: str, pcfg: dict, predictor: Any) -> Callable[[], tuple]:
        def run() -> tuple:
            opened = clock._opened if clock is not None else 0
            result, exc = evaluate_one(name, pcfg, predictor)
            laps = clock.laps_since(opened) if clock is not None else []
            return result, exc is not None, laps  # the exception stays here: it may not pickle
        return run

    # the likely longest first: heads trained on every response step, then on hidden states
    longest_first = sorted(range(len(built)), key=lambda i: (not built[i][2].needs.steps,
                                                             not built[i][2].needs.hidden, i))
    for out in run_forked([job(*b) for b in built], jobs, setup=_in_fork,
                          start_order=longest_first):
        if isinstance(out, JobDied):
            yield None, out
            continue
        result, failed, laps = out
        if clock is not None:
            clock.adopt(laps)
        yield result, (FailedElsewhere("see the result's error") if failed else None)
