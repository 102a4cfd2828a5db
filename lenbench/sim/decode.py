"""The state of one decode instance, kept apart from the event loop that drives it.

The engine reads and writes these fields directly (no accessors) because the event loop is the
simulator's hot path; the only logic here is the dense running-key list that lb/pow2 dispatch
sums over, kept twice: in swap-remove order (the order exact sums add them up in) and sorted
(for a fast approximate sum; engine.py's `least_loaded`).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque


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
        "sorted_key",
        "t_b",
        "version",
        "wait",
        "wait_pred",
    )

    def __init__(self, idx: int, capacity: int) -> None:
        # `capacity` (the most sequences that can run) is a hint only: the lists grow as needed
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
        self.seg: list[float] | None = None  # boundary times k_b+1 .. next finish (sorted)
        self.event_k = -1           # iteration of the pending boundary event, -1 if none
        self.version = 0            # bumps invalidate stale boundary events
        self.run_key: list[float] = []  # load - generated + admit iteration, as run_req
        self.run_req: list[int] = []
        self.sorted_key: list[float] = []  # the same keys, sorted
        self.pos: dict[int, int] = {}
        self.peak_ctx = 0
        self.peak_run = 0
        self.n_boundaries = 0
        self.dirty = False          # preemptive queues: a request joined since the last re-rank

    def add_key(self, r: int, key: float) -> None:
        key = float(key)
        self.pos[r] = len(self.run_req)
        self.run_key.append(key)
        self.run_req.append(r)
        insort(self.sorted_key, key)

    def remove_key(self, r: int) -> None:
        """Swap-remove (the last key takes the removed one's place), so that keys keep the
        order in which exact sums over them add them up."""
        i = self.pos.pop(r)
        keys = self.sorted_key
        del keys[bisect_left(keys, self.run_key[i])]
        moved = self.run_req.pop()
        key = self.run_key.pop()
        if i != len(self.run_req):
            self.run_key[i] = key
            self.run_req[i] = moved
            self.pos[moved] = i
