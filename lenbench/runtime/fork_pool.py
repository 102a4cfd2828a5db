"""Independent jobs run a few at a time in forked copies of this process, results in order.

A run's predictors are evaluated on one world and do not depend on each other (each seeds itself
before its fit), while most of their work (a small head's training steps, the simulator's event
loop) keeps one core busy at a time. The workers are forks of the process as it stands when
the pool starts (the world, the simulations already kept); a worker that has run a job runs the
next one as the process itself would have run it in turn, after the earlier ones. Each job
sends back its return value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_all_start_methods, get_context
from typing import Any

_jobs: Sequence[Callable[[], Any]] = ()  # what the forked workers run (inherited, not pickled)
_running: Any = None  # how many of the pool's jobs run now, shared by its forks (a Value)


class JobDied(RuntimeError):
    """The process running a job ended without a result (killed, out of memory, a crash)."""


def can_fork() -> bool:
    return "fork" in get_all_start_methods()


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def idle_cores() -> int:
    """This process's fair share of the cores: in a job of `run_forked`, the usable cores split
    evenly over the jobs running now (at least one); elsewhere, all of them. A job still running
    after its siblings have finished may then spread its own work over the cores they left,
    while jobs running side by side, each taking its share, never ask for more than there are."""
    if _running is None:
        return usable_cores()
    with _running.get_lock():
        running = max(_running.value, 1)
    return max(1, usable_cores() // running)


def _run(i: int) -> Any:
    with _running.get_lock():
        _running.value += 1
    try:
        return _jobs[i]()
    finally:
        with _running.get_lock():
            _running.value -= 1


def run_forked(jobs: Sequence[Callable[[], Any]], processes: int,
               setup: Callable[[], None] | None = None,
               start_order: Sequence[int] | None = None) -> Iterator[Any]:
    """Each job's return value, in the order of `jobs`, run `processes` at a time in forks of
    this process (`setup` runs first in every fork), started in `start_order` (the longest
    first keeps the processes busy to the end). A job whose process dies yields a `JobDied`
    instead of a value, and so does every job not finished by then (the pool cannot tell which
    of its processes died); the jobs finished before keep their values."""
    global _jobs, _running
    _jobs = jobs
    context = get_context("fork")
    _running = context.Value("i", 0)
    try:
        with ProcessPoolExecutor(processes, mp_context=context, initializer=setup) as pool:
            futures = {i: pool.submit(_run, i) for i in (start_order or range(len(jobs)))}
            for _, future in sorted(futures.items()):
                try:
                    yield future.result()
                except BrokenProcessPool as exc:
                    yield JobDied(f"the process running it ended without a result ({exc})")
    finally:
        _jobs, _running = (), None
