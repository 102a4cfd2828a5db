"""A job of a fork pool gets its fair share of the cores: split over the jobs running now, so the
simulations of the last predictor still running spread over the cores the others have left."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from lenbench.runtime import fork_pool
from lenbench.sim import memo


def _wait_for(condition, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("the sibling job never got there")
        time.sleep(0.01)


@pytest.mark.skipif(not fork_pool.can_fork(), reason="needs fork")
def test_a_job_gets_the_cores_split_over_the_jobs_running_now(monkeypatch):
    monkeypatch.setattr(fork_pool, "usable_cores", lambda: 4)
    monkeypatch.delenv("LENBENCH_SIM_WORKERS", raising=False)
    first_done = multiprocessing.get_context("fork").Event()

    def first() -> tuple[int, int]:
        _wait_for(lambda: fork_pool._running.value == 2)  # both jobs run
        seen = (fork_pool.idle_cores(), memo.workers())
        first_done.set()
        return seen

    def second() -> tuple[int, int]:
        first_done.wait(20)
        _wait_for(lambda: fork_pool._running.value == 1)  # the first has ended
        return fork_pool.idle_cores(), memo.workers()

    assert list(fork_pool.run_forked([first, second], 2)) == [(2, 2), (4, 4)]


def test_outside_a_pool_every_core_is_idle(monkeypatch):
    monkeypatch.setattr(fork_pool, "usable_cores", lambda: 3)
    assert fork_pool._running is None
    assert fork_pool.idle_cores() == 3


def test_the_environment_still_fixes_the_simulation_workers(monkeypatch):
    monkeypatch.setenv("LENBENCH_SIM_WORKERS", "1")
    assert memo.workers() == 1
