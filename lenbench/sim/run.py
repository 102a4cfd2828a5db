"""`simulate`: one simulation run, with the event loop the queue policy needs.

The non-preemptive loop is engine.py; queue srpt runs its preemptive extension (preemption.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from lenbench.sim.config import DISPATCH_POLICIES, QUEUE_POLICIES, SimConfig
from lenbench.sim.engine import _Engine
from lenbench.sim.preemption import PreemptiveEngine
from lenbench.sim.result import SimResult
from lenbench.sim.timing import TimeModel, get_time_model
from lenbench.sim.workload import Workload


def simulate(workload: Workload, cfg: SimConfig, *, time_model: TimeModel | None = None,
             dispatch: str | None = None, queue: str | None = None, seed: int = 0,
             record_timeline: bool = False, dispatch_len: ArrayLike | None = None,
             remaining: Any = None, token_scale: float | None = None) -> SimResult:
    """Run one simulation of `workload` on the cluster of `cfg`.

    `dispatch`/`queue` override cfg.dispatch/cfg.queue (handy for policy sweeps); `time_model`
    overrides cfg.time_model; `seed` drives only the random choices of pow2 dispatch. With
    `record_timeline` the result carries rows (time, instance, running, waiting) at every
    processed boundary, for plots of load over time. `dispatch_len` (aligned with the workload)
    is what lb/pow2 dispatch balance on instead of `workload.pred_len`: one value for everyone
    makes dispatch prediction-free, so that runs differing only in `pred_len` differ only in
    queue order (what `simulate_predictions` does unless cfg.dispatch_uses_predictions).

    Queue keys: fcfs admits by arrival; sjf by `workload.pred_len` as given (minus aging_alpha
    times the request's age since arrival under aging, in pred_len's units per second), ties
    by arrival; the scored runs pass rank quantiles (keys.py), so that aging_alpha is in
    quantiles per second. A constant prediction therefore admits in exactly FCFS order, with
    or without a starvation guard. srpt re-ranks by predicted remaining tokens and preempts
    (preemption.py); `remaining` (a `RequestRemaining`) supplies its dynamic estimates, else it
    uses pred_len - generated; its aging credit is aging_alpha * `token_scale` tokens per
    second (default: keys.tokens_per_quantile of the workload's true lengths).
    """
    dispatch = cfg.dispatch if dispatch is None else dispatch
    queue = cfg.queue if queue is None else queue
    if dispatch not in DISPATCH_POLICIES:
        raise ValueError(f"dispatch must be one of {DISPATCH_POLICIES}, got {dispatch!r}")
    if queue not in QUEUE_POLICIES:
        raise ValueError(f"queue must be one of {QUEUE_POLICIES}, got {queue!r}")
    model = time_model if time_model is not None else get_time_model(cfg.time_model,
                                                                      cfg.linear_abc)
    balance = None
    if dispatch_len is not None:
        balance = np.asarray(dispatch_len, dtype=np.float64)
        if balance.shape != workload.pred_len.shape or not np.all(np.isfinite(balance)):
            raise ValueError(f"dispatch_len must be finite with shape {workload.pred_len.shape}")
    if queue == "srpt":
        return PreemptiveEngine(workload, cfg, model, dispatch, queue, seed, record_timeline,
                                balance, remaining, token_scale).run()
    if remaining is not None:
        raise ValueError("remaining-length estimates need queue='srpt'")
    return _Engine(workload, cfg, model, dispatch, queue, seed, record_timeline, balance).run()
