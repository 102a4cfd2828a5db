"""The state of one decode instance, kept apart from the event loop that drives it.

The engine reads and writes these fields directly (no accessors) because the event loop is the
simulator's hot path; the only logic here is the dense running-key array that lb/pow2 dispatch
sums over.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numpy.typing import NDArray


class Decode:
    """State of one decode instance as of its last processed iteration boundary."""

    __slots__ = (
        "ctx",
        "dirty",
        "event_k",
        "fin",
        "idx",
        "k_b",
        "n_boundaries",
        "n_run",
        "n_wait",
        "peak_ctx",
        "peak_run",
        "pos",
        "promo",
        "run_key",
        "run_req",
        "seg",
        "t_b",
        "version",
        "wait",
        "wait_pred",
    )

    def __init__(self, idx: int, capacity: int) -> None:
        self.idx = idx
        self.t_b = 0.0              # time of the last processed boundary
        self.k_b = 0                # iterations completed by then
        self.n_run = 0              # running sequences
        self.ctx = 0                # KV tokens held by running sequences at t_b
        self.fin: list[tuple[int, int]] = []      # (iteration at which done, request)
        self.wait: list[tuple[float, float, int]] = []  # (policy key, arrival, request)
        self.promo: deque[int] = deque()          # waiting requests in KV-arrival order
        self.n_wait = 0
        self.wait_pred = 0.0        # sum of dispatch lengths of waiting requests (for lb)
        self.seg: NDArray[np.float64] | None = None  # boundary times k_b+1 .. next finish
        self.event_k = -1           # iteration of the pending boundary event, -1 if none
        self.version = 0            # bumps invalidate stale boundary events
        self.run_key = np.empty(capacity, dtype=np.float64)  # load - generated + admit iteration
        self.run_req: list[int] = []
        self.pos: dict[int, int] = {}
        self.peak_ctx = 0
        self.peak_run = 0
        self.n_boundaries = 0
        self.dirty = False          # preemptive queues: a request joined since the last re-rank

    def add_key(self, r: int, key: float) -> None:
        i = len(self.run_req)
        if i == len(self.run_key):
            self.run_key = np.concatenate([self.run_key, np.empty_like(self.run_key)])
        self.run_key[i] = key
        self.run_req.append(r)
        self.pos[r] = i

    def remove_key(self, r: int) -> None:
        """Swap-remove so that the running keys stay a dense prefix of run_key."""
        i = self.pos.pop(r)
        last = len(self.run_req) - 1
        moved = self.run_req.pop()
        if i != last:
            self.run_key[i] = self.run_key[last]
            self.run_req[i] = moved
            self.pos[moved] = i
