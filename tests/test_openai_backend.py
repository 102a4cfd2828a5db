"""The OpenAI-compatible backend against a real local HTTP server (lenbench.generation.toy_server).

Greedy labels from the server must equal the HF backend's row for row (any row that differs is
listed with the reason); a server that dies mid-run is survived by restarting it and rerunning
generate_labels, which resumes at shard granularity. Scripted in-process servers check retries,
backoff and errors; `choice_result` is checked on hand-written responses.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest
from helpers.models import tiny_llama, toy_prompt_table
from helpers.servers import (
    GREEDY,
    MAX_NEW,
    N_PROMPTS,
    SHARD,
    ToyServer,
    free_port,
    generate_with,
    openai_client,
)

from lenbench.configs import group_config
from lenbench.generation.openai_backend import (
    OpenAIGenerator,
    ServerError,
    choice_result,
    request_seed,
)
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.models.chat import eos_token_ids


@pytest.fixture(scope="module")
def prompt_table() -> pd.DataFrame:
    """Toyworld prompts: distinct ids, splits in rotation."""
    return toy_prompt_table(N_PROMPTS, seed=123)


def _differences(got: pd.DataFrame, want: pd.DataFrame) -> list[str]:
    """Every row that differs, with the reason (first diverging token, finish, length)."""
    out = []
    key = ["prompt_id", "sample_idx"]
    g, w = got.set_index(key), want.set_index(key)
    for k in w.index.difference(g.index):
        out.append(f"{k}: missing from the openai labels")
    for k in g.index.difference(w.index):
        out.append(f"{k}: not in the hf labels")
    for k in w.index.intersection(g.index):
        a, b = g.loc[k], w.loc[k]
        reasons = []
        if list(a["prompt_token_ids"]) != list(b["prompt_token_ids"]):
            reasons.append("prompt ids differ (chat template rendered differently)")
        ao, bo = list(a["output_token_ids"]), list(b["output_token_ids"])
        if ao != bo:
            at = next((i for i, (x, y) in enumerate(zip(ao, bo)) if x != y), min(len(ao), len(bo)))
            reasons.append(f"outputs diverge at token {at} (openai {ao[at:at + 3]}, "
                           f"hf {bo[at:at + 3]})")
        for col in ("L", "finish_reason", "censored", "split", "text"):
            if a[col] != b[col]:
                reasons.append(f"{col}: openai {a[col]!r} vs hf {b[col]!r}")
        if reasons:
            out.append(f"{k}: " + "; ".join(reasons))
    return out


def _assert_same_labels(got: pd.DataFrame, want: pd.DataFrame) -> None:
    diffs = _differences(got, want)
    assert not diffs, "openai labels differ from the hf backend's:\n" + "\n".join(diffs)
    pd.testing.assert_frame_equal(got, want)


# ------------------------------------------------------------------------------------------------
# against real toy servers


def test_toy_model_greedy_labels_equal_hf_and_restart_resumes(toy_tiny, toy_tiny_path,
                                                              prompt_table, tmp_path):
    """toy_tiny over a server subprocess that dies mid-run, restarted on the same port."""
    want, _ = generate_with(toy_tiny, prompt_table, tmp_path / "hf")
    port = free_port()
    n_shards = -(-N_PROMPTS // SHARD)
    # the server serves the probe, the first shard (SHARD requests) and one more, then dies
    # mid-shard 2; one request at a time, since one call sends every shard's requests
    server = ToyServer(toy_tiny_path, port, "--die-after", str(1 + SHARD + 1))
    out = tmp_path / "shards"
    try:
        with pytest.raises(ServerError, match=f"127.0.0.1:{port}/v1/completions"):
            generate_with(toy_tiny, prompt_table, out,
                          openai_client(toy_tiny, server.url, max_retries=1, concurrency=1))
        assert server.proc.wait(timeout=30) == 3  # it died (the --die-after exit code)
    finally:
        server.stop()
    finished = sorted(out.glob("shard-*.parquet"))
    assert [p.name for p in finished] == ["shard-00000.parquet"], "not killed mid-run"
    before = {p.name: p.stat().st_mtime_ns for p in finished}

    server = ToyServer(toy_tiny_path, port)  # restarted on the same address
    try:
        labels, card = generate_with(toy_tiny, prompt_table, out,
                                     openai_client(toy_tiny, server.url))
        # an uninterrupted run against the same server, for good measure
        fresh, fresh_card = generate_with(toy_tiny, prompt_table, tmp_path / "fresh",
                                 openai_client(toy_tiny, server.url))
    finally:
        server.stop()
    assert card["rows_resumed"] == SHARD and fresh_card["rows_resumed"] == 0
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*.parquet")
            if p.name in before} == before, "a finished shard was regenerated"
    assert len(list(out.glob("shard-*.parquet"))) == n_shards
    _assert_same_labels(labels, want)
    _assert_same_labels(fresh, want)


@pytest.fixture(scope="module")
def mixed(toy_tiny, prompt_table, tmp_path_factory):
    """A random tiny Llama with toy_tiny's tokenizer, saved as a model folder.

    toy_tiny's greedy answers all repeat one token past any length limit, so they never test a
    `stop`. This model's greedy answers vary; its extra EOS id (generation_config) is chosen so
    that some rows stop on the tokenizer's EOS, some on the extra one and some hit the limit.
    """
    from lenbench.generation.hf import HFGenerator
    from lenbench.models.chat import render_prompt
    from lenbench.models.loading import load_target

    tok = toy_tiny.tokenizer
    model = tiny_llama(n_layers=2, hidden=32, vocab=len(tok), seed=0)
    reqs = [GenRequest(tuple(render_prompt(tok, t)), (0,)) for t in prompt_table["text"]]
    free, _ = HFGenerator(model, [-1], batch_size=8).generate(reqs, GREEDY)
    n = len(free)
    for extra in range(2, len(tok)):
        if extra == tok.eos_token_id:
            continue
        stops = []
        for r in free:
            hit = next((t for t in r.output_ids if t in (extra, tok.eos_token_id)), None)
            stops.append(hit)
        if 3 <= sum(h is not None for h in stops) <= n - 3 and extra in stops and \
                tok.eos_token_id in stops:
            break
    else:
        pytest.fail("no extra EOS gives the mix of endings this test needs; change the seed")
    model.generation_config.eos_token_id = extra
    model.generation_config.pad_token_id = 0
    path = tmp_path_factory.mktemp("mixed_model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    target = load_target(str(path), "float32", "cpu")
    assert eos_token_ids(target.model, target.tokenizer) == sorted({extra, tok.eos_token_id})
    hf, _ = generate_with(target, prompt_table, tmp_path_factory.mktemp("mixed_hf"))
    assert set(hf["finish_reason"]) == {"stop", "length"}
    return str(path), target, hf


@pytest.fixture(scope="module")
def mixed_server(mixed):
    """The toy server's handler in this process on a real socket, serving the mixed model."""
    from lenbench.generation.toy_server import ToyBackend, serve

    backend = ToyBackend(mixed[0], "mixed")
    server = serve(backend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield backend, f"http://127.0.0.1:{server.server_address[1]}"  # no /v1: added by the client
    server.shutdown()
    server.server_close()


def test_greedy_labels_with_both_endings_equal_hf(mixed, mixed_server, prompt_table, tmp_path):
    _, target, want = mixed
    backend, url = mixed_server
    got, _ = generate_with(target, prompt_table, tmp_path / "ids", openai_client(target, url))
    _assert_same_labels(got, want)
    # ids read from logprobs "token_id:N" tokens (vLLM's return_tokens_as_token_ids)
    via_logprobs, _ = generate_with(target, prompt_table, tmp_path / "lp",
                           openai_client(target, url, token_ids_via_logprobs=True))
    _assert_same_labels(via_logprobs, want)
    # a server that drops the EOS from the ids: L still counts it (both EOS ids are stripped here)
    backend.strip_eos = True
    try:
        stripped, _ = generate_with(target, prompt_table, tmp_path / "strip",
                                    openai_client(target, url))
    finally:
        backend.strip_eos = False
    _assert_same_labels(stripped, want)
    ends = {tuple(x)[-1] for x, r in zip(want["output_token_ids"], want["finish_reason"])
            if r == "stop"}
    assert len(ends) == 2  # rows stopped on each of the two EOS ids


def test_sampled_generation_is_seeded_per_sample(mixed, mixed_server, prompt_table, tmp_path):
    _, target, greedy = mixed
    _, url = mixed_server
    sampled = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=MAX_NEW)
    a, _ = generate_with(target, prompt_table, tmp_path / "a", openai_client(target, url), sampled)
    b, _ = generate_with(target, prompt_table, tmp_path / "b",
                         openai_client(target, url, concurrency=1), sampled)
    pd.testing.assert_frame_equal(a, b)  # same seeds, any concurrency -> same samples
    assert [list(x) for x in a["output_token_ids"]] != \
        [list(x) for x in greedy["output_token_ids"]]
    eos = set(eos_token_ids(target.model, target.tokenizer))
    for _, row in a.iterrows():
        out = list(row["output_token_ids"])
        assert row["L"] == len(out) <= MAX_NEW
        assert (out[-1] in eos) == (row["finish_reason"] == "stop")


# ------------------------------------------------------------------------------------------------
# retries and errors against scripted servers


class Scripted:
    """An in-process HTTP server answering POSTs from a script of (status, body, delay_s)."""

    def __init__(self, script):
        self.script = list(script)
        self.seen: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                self._reply(200, {"data": [{"id": "scripted"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.seen.append(body)
                status, payload, delay = owner.script.pop(0) if owner.script else \
                    (500, {"error": "script exhausted"}, 0)
                time.sleep(delay)
                self._reply(status, payload)

            def _reply(self, status, payload):
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and left

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _ok(ids, reason="length"):
    return (200, {"choices": [{"index": 0, "token_ids": ids, "finish_reason": reason}],
                  "usage": {"completion_tokens": len(ids)}}, 0)


def _scripted_client(url, **kw):
    gen = group_config("generation", {"backend": "openai", "base_url": url, "model": "scripted",
                                      "concurrency": 1, "max_retries": 3, "timeout_s": 5,
                                      "backoff_s": 0.01, **kw})
    return OpenAIGenerator.from_config(gen, None, [1])


REQ = [GenRequest((5, 6, 7), (0, 1, 0))]
CFG = SamplingConfig(temperature=0.0, max_new_tokens=4)


def test_429_then_200_is_retried():
    srv = Scripted([(429, {"error": "slow down"}, 0), (503, {}, 0), _ok([3, 4, 5, 6])])
    try:
        results, _ = _scripted_client(srv.url).generate(REQ, CFG)
    finally:
        srv.close()
    assert results[0].output_ids == [3, 4, 5, 6] and results[0].finish_reason == "length"
    assert len(srv.seen) == 3 and srv.seen[0] == srv.seen[2]  # the same request, resent


def test_timeout_is_retried():
    srv = Scripted([(*_ok([9])[:2], 1.0), _ok([2, 1], "stop")])
    try:
        results, _ = _scripted_client(srv.url, timeout_s=0.3).generate(REQ, CFG)
    finally:
        srv.close()
    assert results[0].output_ids == [2, 1] and results[0].finish_reason == "stop"
    assert len(srv.seen) == 2


def test_5xx_past_max_retries_raises_naming_the_url():
    srv = Scripted([(500, {"error": "boom"}, 0)] * 10)
    try:
        with pytest.raises(ServerError) as err:
            _scripted_client(srv.url, max_retries=2).generate(REQ * 3, CFG)
    finally:
        srv.close()
    msg = str(err.value)
    assert f"{srv.url}/completions" in msg and "3 attempts" in msg and "HTTP 500" in msg
    assert len(srv.seen) == 3  # concurrency 1: the first request failed, the others never ran


def test_client_errors_are_not_retried_and_dead_server_raises():
    srv = Scripted([(400, {"error": "bad prompt"}, 0), _ok([1], "stop")])
    try:
        with pytest.raises(ServerError, match="HTTP 400.*bad prompt"):
            _scripted_client(srv.url).generate(REQ, CFG)
    finally:
        srv.close()
    assert len(srv.seen) == 1
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens here
    with pytest.raises(ServerError, match=f"{url}/completions failed after 2 attempts"):
        _scripted_client(url, max_retries=1).generate(REQ, CFG)


def test_request_body_one_sample_per_request_with_its_own_seed():
    gen = _scripted_client("http://127.0.0.1:9")
    a = gen.request_body(GenRequest((5, 6), (0, 11, 0)), CFG)
    b = gen.request_body(GenRequest((5, 6), (0, 11, 1)), CFG)
    assert a["n"] == b["n"] == 1 and a["prompt"] == [5, 6]
    assert a["seed"] != b["seed"] and a["seed"] == request_seed((0, 11, 0))
    assert 0 <= a["seed"] < 2**31
    assert a["stop_token_ids"] == [1] and a["return_token_ids"] is True
    assert a["max_tokens"] == 4 and a["temperature"] == 0.0 and a["top_k"] == -1
    assert gen.describe()["model"] == "scripted" and "api_key" not in gen.describe()


# ------------------------------------------------------------------------------------------------
# response -> GenResult


def test_lengths_come_from_token_ids_not_usage():
    # one request with n=2: usage.completion_tokens = 7 sums over both choices
    response = {"choices": [{"index": 0, "token_ids": [4, 5, 1], "finish_reason": "stop"},
                            {"index": 1, "token_ids": [4, 4, 4, 4], "finish_reason": "length"}],
                "usage": {"completion_tokens": 7}}
    got = [choice_result(c, [1]) for c in response["choices"]]
    assert [len(g.output_ids) for g in got] == [3, 4]
    assert [g.finish_reason for g in got] == ["stop", "length"]


def test_choice_result_eos_and_fallbacks():
    # EOS stripped by the server: appended back (single EOS id, or the one stop_reason names)
    assert choice_result({"token_ids": [4, 5], "finish_reason": "stop"}, [1]).output_ids == \
        [4, 5, 1]
    assert choice_result({"token_ids": [4], "finish_reason": "stop", "stop_reason": 7},
                         [1, 7]).output_ids == [4, 7]
    with pytest.raises(ServerError, match="cannot count L"):
        choice_result({"token_ids": [4], "finish_reason": "stop"}, [1, 7])
    # EOS as the only token
    assert choice_result({"token_ids": [], "finish_reason": "stop"}, [1]).output_ids == [1]
    # vLLM's return_tokens_as_token_ids convention
    lp = {"logprobs": {"tokens": ["token_id:4", "token_id:1"]}, "finish_reason": "stop"}
    assert choice_result(lp, [1]).output_ids == [4, 1]
    with pytest.raises(ServerError, match="no output token ids"):
        choice_result({"text": "hello", "finish_reason": "length"}, [1])
    with pytest.raises(ServerError, match="finish_reason"):
        choice_result({"token_ids": [4], "finish_reason": "content_filter"}, [1])
