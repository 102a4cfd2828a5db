"""One draw served by one row, simulated once per process however many predictors ask for it.

Every predictor of a run is scored on the same draws against the same reference rows: the FCFS
baseline, the oracle, the constant row, and in the load sweep the noisy oracles and the
prompt-length order at every load. Their simulations depend on the world's rows and the sim
config, not on the predictor, so `serve_all` keeps each one's figures under a digest of
everything the simulation reads (the draw's arrays, the config's engine and policy settings,
the time model, the queue and the seed): a reference curve is simulated once per run and world
and shared by every predictor scored in the process (a sweep, a rescoring pass over many
files). A predictor's own rows are kept too, so the headline, the guard and the sweep reuse
each other's runs where they coincide. Simulations not kept yet run in forked worker processes
when there are several cores and enough of them (`serve_all`); each is deterministic, so the
figures do not depend on how many processes ran them.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_all_start_methods, get_context
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from lenbench.runtime.fork_pool import idle_cores
from lenbench.sim.config import SimConfig
from lenbench.sim.metrics import run_figures
from lenbench.sim.run import simulate
from lenbench.sim.timing import TimeModel
from lenbench.sim.workload import Workload, draw_rows

# Settings that shape what is drawn or how it is reported, not how a given draw is served: the
# draw's arrays stand for them in the key.
_NOT_SERVING = frozenset({"seeds", "n_requests", "qps", "load_factor", "arrival_cv",
                          "short_threshold", "long_threshold", "score_metric", "score_alphas",
                          "sweep_loads", "sweep_seeds", "sweep_noisy_c", "headline_min_gain"})
MAX_ENTRIES = 8192  # about 16 kB each (the end-to-end latencies of 2,000 requests)

_memo: OrderedDict[bytes, tuple[dict[str, float | None], NDArray[np.float64]]] = OrderedDict()


def digest(arrays: tuple[NDArray[Any], ...], settings: tuple[Any, ...]) -> bytes:
    """A key for what a computation reads: the arrays' bytes, dtypes and shapes, and the repr
    of its other settings."""
    h = hashlib.blake2b(digest_size=20)
    for arr in arrays:
        a = np.ascontiguousarray(arr)
        h.update(str((a.dtype.str, a.shape)).encode())
        h.update(a.tobytes())
    h.update(repr(settings).encode())
    return h.digest()


def serving_settings(cfg: SimConfig) -> tuple[tuple[str, Any], ...]:
    """The config's settings that decide how a given draw is served."""
    return tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                        for k, v in cfg.to_dict().items() if k not in _NOT_SERVING))


class Draw(NamedTuple):
    """One simulation: simulator seed `seed`'s draw of the rows at
    `qps`, served in `queue` order by `keys` (one per row; lb/pow2 balance on `balance`), its
    figures read at the (short, long) `thresholds`."""

    true: NDArray[np.int64]
    prompt: NDArray[np.int64]
    censored: NDArray[np.bool_]
    keys: NDArray[np.float64]
    balance: NDArray[np.float64]
    cfg: SimConfig
    model: TimeModel
    queue: str
    qps: float
    seed: int
    thresholds: tuple[float, float]

    def rows(self) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
        """The drawn row of each request and its arrival time."""
        return draw_rows(len(self.true), self.cfg.n_requests, self.qps, self.seed,
                         self.cfg.arrival_cv)

    def digest(self) -> bytes:
        cfg = self.cfg
        settings = (serving_settings(cfg), repr(self.model), self.queue, int(self.seed),
                    float(self.qps), cfg.n_requests, cfg.arrival_cv,
                    tuple(float(t) for t in self.thresholds))
        return digest((self.true, self.prompt, self.censored, self.keys, self.balance),
                       settings)


def _simulate(draw: Draw) -> tuple[dict[str, float | None], NDArray[np.float64]]:
    idx, arrivals = draw.rows()
    wl = Workload(arrivals, draw.prompt[idx], draw.true[idx], draw.keys[idx],
                  draw.censored[idx])
    res = simulate(wl, draw.cfg, time_model=draw.model, dispatch=draw.cfg.dispatch,
                   queue=draw.queue, seed=draw.seed, dispatch_len=draw.balance[idx])
    return run_figures(res, *draw.thresholds), res.done_s - wl.arrival_s


def _keep(key: bytes, value: tuple[dict[str, float | None], NDArray[np.float64]]) -> None:
    value[1].setflags(write=False)
    _memo[key] = value
    if len(_memo) > MAX_ENTRIES:
        _memo.popitem(last=False)


def serve_all(draws: Sequence[Draw]
              ) -> list[tuple[dict[str, float | None], NDArray[np.float64]]]:
    """Each draw's `run_figures` and the end-to-end latency of each of its requests (in the
    order of `Draw.rows`), in order, each simulated once per process. The draws not kept yet
    are simulated in worker processes when there are enough of them and several cores
    (`workers`); each simulation is deterministic, so the results are the same however many
    processes ran them."""
    keys = [d.digest() for d in draws]
    todo = list({k: d for k, d in zip(keys, draws) if k not in _memo}.items())
    n_workers = min(workers(), len(todo) // MIN_PER_WORKER)
    if n_workers >= 2:
        global _pending
        _pending = [d for _, d in todo]
        try:
            with ProcessPoolExecutor(n_workers, mp_context=get_context("fork")) as pool:
                for (key, _), value in zip(todo, pool.map(_simulate_pending, range(len(todo)),
                                                          chunksize=2)):
                    _keep(key, value)
        finally:
            _pending = []
    out = []
    for key, draw in zip(keys, draws):
        hit = _memo.get(key)
        if hit is None:
            hit = _simulate(draw)
            _keep(key, hit)
        else:
            _memo.move_to_end(key)
        out.append(hit)
    return out


_pending: list[Draw] = []  # the draws a pool of forked workers reads (not pickled to them)
MIN_PER_WORKER = 4  # fewer simulations than this per process do not pay for the process


def _simulate_pending(i: int) -> tuple[dict[str, float | None], NDArray[np.float64]]:
    return _simulate(_pending[i])


def workers() -> int:
    """Processes for simulations: LENBENCH_SIM_WORKERS, else the cores this process may use
    and no sibling job holds now (at most 4); 1 simulates in this process. Where processes
    cannot be forked, 1."""
    if "fork" not in get_all_start_methods():
        return 1
    configured = os.environ.get("LENBENCH_SIM_WORKERS")
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            raise ValueError(f"LENBENCH_SIM_WORKERS={configured!r}: give a whole number of "
                             "processes (1 = none)") from None
    return min(idle_cores(), 4)


def kept() -> list[tuple[bytes, tuple[dict[str, float | None], NDArray[np.float64]]]]:
    """Every simulation kept in this process, oldest first: what a forked process that ran
    simulations ahead of time sends back to the one that forked it (`absorb`)."""
    return list(_memo.items())


def absorb(entries: Sequence[tuple[bytes, tuple[dict[str, float | None], NDArray[np.float64]]]]
           ) -> None:
    """Keep simulations run by another process (`kept`) as if they had run here."""
    for key, value in entries:
        if key not in _memo:
            _keep(key, value)


def clear() -> None:
    """Forget every kept simulation (tests that count simulations start from here)."""
    _memo.clear()
