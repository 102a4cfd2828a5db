"""Discrete-event simulator of disaggregated LLM serving driven by predicted output lengths.

Requests arrive at a shared FCFS prefill queue, are prefilled in token-budget batches (which
emits the first token), send their KV cache over one shared FIFO link, are dispatched to a
decode instance when the cache arrives, wait in that instance's queue and are admitted at an
iteration boundary, then gain one token per decode iteration until done.

Speed: a decode instance is not stepped iteration by iteration. Between two events (a request
finishing, or a boundary at which a newly arrived request can be admitted) its batch is fixed
and every running request gains one token per iteration, so the boundary times of the whole
stretch follow from the time model in one vectorised call. Per-event Python work is O(changes).
The decode instance's state is decode.py; preemptive re-ranking (queue srpt) extends this event
loop through its hooks (refill, next_stop, admitted/finished) in preemption.py; run.py's
`simulate` picks the engine for a queue policy.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lenbench.sim.config import SimConfig
from lenbench.sim.decode import Decode
from lenbench.sim.result import SimResult
from lenbench.sim.timing import TimeModel
from lenbench.sim.workload import Workload

# Event kinds double as priorities at equal times: arrivals join queues before a prefill batch
# forms, and KV caches arriving exactly at an iteration boundary are admitted at it.
_ARRIVE, _PREFILL_DONE, _KV_READY, _BOUNDARY = 0, 1, 2, 3


class _Engine:
    def __init__(self, wl: Workload, cfg: SimConfig, model: TimeModel, dispatch: str,
                 queue: str, seed: int, record_timeline: bool,
                 dispatch_len: NDArray[np.float64] | None = None) -> None:
        self.wl, self.cfg, self.model = wl, cfg, model
        self.dispatch, self.queue = dispatch, queue
        self.rng = np.random.default_rng([seed, 0x706F7732])  # salted: see predictors.py
        n = len(wl)
        self.arrival = wl.arrival_s.tolist()
        self.prompt = wl.prompt_len.tolist()
        self.true = wl.true_len.tolist()
        self.pred = wl.pred_len.tolist()
        # what lb/pow2 balance on: the predictions, or a prediction-free stand-in
        self.load = self.pred if dispatch_len is None else dispatch_len.tolist()
        nan = float("nan")
        self.first_tok = [nan] * n
        self.kv_ready = [nan] * n
        self.admit = [nan] * n
        self.done = [nan] * n
        self.inst_of = [-1] * n
        self.admit_seq = [-1] * n
        self.admit_k = [0] * n
        self.generated = [0] * n
        self.admitted = [False] * n
        self.n_admitted = 0
        self.events: list[tuple[Any, ...]] = []
        self.seq = 0
        # prefill side
        self.pf_queue: deque[int] = deque()
        self.pf_free = list(range(cfg.n_prefill))
        self.link_free = 0.0
        self.s_per_kv_token = cfg.kv_bytes_per_token / (cfg.link_bandwidth_gb_s * 1e9)
        self.link_latency = cfg.link_latency_ms * 1e-3
        # decode side
        cap = max(1, min(cfg.max_num_seqs, n))
        self.dec = [Decode(i, cap) for i in range(cfg.n_decode)]
        self.rr_next = 0
        self.track_keys = dispatch in ("lb", "pow2")
        self.sjf = queue == "sjf"
        self.aging = cfg.aging_alpha if cfg.starvation == "aging" else 0.0
        self.promotion = cfg.starvation == "promotion"
        self.t_starve = cfg.t_starve_s if cfg.t_starve_s is not None else float("inf")
        affine = getattr(model, "decode_affine", None)
        self.affine = affine if callable(affine) else None
        self.affine_cache: dict[int, tuple[float, float]] = {}
        self.timeline: list[tuple[float, int, int, int]] | None = [] if record_timeline else None

    # ---------------------------------------------------------------- event plumbing
    def push(self, t: float, kind: int, a: Any, b: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    def run(self) -> SimResult:
        self.events = [(t, _ARRIVE, i, i, None) for i, t in enumerate(self.arrival)]
        self.seq = len(self.events)
        heapq.heapify(self.events)
        events = self.events
        while events:
            t, kind, _, a, b = heapq.heappop(events)
            if kind == _BOUNDARY:
                inst = self.dec[a]
                version, k = b
                if version == inst.version:
                    self.boundary(inst, t, k)
            elif kind == _KV_READY:
                self.kv_arrives(a, t)
            elif kind == _PREFILL_DONE:
                self.prefill_done(a, b, t)
            else:
                self.pf_queue.append(a)
                self.start_prefills(t)
        return self.result()

    # ---------------------------------------------------------------- prefill and link
    def start_prefills(self, t: float) -> None:
        """Free prefill instances take FCFS batches of up to max_prefill_tokens tokens."""
        q, cap = self.pf_queue, self.cfg.max_prefill_tokens
        while self.pf_free and q:
            idx = heapq.heappop(self.pf_free)
            batch: list[int] = []
            tokens = 0
            sum_sq = 0
            while q:
                p = self.prompt[q[0]]
                if batch and tokens + p > cap:
                    break
                batch.append(q.popleft())
                tokens += p
                sum_sq += p * p
            dur = self.model.prefill_ms(tokens, float(sum_sq)) * 1e-3
            self.push(t + dur, _PREFILL_DONE, idx, batch)

    def prefill_done(self, idx: int, batch: list[int], t: float) -> None:
        """Prefill emits the first token; the KV cache then queues for the shared link."""
        for r in batch:
            self.first_tok[r] = t
            self.generated[r] = 1
            if self.true[r] <= 1:
                self.done[r] = t
                continue
            start = max(self.link_free, t)
            self.link_free = start + self.prompt[r] * self.s_per_kv_token
            self.push(self.link_free + self.link_latency, _KV_READY, r)
        heapq.heappush(self.pf_free, idx)
        self.start_prefills(t)

    # ---------------------------------------------------------------- dispatch
    def outstanding(self, inst: Decode, t: float) -> float:
        """Predicted outstanding tokens: sum_running max(pred - generated, 1) + sum_waiting pred."""
        if inst.n_run == 0:
            return inst.wait_pred
        k_now = inst.k_b
        if inst.seg is not None:
            k_now += int(inst.seg.searchsorted(t, side="right"))
        keys = inst.run_key[:inst.n_run]
        return float(np.maximum(keys - k_now, 1.0).sum()) + inst.wait_pred

    def choose(self, t: float) -> Decode:
        dec = self.dec
        if len(dec) == 1:
            return dec[0]
        if self.dispatch == "rr":
            inst = dec[self.rr_next]
            self.rr_next = (self.rr_next + 1) % len(dec)
            return inst
        if self.dispatch == "jsq":
            return min(dec, key=lambda d: d.n_run + d.n_wait)
        if self.dispatch == "lb":
            return min(dec, key=lambda d: self.outstanding(d, t))
        i, j = self.rng.choice(len(dec), size=2, replace=False)  # pow2
        a, b = dec[min(i, j)], dec[max(i, j)]
        return a if self.outstanding(a, t) <= self.outstanding(b, t) else b

    def kv_arrives(self, r: int, t: float) -> None:
        self.kv_ready[r] = t
        inst = self.choose(t)
        self.inst_of[r] = inst.idx
        # sjf: key - aging * age, i.e. key + aging * arrival (the same order at any time),
        # where the key is pred_len as given (simulate_predictions passes rank quantiles,
        # keys.py); fcfs: arrival alone. fl(c + aging * arrival) never decreases with arrival,
        # so a constant key admits in exactly FCFS order (ties break by arrival).
        arrival = self.arrival[r]
        heapq.heappush(inst.wait, (self.wait_key(r), arrival, r))
        if self.promotion:
            inst.promo.append(r)
        inst.n_wait += 1
        inst.wait_pred += self.load[r]
        if inst.n_run == 0:
            if inst.event_k < 0:  # idle: start at once (after other arrivals at time t)
                self.schedule(inst, t, inst.k_b)
        elif inst.n_run < self.cfg.max_num_seqs and inst.seg is not None:
            j = int(inst.seg.searchsorted(t, side="left"))
            k = inst.k_b + j + 1
            if k < inst.event_k:  # a free slot: admit at the end of the running iteration
                self.schedule(inst, float(inst.seg[j]), k)

    def wait_key(self, r: int) -> float:
        """The queue key of a request joining a decode queue (smaller is admitted first):
        pred_len plus the aging credit, in pred_len's units per second."""
        return self.pred[r] + self.aging * self.arrival[r] if self.sjf else 0.0

    # ---------------------------------------------------------------- decode instances
    def schedule(self, inst: Decode, t: float, k: int) -> None:
        inst.version += 1
        inst.event_k = k
        self.push(t, _BOUNDARY, inst.idx, (inst.version, k))

    def boundary(self, inst: Decode, t: float, k: int) -> None:
        """Iteration boundary k at time t: finished requests leave, waiting ones are admitted,
        and the boundary times up to the next finish are priced in one call."""
        inst.ctx += inst.n_run * (k - inst.k_b)
        inst.k_b = k
        inst.t_b = t
        inst.event_k = -1
        inst.n_boundaries += 1
        fin = inst.fin
        while fin and fin[0][0] <= k:
            r = heapq.heappop(fin)[1]
            self.done[r] = t
            self.generated[r] += k - self.admit_k[r]
            inst.n_run -= 1
            inst.ctx -= self.prompt[r] + self.true[r]
            if self.track_keys:
                inst.remove_key(r)
            self.finished_hook(inst, r)
        stall = self.refill(inst, t, k)
        if self.timeline is not None:
            self.timeline.append((t, inst.idx, inst.n_run, inst.n_wait))
        if inst.n_run == 0:
            inst.seg = None
            return
        k_next = self.next_stop(inst, k)
        n = k_next - k
        seg = self.price(inst.n_run, inst.ctx, n)
        seg += t + stall
        inst.seg = seg
        end_ctx = inst.ctx + inst.n_run * n
        inst.peak_ctx = max(inst.peak_ctx, end_ctx)
        self.schedule(inst, float(seg[-1]), k_next)

    def refill(self, inst: Decode, t: float, k: int) -> float:
        """Admit waiting requests at boundary k; returns seconds the instance stalls before
        its next iteration (0 here; preemption costs in preemption.py)."""
        if inst.n_wait:
            self.admit_waiting(inst, t, k)
        return 0.0

    def next_stop(self, inst: Decode, k: int) -> int:
        """The next boundary that must be processed: the next finish."""
        return inst.fin[0][0]

    def price(self, batch: int, ctx: int, n: int) -> NDArray[np.float64]:
        """Elapsed seconds at each of the next n boundaries for a fixed batch."""
        steps = np.arange(n, dtype=np.float64)
        if self.affine is not None:
            coef = self.affine_cache.get(batch)
            if coef is None:
                coef = self.affine_cache[batch] = self.affine(batch)
            alpha, beta = coef
            ms = (alpha + beta * ctx) + (beta * batch) * steps
        else:
            ms = np.asarray(self.model.decode_ms(batch, ctx + batch * steps), dtype=np.float64)
        out = np.cumsum(ms)
        out *= 1e-3
        return out

    def next_waiting(self, inst: Decode, t: float) -> tuple[int, bool]:
        """Head of the queue: a starved request under promotion, else the policy's minimum."""
        if self.promotion:
            dq = inst.promo
            admitted = self.admitted
            while dq and admitted[dq[0]]:
                dq.popleft()
            if dq and t - self.kv_ready[dq[0]] > self.t_starve:
                return dq[0], True
            while admitted[inst.wait[0][2]]:
                heapq.heappop(inst.wait)
        return inst.wait[0][2], False

    def admit_waiting(self, inst: Decode, t: float, k: int) -> None:
        max_seqs, kv_cap = self.cfg.max_num_seqs, self.cfg.kv_capacity_tokens
        while inst.n_wait and inst.n_run < max_seqs:
            r, promoted = self.next_waiting(inst, t)
            need = self.prompt[r] + self.generated[r]  # the first token, plus any resumed KV
            if inst.n_run and inst.ctx + need > kv_cap:
                break  # strict order, as vLLM: wait for KV to free up
            if promoted:
                inst.promo.popleft()
            else:
                heapq.heappop(inst.wait)
            if not self.admitted[r]:  # a resumed (preempted) request keeps its first admission
                self.admitted[r] = True
                self.admit[r] = t
                self.admit_seq[r] = self.n_admitted
                self.n_admitted += 1
            g = self.generated[r]
            self.admit_k[r] = k
            inst.n_wait -= 1
            inst.wait_pred -= self.load[r]
            inst.n_run += 1
            inst.ctx += need
            heapq.heappush(inst.fin, (k + self.true[r] - g, r))
            if self.track_keys:
                inst.add_key(r, self.load[r] - g + k)
            self.admitted_hook(inst, r, k)
        if inst.n_wait == 0:
            inst.wait_pred = 0.0  # drop float drift
        inst.peak_run = max(inst.peak_run, inst.n_run)

    def admitted_hook(self, inst: Decode, r: int, k: int) -> None:
        """Called after each admission (preemption.py charges resumed requests here)."""

    def finished_hook(self, inst: Decode, r: int) -> None:
        """Called when a request leaves its batch done (preemption.py tracks its running set)."""

    # ---------------------------------------------------------------- output
    def result(self) -> SimResult:
        done = np.asarray(self.done)
        if np.isnan(done).any():
            raise RuntimeError(f"{int(np.isnan(done).sum())} requests never finished")
        stats = [{"iterations": float(d.k_b), "boundaries": float(d.n_boundaries),
                  "peak_running": float(d.peak_run), "peak_kv_tokens": float(d.peak_ctx),
                  "kv_overflow": float(d.peak_ctx > self.cfg.kv_capacity_tokens)}
                 for d in self.dec]
        timeline = (np.asarray(self.timeline, dtype=np.float64).reshape(-1, 4)
                    if self.timeline is not None else None)
        return SimResult(
            workload=self.wl,
            policy=f"{self.dispatch}+{self.queue}",
            first_token_s=np.asarray(self.first_tok),
            kv_ready_s=np.asarray(self.kv_ready),
            admit_s=np.asarray(self.admit),
            done_s=done,
            instance=np.asarray(self.inst_of, dtype=np.int64),
            admit_seq=np.asarray(self.admit_seq, dtype=np.int64),
            generated=np.asarray(self.generated, dtype=np.int64),
            instance_stats=stats,
            timeline=timeline,
            preemptions=self.preemption_counts(),
        )

    def preemption_counts(self) -> NDArray[np.int64]:
        return np.zeros(len(self.done), dtype=np.int64)
