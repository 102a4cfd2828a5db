"""One draw served by one row, simulated once per process however many predictors ask for it.

Every predictor of a run is scored on the same draws against the same reference rows: the FCFS
baseline, the oracle, the constant row, and in the load sweep the noisy oracles and the
prompt-length order at every load. Their simulations depend on the world's rows and the sim
config, not on the predictor, so `serve_draw` keeps each one's figures under a digest of
everything the simulation reads (the draw's arrays, the config's engine and policy settings,
the time model, the queue and the seed): a reference curve is simulated once per run and world
and shared by every predictor scored in the process (a sweep, a rescoring pass over many
files). A predictor's own rows are kept too, so the headline, the guard and the sweep reuse
each other's runs where they coincide.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import Any

import numpy as np
from numpy.typing import NDArray

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


def _digest(arrays: tuple[NDArray[Any], ...], settings: tuple[Any, ...]) -> bytes:
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


def serve_draw(true: NDArray[np.int64], prompt: NDArray[np.int64], censored: NDArray[np.bool_],
               keys: NDArray[np.float64], balance: NDArray[np.float64], cfg: SimConfig,
               model: TimeModel, queue: str, qps: float, seed: int,
               thresholds: tuple[float, float]
               ) -> tuple[dict[str, float | None], NDArray[np.float64], NDArray[np.int64]]:
    """Simulator seed `seed`'s draw of the rows at `qps`, served in `queue` order by `keys`
    (one per row; lb/pow2 balance on `balance`): its `run_figures` at the (short, long)
    `thresholds`, the end-to-end latency of each request, and the drawn row of each request."""
    idx, arrivals = draw_rows(len(true), cfg.n_requests, qps, seed, cfg.arrival_cv)
    settings = (serving_settings(cfg), repr(model), queue, int(seed), float(qps),
                cfg.n_requests, cfg.arrival_cv, tuple(float(t) for t in thresholds))
    key = _digest((true, prompt, censored, keys, balance), settings)
    hit = _memo.get(key)
    if hit is not None:
        _memo.move_to_end(key)
        return hit[0], hit[1], idx
    wl = Workload(arrivals, prompt[idx], true[idx], keys[idx], censored[idx])
    res = simulate(wl, cfg, time_model=model, dispatch=cfg.dispatch, queue=queue, seed=seed,
                   dispatch_len=balance[idx])
    figures = run_figures(res, *thresholds)
    e2e = res.done_s - wl.arrival_s
    e2e.setflags(write=False)
    _memo[key] = (figures, e2e)
    if len(_memo) > MAX_ENTRIES:
        _memo.popitem(last=False)
    return figures, e2e, idx


def clear() -> None:
    """Forget every kept simulation (tests that count simulations start from here)."""
    _memo.clear()
