"""Preemptive SRPT-style re-ranking on decode instances, with a preemption cost in simulated time.

Every `repredict_every` iterations an instance compares its running and waiting requests by key =
predicted remaining tokens + aging * arrival (the aging credit; without aging the key is the
remaining length alone). Keys are in tokens, because remaining length is: the aging credit is
aging_alpha (quantiles per second, as for SJF's rank keys) times a token scale
(keys.tokens_per_quantile of the true lengths), in tokens per second. While the smallest waiting key
is below the largest key of a running request that may still be preempted by more than
`preempt_margin`, that running request is evicted back to the instance's queue and the waiting one
takes its place. A request is preempted at most `max_preemptions` times.

Remaining length after g generated tokens (y_1, emitted by prefill, included): `RequestRemaining`
(remaining.py) when given, else the static prediction, minus g (the oracle's static prediction is
L, so its remaining is L - g exactly); floored at 1, so a request that outlived its prediction
looks nearly done. The clock follows the step convention of the dynamic predictions: the estimate
at step t reads the response up to y_{t+1}, so after g generated tokens the latest estimate a
predictor can have made is the one at step g - 1 (it read y_1 ... y_g and no further).

Costs, charged in simulated time to the whole instance (every running request waits):
"recompute" drops the KV cache at eviction and prefills the prompt + generated tokens again when
the request resumes, fused into the next decode iteration as a serving engine with chunked
prefill does: with B running sequences after admission and R = the resumed requests' prompt +
generated tokens, that iteration takes prefill_ms(B + R, sum of their squares) - prefill_ms(B, 0)
longer (the marginal cost of R more tokens in the batch, plus their attention); "swap" moves the
prompt + generated tokens' KV out at eviction and back in at resumption, each at
kv_bytes_per_token / swap_bandwidth_gb_s seconds per token, stalling the instance.

Only re-ranks that can change something are simulated: with static estimates, running keys
only fall, so after a re-rank that preempted nothing the next useful one follows a new arrival
in the queue; dynamic estimates can rise, so then every re-rank point while requests wait is
processed. The schedule is the same either way.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left

import numpy as np
from numpy.typing import NDArray

from lenbench.sim.config import SimConfig
from lenbench.sim.decode import Decode
from lenbench.sim.engine import _Engine
from lenbench.sim.keys import tokens_per_quantile
from lenbench.sim.remaining import RequestRemaining
from lenbench.sim.timing import TimeModel
from lenbench.sim.workload import Workload


class _Running:
    """Ids of an instance's running requests as a dense array prefix (swap-remove)."""

    __slots__ = ("ids", "n", "pos")

    def __init__(self, capacity: int) -> None:
        self.ids = np.empty(max(capacity, 1), dtype=np.int64)
        self.n = 0
        self.pos: dict[int, int] = {}

    def add(self, r: int) -> None:
        if self.n == len(self.ids):
            self.ids = np.concatenate([self.ids, np.empty_like(self.ids)])
        self.ids[self.n] = r
        self.pos[r] = self.n
        self.n += 1

    def remove(self, r: int) -> None:
        i = self.pos.pop(r)
        self.n -= 1
        if i != self.n:
            moved = int(self.ids[self.n])
            self.ids[i] = moved
            self.pos[moved] = i


class PreemptiveEngine(_Engine):
    """The event loop of engine.py with queue "srpt": re-ranking, eviction and its costs."""

    def __init__(self, wl: Workload, cfg: SimConfig, model: TimeModel, dispatch: str,
                 queue: str, seed: int, record_timeline: bool,
                 dispatch_len: NDArray[np.float64] | None = None,
                 remaining: RequestRemaining | None = None,
                 token_scale: float | None = None) -> None:
        super().__init__(wl, cfg, model, dispatch, queue, seed, record_timeline, dispatch_len)
        if cfg.starvation == "promotion":
            raise ValueError("queue 'srpt' supports starvation none or aging, not promotion")
        n = len(wl)
        if remaining is not None and remaining.static_total.shape != (n,):
            raise ValueError("remaining estimates must align with the workload's requests")
        if token_scale is None:
            token_scale = tokens_per_quantile(wl.true_len) if n else 1.0
        self.aging *= float(token_scale)     # tokens per second of age
        self.every = cfg.repredict_every
        self.margin = float(cfg.preempt_margin)
        self.max_pre = cfg.max_preemptions
        self.swap = cfg.preempt_cost == "swap"
        self.s_per_swap_token = cfg.kv_bytes_per_token / (cfg.swap_bandwidth_gb_s * 1e9)
        self.est = remaining
        # estimates that can rise make every re-rank point count (unless nothing may preempt)
        self.dynamic = remaining is not None and remaining.dynamic and self.max_pre > 0
        self.static_total = wl.pred_len
        self.age_term = self.aging * wl.arrival_s
        self.offset = np.zeros(n)            # admission iteration - tokens generated by then
        self.fin_k = [0] * n                 # iteration at which a running request finishes
        self.n_pre = np.zeros(n, dtype=np.int64)
        self.members = [_Running(min(cfg.max_num_seqs, n)) for _ in self.dec]
        self.stall = 0.0
        self.rc_tokens = 0
        self.rc_sq = 0.0

    # ---------------------------------------------------------------- keys
    def totals(self, reqs: NDArray[np.int64], generated: NDArray[np.float64]
               ) -> NDArray[np.float64]:
        """Predicted total lengths after `generated` tokens: the static prediction, or the
        latest dynamic estimate at a step <= generated - 1 (the step convention, above)."""
        if self.est is None:
            return self.static_total[reqs]
        return self.est.totals(reqs, generated - 1)

    def wait_key(self, r: int) -> float:
        """Predicted remaining after the tokens generated so far, plus the aging credit; fixed
        while the request waits (it generates nothing)."""
        g = self.generated[r]
        total = self.pred[r] if self.est is None else self.est.total(r, g - 1)
        return max(total - g, 1.0) + self.aging * self.arrival[r]

    def running_keys(self, ids: NDArray[np.int64], k: int) -> NDArray[np.float64]:
        """Keys of running requests at iteration k; -inf for those out of preemptions."""
        g = k - self.offset[ids]  # tokens generated by iteration k
        keys = np.maximum(self.totals(ids, g) - g, 1.0) + self.age_term[ids]
        keys[self.n_pre[ids] >= self.max_pre] = -np.inf
        return keys

    # ---------------------------------------------------------------- hooks of the engine
    def kv_arrives(self, r: int, t: float) -> None:
        """Queue the request; on a full instance, stop at the next re-rank point."""
        super().kv_arrives(r, t)
        inst = self.dec[self.inst_of[r]]
        inst.dirty = self.max_pre > 0
        if inst.dirty and inst.n_run >= self.cfg.max_num_seqs and inst.seg is not None:
            j = bisect_left(inst.seg, t)
            k = -(-(inst.k_b + j + 1) // self.every) * self.every
            if k < inst.event_k:
                self.schedule(inst, float(inst.seg[k - inst.k_b - 1]), k)

    def refill(self, inst: Decode, t: float, k: int) -> float:
        self.stall, self.rc_tokens, self.rc_sq = 0.0, 0, 0.0
        if inst.n_wait:
            self.admit_waiting(inst, t, k)
            if inst.n_wait and k % self.every == 0 and (inst.dirty or self.dynamic):
                self.rerank(inst, t, k)
                inst.dirty = False
        if not inst.n_wait:
            inst.dirty = False
        stall = self.stall
        if self.rc_tokens:
            batch = inst.n_run
            extra = (self.model.prefill_ms(batch + self.rc_tokens, self.rc_sq)
                     - self.model.prefill_ms(batch, 0.0))
            stall += max(extra, 0.0) * 1e-3
        return stall

    def next_stop(self, inst: Decode, k: int) -> int:
        k_fin = inst.fin[0][0]
        if inst.n_wait and (inst.dirty or self.dynamic):
            return min(k_fin, (k // self.every + 1) * self.every)
        return k_fin

    def admitted_hook(self, inst: Decode, r: int, k: int) -> None:
        g = self.generated[r]
        self.offset[r] = k - g
        self.fin_k[r] = k + self.true[r] - g
        self.members[inst.idx].add(r)
        if self.n_pre[r]:  # resuming: rebuild or swap in the KV of prompt + generated tokens
            tokens = self.prompt[r] + g
            if self.swap:
                self.stall += tokens * self.s_per_swap_token
            else:
                self.rc_tokens += tokens
                self.rc_sq += float(tokens) * tokens

    def finished_hook(self, inst: Decode, r: int) -> None:
        self.members[inst.idx].remove(r)

    def preemption_counts(self) -> NDArray[np.int64]:
        return self.n_pre.copy()

    # ---------------------------------------------------------------- re-ranking
    def rerank(self, inst: Decode, t: float, k: int) -> None:
        """Evict the largest preemptible key while the best waiting key beats it by more than
        the margin; each eviction admits from the queue (and may free KV for it)."""
        run = self.members[inst.idx]
        while inst.n_wait and run.n:
            ids = run.ids[:run.n]
            keys = self.running_keys(ids, k)
            j = int(keys.argmax())
            if not inst.wait[0][0] < keys[j] - self.margin:
                break
            self.preempt(inst, int(ids[j]), k)
            self.admit_waiting(inst, t, k)

    def preempt(self, inst: Decode, r: int, k: int) -> None:
        g = self.generated[r] + (k - self.admit_k[r])
        self.generated[r] = g
        inst.n_run -= 1
        inst.ctx -= self.prompt[r] + g
        inst.fin.remove((self.fin_k[r], r))
        heapq.heapify(inst.fin)
        if self.track_keys:
            inst.remove_key(r)
        self.members[inst.idx].remove(r)
        self.n_pre[r] += 1
        if self.swap:
            self.stall += (self.prompt[r] + g) * self.s_per_swap_token
        heapq.heappush(inst.wait, (self.wait_key(r), self.arrival[r], r))
        inst.n_wait += 1
        inst.wait_pred += self.load[r]
