"""Discrete-event simulator of disaggregated LLM serving driven by predicted output lengths.

Requests arrive at a shared FCFS prefill queue, are prefilled in token-budget batches (which
emits the first token), send their KV cache over one shared FIFO link, are dispatched to a
decode instance when the cache arrives, wait in that instance's queue and are admitted at an
iteration boundary, then gain one token per decode iteration until done.

Speed: a decode instance is not stepped iteration by iteration. Between two events (a request
finishing, or a boundary at which a newly arrived request can be admitted) its batch is fixed
and every running request gains one token per iteration, so the boundary times of the whole
stretch follow from the time model at once (in Python floats for short stretches, one vectorised
call for long ones, the same floating-point operations either way). Per-event Python work is
O(changes), and the hot path avoids numpy calls on small arrays, whose fixed cost exceeds the
arithmetic: lb dispatch compares instances by a bounded approximation of their outstanding
tokens and computes the exact figures only when the bounds cannot separate them.
The decode instance's state is decode.py; preemptive re-ranking (queue srpt) extends this event
loop through its hooks (refill, next_stop, admitted/finished) in preemption.py; run.py's
`simulate` picks the engine for a queue policy.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, bisect_right, insort
from collections import deque
from itertools import accumulate
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

# Stretches of at most this many iterations are priced in Python floats, longer ones with numpy:
# below it a list comprehension beats the fixed cost of the array calls. Both compute every
# boundary time with the same floating-point operations in the same order (a left-to-right
# running sum, as np.cumsum), so the times are the same to the bit either way.
_PY_PRICE_MAX = 48
# Error bound factor of `_Engine.least_loaded`'s approximate sums: 8 units of roundoff (2^-53)
# per term, against the at most 3n + 3 roundings of magnitude below M (the bound's scale) by
# which the approximation and numpy's exact sum of n terms can differ.
_SUM_ULP = 2.0 ** -50


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
        self.kv_fifo: deque[tuple[Any, ...]] = deque()  # KV-ready events in (time, seq) order
        self.kv_in_heap = False     # the KV stream's next event is in the heap
        self.kv_last = float("-inf")  # time of the KV stream's last event
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
        self.lb_all = dispatch == "lb" and cfg.n_decode > 1  # choose() is least_loaded(dec)
        self.sjf = queue == "sjf"
        self.aging = cfg.aging_alpha if cfg.starvation == "aging" else 0.0
        self.promotion = cfg.starvation == "promotion"
        self.t_starve = cfg.t_starve_s if cfg.t_starve_s is not None else float("inf")
        affine = getattr(model, "decode_affine", None)
        self.affine = affine if callable(affine) else None
        self.affine_cache: dict[int, tuple[float, float]] = {}
        self.prefill_cache: dict[tuple[int, int], float] = {}  # seconds by (tokens, sum_sq)
        self.timeline: list[tuple[float, int, int, int]] | None = [] if record_timeline else None
        self.max_seqs = cfg.max_num_seqs
        self.kv_cap = cfg.kv_capacity_tokens
        # the per-request hooks are no-ops here: skip their calls unless a subclass has them;
        # likewise refill, next_stop and wait_key are done inline unless overridden
        cls = type(self)
        self.hooks = (cls.admitted_hook is not _Engine.admitted_hook
                      or cls.finished_hook is not _Engine.finished_hook)
        self.plain = (cls.refill is _Engine.refill and cls.next_stop is _Engine.next_stop
                      and cls.wait_key is _Engine.wait_key)

    # ---------------------------------------------------------------- event plumbing
    def push(self, t: float, kind: int, a: Any, b: Any = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, a, b))

    def run(self) -> SimResult:
        """Process events in (time, kind, sequence) order. Two kinds come in sorted streams and
        only each stream's next event sits in the heap, which the heap then orders as it would
        the whole stream: arrivals, known in advance (arrival i is (arrival[i], _ARRIVE, i)),
        and KV caches, which leave the FIFO link in order (`kv_fifo` holds the ones after the
        next; one that would come out of order goes to the heap directly)."""
        arrival = self.arrival
        n = len(arrival)
        events: list[tuple[Any, ...]] = [(arrival[0], _ARRIVE, 0, 0, None)] if n else []
        self.events = events
        self.seq = n
        kv_fifo = self.kv_fifo
        heappop, heappush = heapq.heappop, heapq.heappush
        dec = self.dec
        pf_queue = self.pf_queue
        boundary, kv_arrives, prefill_done = self.boundary, self.kv_arrives, self.prefill_done
        while events:
            t, kind, _, a, b = heappop(events)
            if kind == _BOUNDARY:
                inst = dec[a]
                version, k = b
                if version == inst.version:
                    boundary(inst, t, k)
            elif kind == _KV_READY:
                if b:  # the stream's next: its successor enters the heap
                    if kv_fifo:
                        heappush(events, kv_fifo.popleft())
                    else:
                        self.kv_in_heap = False
                kv_arrives(a, t)
            elif kind == _ARRIVE:
                if a + 1 < n:
                    heappush(events, (arrival[a + 1], _ARRIVE, a + 1, a + 1, None))
                pf_queue.append(a)
                if self.pf_free:
                    self.start_prefills(t)
            else:
                prefill_done(a, b, t)
        return self.result()

    # ---------------------------------------------------------------- prefill and link
    def start_prefills(self, t: float) -> None:
        """Free prefill instances take FCFS batches of up to max_prefill_tokens tokens."""
        q, cap = self.pf_queue, self.cfg.max_prefill_tokens
        prompt, prefill_cache = self.prompt, self.prefill_cache
        while self.pf_free and q:
            idx = heapq.heappop(self.pf_free)
            batch: list[int] = []
            tokens = 0
            sum_sq = 0
            while q:
                p = prompt[q[0]]
                if batch and tokens + p > cap:
                    break
                batch.append(q.popleft())
                tokens += p
                sum_sq += p * p
            size = (tokens, sum_sq)
            dur = prefill_cache.get(size)
            if dur is None:
                dur = prefill_cache[size] = self.model.prefill_ms(tokens, float(sum_sq)) * 1e-3
            self.seq += 1
            heapq.heappush(self.events, (t + dur, _PREFILL_DONE, self.seq, idx, batch))

    def prefill_done(self, idx: int, batch: list[int], t: float) -> None:
        """Prefill emits the first token; the KV cache then queues for the shared link."""
        first_tok, generated, true, prompt = self.first_tok, self.generated, self.true, self.prompt
        kv_fifo, events = self.kv_fifo, self.events
        link_free, per_token, latency = self.link_free, self.s_per_kv_token, self.link_latency
        seq = self.seq
        for r in batch:
            first_tok[r] = t
            generated[r] = 1
            if true[r] <= 1:
                self.done[r] = t
                continue
            start = t if t > link_free else link_free  # max(link_free, t)
            link_free = start + prompt[r] * per_token
            seq += 1
            ready = link_free + latency
            if not ready >= self.kv_last:  # out of order (a negative link time): heap it
                heapq.heappush(events, (ready, _KV_READY, seq, r, None))
                continue
            self.kv_last = ready
            if self.kv_in_heap:
                kv_fifo.append((ready, _KV_READY, seq, r, True))
            else:
                self.kv_in_heap = True
                heapq.heappush(events, (ready, _KV_READY, seq, r, True))
        self.link_free, self.seq = link_free, seq
        heapq.heappush(self.pf_free, idx)
        self.start_prefills(t)

    # ---------------------------------------------------------------- dispatch
    def outstanding(self, inst: Decode, t: float) -> float:
        """Predicted outstanding tokens: sum_running max(pred - generated, 1) + sum_waiting pred."""
        if inst.n_run == 0:
            return inst.wait_pred
        k_now = inst.k_b
        if inst.seg is not None:
            k_now += bisect_right(inst.seg, t)
        keys = np.array(inst.run_key[:inst.n_run], dtype=np.float64)
        return float(np.maximum(keys - k_now, 1.0).sum()) + inst.wait_pred

    def least_loaded(self, cands: list[Decode], t: float) -> Decode:
        """The first of `cands` with the least `outstanding` tokens.

        `outstanding` sums max(key - k_now, 1) over the running keys with numpy. Here the keys
        above k_now + 1 (exactly those whose term is not the floor 1) are summed from the
        sorted list in one slice and k_now is taken off once, which differs from the exact
        figure by rounding only; each approximation comes with a bound on that difference.
        When the bounds separate the least from every other candidate, the choice is the one
        the exact figures make; otherwise (near-ties, exact ties) the exact figures decide."""
        vals: list[float] = []
        errs: list[float] = []
        for inst in cands:
            w = inst.wait_pred
            n = inst.n_run
            if n == 0:
                vals.append(w)
                errs.append(0.0)
                continue
            k_now = inst.k_b
            if inst.seg is not None:
                k_now += bisect_right(inst.seg, t)
            keys = inst.sorted_key
            floor = bisect_right(keys, k_now + 1.0)  # terms max(key - k_now, 1) == 1
            big = sum(keys[floor:]) if floor else sum(keys)  # keys > k_now + 1 > 0
            off = (n - floor) * k_now
            vals.append(((big - off) + floor) + w)
            errs.append((n + 4) * _SUM_ULP * (big + off + n + (w if w >= 0.0 else -w)))
        if len(vals) == 2:
            v0, v1 = vals
            d = v0 - v1
            if d > errs[0] + errs[1]:
                return cands[1]
            if -d > errs[0] + errs[1]:
                return cands[0]
            return min(cands, key=lambda inst: self.outstanding(inst, t))
        best = 0
        for i in range(1, len(vals)):
            if vals[i] < vals[best]:
                best = i
        vb, eb = vals[best], errs[best]
        for i, v in enumerate(vals):
            if i != best and not abs(v - vb) > errs[i] + eb:
                return min(cands, key=lambda inst: self.outstanding(inst, t))
        return cands[best]

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
            return self.least_loaded(dec, t)
        i, j = self.rng.choice(len(dec), size=2, replace=False)  # pow2
        # a if outstanding(a) <= outstanding(b) else b: the first of the two with the least
        return self.least_loaded([dec[min(i, j)], dec[max(i, j)]], t)

    def kv_arrives(self, r: int, t: float) -> None:
        self.kv_ready[r] = t
        inst = self.least_loaded(self.dec, t) if self.lb_all else self.choose(t)
        self.inst_of[r] = inst.idx
        # sjf: key - aging * age, i.e. key + aging * arrival (the same order at any time),
        # where the key is pred_len as given (simulate_predictions passes rank quantiles,
        # keys.py); fcfs: arrival alone. fl(c + aging * arrival) never decreases with arrival,
        # so a constant key admits in exactly FCFS order (ties break by arrival).
        arrival = self.arrival[r]
        if self.plain:  # wait_key inline
            key = self.pred[r] + self.aging * arrival if self.sjf else 0.0
        else:
            key = self.wait_key(r)
        heapq.heappush(inst.wait, (key, arrival, r))
        if self.promotion:
            inst.promo.append(r)
        inst.n_wait += 1
        inst.wait_pred += self.load[r]
        if inst.n_run == 0:
            if inst.event_k < 0:  # idle: start at once (after other arrivals at time t)
                self.schedule(inst, t, inst.k_b)
        elif inst.n_run < self.max_seqs and inst.seg is not None:
            j = bisect_left(inst.seg, t)
            k = inst.k_b + j + 1
            if k < inst.event_k:  # a free slot: admit at the end of the running iteration
                self.schedule(inst, inst.seg[j], k)

    def wait_key(self, r: int) -> float:
        """The queue key of a request joining a decode queue (smaller is admitted first):
        pred_len plus the aging credit, in pred_len's units per second."""
        return self.pred[r] + self.aging * self.arrival[r] if self.sjf else 0.0

    # ---------------------------------------------------------------- decode instances
    def schedule(self, inst: Decode, t: float, k: int) -> None:
        inst.version += 1
        inst.event_k = k
        self.seq += 1
        heapq.heappush(self.events, (t, _BOUNDARY, self.seq, inst.idx, (inst.version, k)))

    def boundary(self, inst: Decode, t: float, k: int) -> None:
        """Iteration boundary k at time t: finished requests leave, waiting ones are admitted,
        and the boundary times up to the next finish are priced in one call."""
        inst.ctx += inst.n_run * (k - inst.k_b)
        inst.k_b = k
        inst.t_b = t
        inst.event_k = -1
        inst.n_boundaries += 1
        fin = inst.fin
        if fin and fin[0][0] <= k:
            done, generated, admit_k = self.done, self.generated, self.admit_k
            prompt, true = self.prompt, self.true
            track, hooks = self.track_keys, self.hooks
            heappop = heapq.heappop
            while fin and fin[0][0] <= k:
                r = heappop(fin)[1]
                done[r] = t
                generated[r] += k - admit_k[r]
                inst.n_run -= 1
                inst.ctx -= prompt[r] + true[r]
                if track:  # inst.remove_key, inline
                    run_key, run_req = inst.run_key, inst.run_req
                    i = inst.pos.pop(r)
                    sorted_key = inst.sorted_key
                    del sorted_key[bisect_left(sorted_key, run_key[i])]
                    moved = run_req.pop()
                    key = run_key.pop()
                    if i != len(run_req):
                        run_key[i] = key
                        run_req[i] = moved
                        inst.pos[moved] = i
                if hooks:
                    self.finished_hook(inst, r)
        plain = self.plain
        if plain:
            if inst.n_wait:
                self.admit_waiting(inst, t, k)
            stall = 0.0
        else:
            stall = self.refill(inst, t, k)
        if self.timeline is not None:
            self.timeline.append((t, inst.idx, inst.n_run, inst.n_wait))
        batch = inst.n_run
        if batch == 0:
            inst.seg = None
            return
        k_next = fin[0][0] if plain else self.next_stop(inst, k)
        n = k_next - k
        ctx = inst.ctx
        coef = self.affine_cache.get(batch)
        if n <= _PY_PRICE_MAX and coef is not None:  # boundary_times, inline
            alpha, beta = coef
            a0 = float(alpha + beta * ctx)
            step = float(beta * batch)
            start = t + stall
            seg = [x * 1e-3 + start for x in accumulate([a0 + step * i for i in range(n)])]
        else:
            seg = self.boundary_times(batch, ctx, n, t + stall)
        inst.seg = seg
        end_ctx = ctx + batch * n
        if end_ctx > inst.peak_ctx:
            inst.peak_ctx = end_ctx
        inst.version += 1
        inst.event_k = k_next
        self.seq += 1
        heapq.heappush(self.events, (seg[-1], _BOUNDARY, self.seq, inst.idx,
                                     (inst.version, k_next)))

    def refill(self, inst: Decode, t: float, k: int) -> float:
        """Admit waiting requests at boundary k; returns seconds the instance stalls before
        its next iteration (0 here; preemption costs in preemption.py)."""
        if inst.n_wait:
            self.admit_waiting(inst, t, k)
        return 0.0

    def next_stop(self, inst: Decode, k: int) -> int:
        """The next boundary that must be processed: the next finish."""
        return inst.fin[0][0]

    def boundary_times(self, batch: int, ctx: int, n: int, start: float) -> list[float]:
        """Times of the next n boundaries for a fixed batch starting at `start`: `price`'s
        elapsed seconds plus start, as `price(...) + start` gives them. Short stretches of a
        closed-form (affine) model are computed in Python floats with the same operations in
        the same order: ms_i = (alpha + beta * ctx) + (beta * batch) * i, a running sum left to
        right, times 1e-3, plus start."""
        if n <= _PY_PRICE_MAX and self.affine is not None:
            coef = self.affine_cache.get(batch)
            if coef is None:
                coef = self.affine_cache[batch] = self.affine(batch)
            alpha, beta = coef
            a0 = float(alpha + beta * ctx)
            step = float(beta * batch)
            return [x * 1e-3 + start
                    for x in accumulate([a0 + step * i for i in range(n)])]
        seg = self.price(batch, ctx, n)
        seg += start
        return seg.tolist()

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
        max_seqs, kv_cap = self.max_seqs, self.kv_cap
        prompt, generated, true, load = self.prompt, self.generated, self.true, self.load
        admitted = self.admitted
        wait, fin = inst.wait, inst.fin
        heappop, heappush = heapq.heappop, heapq.heappush
        promotion, track, hooks = self.promotion, self.track_keys, self.hooks
        while inst.n_wait and inst.n_run < max_seqs:
            if promotion:
                r, promoted = self.next_waiting(inst, t)
            else:
                r, promoted = wait[0][2], False
            g = generated[r]
            need = prompt[r] + g  # the first token, plus any resumed KV
            if inst.n_run and inst.ctx + need > kv_cap:
                break  # strict order, as vLLM: wait for KV to free up
            if promoted:
                inst.promo.popleft()
            else:
                heappop(wait)
            if not admitted[r]:  # a resumed (preempted) request keeps its first admission
                admitted[r] = True
                self.admit[r] = t
                self.admit_seq[r] = self.n_admitted
                self.n_admitted += 1
            self.admit_k[r] = k
            inst.n_wait -= 1
            inst.wait_pred -= load[r]
            inst.n_run += 1
            inst.ctx += need
            heappush(fin, (k + true[r] - g, r))
            if track:  # inst.add_key, inline
                key = float(load[r] - g + k)
                inst.pos[r] = len(inst.run_req)
                inst.run_key.append(key)
                inst.run_req.append(r)
                insort(inst.sorted_key, key)
            if hooks:
                self.admitted_hook(inst, r, k)
        if inst.n_wait == 0:
            inst.wait_pred = 0.0  # drop float drift
        if inst.n_run > inst.peak_run:
            inst.peak_run = inst.n_run

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
