"""The scheduling proxy of benchmarks/engine_replay_bench.py against a fake streaming server:
it never has more requests at the server than slots, sends in arrival order under FCFS and by
smallest key under SJF, and records each request's forced length and times. No llama.cpp."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pytest
from helpers.scripts import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("engine_replay_bench")


class FakeServer:
    """A llama-server-like `/completion` that streams n_predict one-token messages, one every
    `step_s`, and notes the order in which prompts arrive and the most it served at once."""

    def __init__(self, step_s: float = 0.01):
        self.step_s = step_s
        self.received: list[int] = []
        self.active = 0
        self.max_active = 0
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self.thread.start()
        ready.wait(5)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        ready.set()
        self.loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        length = 0
        await reader.readline()  # request line
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        body = json.loads(await reader.readexactly(length))
        self.received.append(body["prompt"][0])  # the tests put the request id first
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")

        def chunk(msg: dict) -> bytes:
            data = f"data: {json.dumps(msg)}\n\n".encode()
            return f"{len(data):x}\r\n".encode() + data + b"\r\n"

        for i in range(body["n_predict"]):
            await asyncio.sleep(self.step_s)
            writer.write(chunk({"content": "x", "tokens": [i], "stop": False}))
            await writer.drain()
        self.active -= 1
        writer.write(chunk({"content": "", "stop": True, "tokens_predicted": body["n_predict"],
                            "tokens_evaluated": len(body["prompt"]),
                            "timings": {"predicted_n": body["n_predict"]}}))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture
def server():
    s = FakeServer()
    yield s
    s.close()


def trace(bench, keys_len):
    # request 0 arrives first and holds the only slot; the others queue behind it
    reqs = [bench.TraceRequest(0, 0.0, (0, 7, 7), 5)]
    reqs += [bench.TraceRequest(i, 0.005 + 0.001 * i, (i, 7, 7), n)
             for i, n in enumerate(keys_len, start=1)]
    return reqs


def test_fcfs_sends_in_arrival_order_one_slot(bench, server):
    reqs = trace(bench, [4, 1, 3, 2])
    recs = bench.run_replay(server.url, reqs, 1, None)
    assert server.received == [0, 1, 2, 3, 4]
    assert server.max_active == 1
    assert [r.tokens for r in recs] == [5, 4, 1, 3, 2]
    assert [r.prompt_tokens for r in recs] == [3] * 5
    for r in recs:
        assert r.arrival_s <= r.sent_s <= r.first_token_s <= r.done_s


def test_sjf_sends_smallest_key_first(bench, server):
    reqs = trace(bench, [4, 1, 3, 2])
    keys = [0.0] + [float(r.n_predict) for r in reqs[1:]]
    recs = bench.run_replay(server.url, reqs, 1, keys)
    assert server.received == [0, 2, 4, 3, 1]
    assert [r.order for r in recs] == [0, 4, 1, 3, 2]


def test_never_more_in_flight_than_slots(bench, server):
    reqs = [bench.TraceRequest(i, 0.0, (i,), 3) for i in range(7)]
    recs = bench.run_replay(server.url, reqs, 2, [7.0 - i for i in range(7)])
    assert server.max_active == 2
    assert [r.order for r in recs] == [6, 5, 4, 3, 2, 1, 0]
    assert sorted(server.received[:2]) == [5, 6]
    assert all(r.tokens == 3 for r in recs)


def test_ties_break_by_arrival_and_idle_proxy_sends_at_once(bench):
    sent = []

    async def send(req, first_token):
        sent.append(req.idx)
        await asyncio.sleep(0.002)
        first_token()
        await asyncio.sleep(0.002)
        return {"tokens_predicted": req.n_predict}

    reqs = [bench.TraceRequest(i, 0.001 * i, (), 1) for i in range(5)]
    recs = asyncio.run(bench.replay(reqs, send, 1, [1.0, 1.0, 0.0, 1.0, 0.0]))
    assert sent[0] == 0  # alone at its arrival: sent at once, whatever its key
    assert sent[1:] == sorted(sent[1:], key=lambda i: ([1.0, 1.0, 0.0, 1.0, 0.0][i], i))
    assert recs[0].sent_s - recs[0].arrival_s < 0.05


def test_failed_request_stops_the_replay(bench):
    async def send(req, first_token):
        await asyncio.sleep(0.001)
        if req.idx == 1:
            raise OSError("connection refused")
        return {"tokens_predicted": 1}

    reqs = [bench.TraceRequest(i, 0.0, (), 1) for i in range(4)]
    with pytest.raises(RuntimeError, match="1 request"):
        asyncio.run(bench.replay(reqs, send, 1, None))


def test_scaled_lengths_and_same_trace_for_every_policy(bench):
    assert list(bench.scale_lengths(np.array([1, 4, 12, 768]), 8)) == [1, 1, 2, 96]
    rows = bench.Rows(np.arange(10, 110), np.arange(100, 0, -1).astype(float),
                      np.full(100, 40), np.zeros(100, bool))
    t = bench.draw_trace(rows, 20, 3, 8.0, 2.0)
    a, b = t.requests(2.0), t.requests(4.0)
    assert [r.n_predict for r in a] == [r.n_predict for r in b]
    assert np.allclose([r.arrival_s for r in a], [2 * r.arrival_s for r in b])
    assert all(len(r.prompt) == 40 for r in a)
    assert t.keys("fcfs") is None
    assert list(t.keys("oracle")) == list(t.n_predict)
