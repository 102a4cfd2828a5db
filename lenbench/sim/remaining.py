"""Remaining-length estimates a preemptive scheduler reads while requests decode.

A dynamic predictor is scored at some steps t of each test row (t tokens generated, its estimate
r_t of the tokens still to come, read with the response up to y_{t+1}). A scheduler asks at any
step t: it uses the latest scored estimate at or before t minus the tokens generated since, i.e.
the implied total s + r_s of the latest scored step s <= t (never below 1; the engine applies the
floor). Before a row's first scored step, or for a row with none, the static prediction stands
in. The preemptive engine, whose requests have generated g tokens (y_1 from prefill included),
asks at step t = g - 1, the latest step whose estimate reads no token not yet generated.

Lookups are vectorised: the scored steps of all rows sit in one array sorted by (row, t). A
request's t only grows while it is served, so each request keeps a cursor on its row's latest
step and a lookup moves cursors forward a step or two at a time, falling back to one
`searchsorted` over all steps when t jumps further (or goes back).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray


class RemainingEstimates:
    """Per test row: the implied total length s + r_s at each scored step s, sorted by (row, s).

    Non-finite estimates are dropped; of two estimates at the same (row, s) the later wins.
    """

    def __init__(self, step_row: ArrayLike, step_t: ArrayLike, remaining: ArrayLike,
                 n_rows: int) -> None:
        row = np.asarray(step_row, dtype=np.int64).reshape(-1)
        t = np.asarray(step_t, dtype=np.int64).reshape(-1)
        rem = np.asarray(remaining, dtype=np.float64).reshape(-1)
        if not row.shape == t.shape == rem.shape:
            raise ValueError(f"step_row, step_t and remaining differ in length: {row.shape}, "
                             f"{t.shape}, {rem.shape}")
        if row.size and (row.min() < 0 or row.max() >= n_rows):
            raise ValueError(f"step_row must index the {n_rows} rows")
        if (t < 0).any():
            raise ValueError("step_t must be >= 0")
        keep = np.isfinite(rem)
        row, t, rem = row[keep], t[keep], rem[keep]
        self.n_rows = int(n_rows)
        self.stride = int(t.max()) + 2 if t.size else 2
        key = row * self.stride + t
        total = t + rem
        if key.size and (np.diff(key) < 0).any():  # the harness gives steps sorted already
            order = np.argsort(key, kind="stable")
            key, row, t, total = key[order], row[order], t[order], total[order]
        last = np.append(key[1:] != key[:-1], True)  # the later of duplicated (row, t)
        self.key, self.row, self.t, self.total = key[last], row[last], t[last], total[last]
        rows = np.arange(self.n_rows)
        self.row_start = np.searchsorted(self.row, rows, side="left")
        self.row_end = np.searchsorted(self.row, rows, side="right")

    def __len__(self) -> int:
        return len(self.key)

    def for_requests(self, rows: ArrayLike, static_total: ArrayLike) -> RequestRemaining:
        """The estimates of drawn requests: `rows` (request -> test row) and each request's
        static prediction, used where no scored step is at or before t."""
        return RequestRemaining(self, np.asarray(rows, dtype=np.int64),
                                np.asarray(static_total, dtype=np.float64))


class RequestRemaining:
    """`RemainingEstimates` seen through a workload's requests (rows drawn with replacement)."""

    def __init__(self, estimates: RemainingEstimates, rows: NDArray[np.int64],
                 static_total: NDArray[np.float64]) -> None:
        if rows.shape != static_total.shape:
            raise ValueError("rows and static_total must align with the requests")
        self.est = estimates
        self.rows = rows
        self.static_total = static_total
        self.dynamic = len(estimates) > 0  # estimates can change while a request runs
        self.start = estimates.row_start[rows]
        self.end = estimates.row_end[rows]
        self.cur = self.start - 1  # latest step at or before the last t asked; start-1: none

    def totals(self, reqs: NDArray[np.int64], t: NDArray[np.float64] | NDArray[np.int64]
               ) -> NDArray[np.float64]:
        """Implied total length of requests `reqs` after t generated tokens (remaining = total
        - t): the latest scored step's s + r_s, else the static prediction."""
        est = self.est
        if not len(est):
            return self.static_total[reqs]
        t = np.asarray(t, dtype=np.int64)
        cur, start, end = self.cur[reqs], self.start[reqs], self.end[reqs]
        last = len(est) - 1
        for _ in range(2):  # t moves a step or two between lookups
            move = (cur + 1 < end) & (est.t[np.minimum(cur + 1, last)] <= t)
            if not move.any():
                break
            cur = cur + move
        stale = ((cur + 1 < end) & (est.t[np.minimum(cur + 1, last)] <= t)) | (
            (cur >= start) & (est.t[np.maximum(cur, 0)] > t))
        if stale.any():  # a jump of more steps, or back: search
            step = np.minimum(t[stale], est.stride - 1)
            pos = np.searchsorted(est.key, self.rows[reqs][stale] * est.stride + step,
                                  side="right") - 1
            cur[stale] = np.maximum(pos, start[stale] - 1)
        self.cur[reqs] = cur
        return np.where(cur >= start, est.total[np.maximum(cur, 0)], self.static_total[reqs])

    def total(self, r: int, t: int) -> float:
        """`totals` of one request."""
        return float(self.totals(np.array([r]), np.array([t]))[0])
