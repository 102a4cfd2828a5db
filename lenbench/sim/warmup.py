"""The reference curves simulated ahead of the predictors, on a core the run leaves idle.

Every predictor of a run is scored against the same reference rows (FCFS, the oracle, the
constant row, the noisy oracles and prompt-length order at every load of the sweep); they depend
on the test rows' lengths and the sim config alone, so they can be simulated as soon as the
labels exist, while the target computes the features. `start` forks one process that scores
the oracle as if it were a predictor (its own curve is the oracle's, so it adds no simulation)
and `Warmup.finish` keeps what it simulated in this process's memo (`lenbench.sim.memo`), where
every predictor's scoring finds it. The figures are the same with or without it: each
simulation is deterministic and keyed by what it reads.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context

import numpy as np
from numpy.typing import NDArray

from lenbench.sim import memo
from lenbench.sim.config import SimConfig

log = logging.getLogger(__name__)


def simulate_references(true: NDArray, prompt_len: NDArray, censored: NDArray,
                        cfg: SimConfig) -> None:
    """Run every simulation a predictor's scheduling block shares with the others (kept in the
    memo): the oracle scored as a predictor."""
    from lenbench.sim.record import scheduling_record

    scheduling_record(true, np.asarray(true, dtype=np.float64), prompt_len, "oracle", cfg,
                      censored=censored)


def _in_child(true, prompt_len, censored, cfg):
    os.environ["LENBENCH_SIM_WORKERS"] = "1"  # one core: the run's other work has the rest
    memo.clear()
    simulate_references(true, prompt_len, censored, cfg)
    return memo.kept()


class Warmup:
    """The reference simulations running in a forked process; `finish` collects them."""

    def __init__(self, pool: ProcessPoolExecutor, future: Future):
        self._pool, self._future = pool, future

    def finish(self) -> int:
        """Wait for the simulations and keep them here; returns how many. A failure costs only
        the head start: the predictors simulate what is missing themselves."""
        try:
            entries = self._future.result()
        except Exception as exc:  # noqa: BLE001 - the predictors' own scoring redoes the work
            log.warning("reference simulations ahead of the predictors failed (%s: %s); each "
                        "predictor simulates them itself", type(exc).__name__, exc)
            return 0
        finally:
            self._pool.shutdown()
        memo.absorb(entries)
        return len(entries)


def start(true: NDArray, prompt_len: NDArray, censored: NDArray, cfg: SimConfig
          ) -> Warmup | None:
    """Start the reference simulations in a forked process; None where processes cannot be
    forked (the predictors then simulate them in turn, as without a head start)."""
    if "fork" not in get_all_start_methods():
        return None
    pool = ProcessPoolExecutor(1, mp_context=get_context("fork"))
    return Warmup(pool, pool.submit(_in_child, np.asarray(true), np.asarray(prompt_len),
                                    np.asarray(censored), cfg))
