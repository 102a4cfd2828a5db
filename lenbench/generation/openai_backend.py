"""OpenAI-compatible generation backend: any server with a `/v1/completions` endpoint.

Works with vLLM, SGLang, TGI and lenbench's own `toy_server`. What it relies on:

- Prompts are sent as token ids (`"prompt": [int, ...]`, accepted by vLLM, SGLang and the OpenAI
  API itself), so the server generates after exactly our rendered chat template and adds no BOS.
- Output token ids come back per choice. In order of preference:
  1. `choices[i].token_ids` (vLLM >= 0.10.2 with `"return_token_ids": true`; toy_server);
  2. `choices[i].logprobs.tokens` written as `"token_id:N"` (vLLM with `"logprobs": 0` and
     `"return_tokens_as_token_ids": true`), enabled with `token_ids_via_logprobs: true`.
  A server that returns only text is refused: re-tokenising text does not give the model's tokens.
- Lengths are counted from those ids, never from `usage.completion_tokens` (a sum over all `n`
  choices of a request). L counts the EOS token like the HF backend: we send our EOS ids as
  `stop_token_ids`; if a server strips the EOS from the returned ids on a `stop` finish, it is put
  back (`stop_reason` names it; null `stop_reason` means the tokenizer's EOS, as in vLLM).
- One sample per request (`n = 1`): each sample has its own seed derived from its GenRequest
  seed, so a row's tokens do not depend on which other samples were asked for together.
  Only greedy decoding (temperature 0) reproduces the HF backend token for token; sampled outputs
  follow the server's own random streams (deterministic per seed on servers that honour `seed`).

Requests run on a bounded thread pool (`concurrency`); 429, 408, 5xx, connection errors and
timeouts are retried with exponential backoff and jitter (honouring `Retry-After`), other HTTP
errors fail at once. Resuming is the runner's: a failed shard is not written, so a rerun against a
restarted server regenerates only the unfinished shards.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from lenbench.generation.hf import GenRequest, GenResult, GenStats, SamplingConfig

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}

# Sampling extensions that keep a vLLM/SGLang server from applying defaults of its own (vLLM reads
# generation_config.json, which may set top_k, min_p or a repetition penalty): plain softmax with
# temperature and top-p is what the HF backend samples from.
DEFAULT_EXTRA_BODY = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


class ServerError(RuntimeError):
    """A request failed for good (retries exhausted, or an error that retrying cannot fix)."""


def request_seed(seed: Sequence[int]) -> int:
    """The integer `seed` sent to the server for one GenRequest seed tuple (31 bits, portable)."""
    state = np.random.SeedSequence([int(s) for s in seed]).generate_state(1, dtype=np.uint32)
    return int(state[0]) & 0x7FFF_FFFF


def _parse_token_id(token: Any) -> int:
    if isinstance(token, int):
        return token
    if isinstance(token, str) and token.startswith("token_id:"):
        return int(token[len("token_id:"):])
    raise ValueError(f"logprobs token {token!r} is not a 'token_id:N' string (ask the server "
                     "for return_tokens_as_token_ids)")


def choice_result(choice: dict, eos_ids: Sequence[int], primary_eos: int | None = None
                  ) -> GenResult:
    """One response choice -> GenResult, with L counted from its token ids (EOS included).

    `usage.completion_tokens` is deliberately not read: it sums over every choice of a request.
    If a server left the EOS out of the ids of a `stop` finish, it is appended: the token named
    by `stop_reason` (vLLM: a stop_token_ids match), else, for `stop_reason` null (vLLM: the
    tokenizer's own EOS), `primary_eos` or the only EOS id.
    """
    if choice.get("token_ids") is not None:
        ids = [int(t) for t in choice["token_ids"]]
    elif (choice.get("logprobs") or {}).get("tokens") is not None:
        ids = [_parse_token_id(t) for t in choice["logprobs"]["tokens"]]
    else:
        raise ServerError("the server returned no output token ids (choices[i].token_ids or "
                          "logprobs tokens as 'token_id:N'); lengths cannot be counted from text")
    eos = {int(e) for e in eos_ids}
    reason = choice.get("finish_reason")
    if reason == "stop":
        if not ids or ids[-1] not in eos:
            # servers that drop the EOS from the returned ids (L must count it, docs/protocol.md)
            stop = choice.get("stop_reason")
            if isinstance(stop, int) and stop in eos:
                ids.append(stop)
            elif stop is None and primary_eos is not None and primary_eos in eos:
                ids.append(primary_eos)
            elif stop is None and len(eos) == 1:
                ids.append(next(iter(eos)))
            else:
                raise ServerError(f"finish_reason 'stop' without an EOS token among the ids "
                                  f"(stop_reason {stop!r}, eos {sorted(eos)}): cannot count L")
        return GenResult(ids, "stop")
    if reason == "length":
        return GenResult(ids, "length")
    raise ServerError(f"unexpected finish_reason {reason!r}")


class OpenAIGenerator:
    """Generates GenRequests on an OpenAI-compatible server (same interface as HFGenerator)."""

    def __init__(self, base_url: str, eos_ids: Sequence[int], model: str | None = None,
                 api_key: str | None = None, concurrency: int = 8, max_retries: int = 5,
                 timeout_s: float = 600.0, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 extra_body: dict | None = None, token_ids_via_logprobs: bool = False,
                 tokenizer=None):
        self.base_url = base_url.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.eos_ids = sorted({int(e) for e in eos_ids})
        self.api_key = api_key
        self.concurrency = max(1, int(concurrency))
        self.max_retries = int(max_retries)
        self.timeout_s = float(timeout_s)
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.extra_body = dict(DEFAULT_EXTRA_BODY if extra_body is None else extra_body)
        self.token_ids_via_logprobs = token_ids_via_logprobs
        # the tokenizer only names the primary EOS (see choice_result); ids never come from text
        self.tokenizer = tokenizer
        self.primary_eos = getattr(tokenizer, "eos_token_id", None)
        self._model = model
        self._model_lock = threading.Lock()

    @classmethod
    def from_config(cls, gen_cfg: dict, tokenizer, eos_ids: Sequence[int]) -> OpenAIGenerator:
        """Build from the `generation` config group (conf/generation/openai.yaml)."""
        key_env = gen_cfg.get("api_key_env")
        if key_env and not os.environ.get(key_env):
            raise ValueError(f"generation.api_key_env={key_env!r}: that environment variable "
                             "is not set")
        extra = gen_cfg.get("extra_body")
        return cls(
            base_url=gen_cfg["base_url"], eos_ids=eos_ids, model=gen_cfg.get("model"),
            api_key=os.environ.get(key_env) if key_env else None,
            concurrency=gen_cfg.get("concurrency", 8), max_retries=gen_cfg.get("max_retries", 5),
            timeout_s=gen_cfg.get("timeout_s", 600.0), backoff_s=gen_cfg.get("backoff_s", 1.0),
            max_backoff_s=gen_cfg.get("max_backoff_s", 30.0),
            extra_body=dict(extra) if extra is not None else None,
            token_ids_via_logprobs=bool(gen_cfg.get("token_ids_via_logprobs", False)),
            tokenizer=tokenizer)

    # -- HTTP -------------------------------------------------------------------------------

    def _http(self, method: str, path: str, body: dict | None = None) -> dict:
        """One call with retries; returns the decoded JSON body."""
        url = f"{self.base_url}{path}"
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                req = urllib.request.Request(url, data=data, headers=headers, method=method)
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as e:
                detail = e.read()[:500].decode(errors="replace")
                last = f"HTTP {e.code}: {detail}"
                if e.code not in RETRY_STATUS:
                    raise ServerError(f"{method} {url} failed: {last}") from e
                retry_after = e.headers.get("Retry-After") if e.headers else None
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError,
                    TimeoutError, json.JSONDecodeError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', None) or e}"
            if attempt == self.max_retries:
                break
            delay = min(self.max_backoff_s, self.backoff_s * 2 ** attempt)
            delay *= 0.5 + random.random()  # jitter: concurrent clients do not retry in step
            if retry_after is not None:
                try:
                    delay = min(self.max_backoff_s, max(delay, float(retry_after)))
                except ValueError:
                    pass
            time.sleep(delay)
        raise ServerError(f"{method} {url} failed after {self.max_retries + 1} attempts "
                          f"(max_retries={self.max_retries}); last error: {last}")

    @property
    def model(self) -> str:
        """The served model name: configured, or the first one the server lists."""
        with self._model_lock:
            if self._model is None:
                listed = self._http("GET", "/models").get("data") or []
                if not listed:
                    raise ServerError(f"{self.base_url}/models lists no model; set "
                                      "generation.model")
                self._model = listed[0]["id"]
            return self._model

    def describe(self) -> dict:
        """Provenance recorded in the generation card (never the API key)."""
        return {"backend": "openai", "base_url": self.base_url, "model": self._model,
                "extra_body": self.extra_body,
                "token_ids_via_logprobs": self.token_ids_via_logprobs,
                "concurrency": self.concurrency}

    # -- generation -------------------------------------------------------------------------

    def request_body(self, request: GenRequest, cfg: SamplingConfig) -> dict:
        body = {
            "model": self.model,
            "prompt": list(request.prompt_ids),
            "max_tokens": cfg.max_new_tokens,
            "temperature": cfg.temperature,
            "top_p": cfg.top_p if cfg.temperature > 0 else 1.0,
            "n": 1,
            "seed": request_seed(request.seed),
            "stream": False,
            "stop_token_ids": self.eos_ids,
            **self.extra_body,
        }
        if self.token_ids_via_logprobs:
            body.update(logprobs=0, return_tokens_as_token_ids=True)
        else:
            body["return_token_ids"] = True
        return body

    def complete(self, request: GenRequest, cfg: SamplingConfig) -> GenResult:
        response = self._http("POST", "/completions", self.request_body(request, cfg))
        choices = response.get("choices") or []
        if len(choices) != 1:
            raise ServerError(f"{self.base_url}/completions returned {len(choices)} choices "
                              "for n=1")
        choice = choices[0]
        sent = choice.get("prompt_token_ids", response.get("prompt_token_ids"))
        if sent is not None and list(sent) != list(request.prompt_ids):
            raise ServerError("the server changed the prompt token ids (added a BOS?): got "
                              f"{list(sent)[:8]}..., sent {list(request.prompt_ids)[:8]}...")
        result = choice_result(choice, self.eos_ids, self.primary_eos)
        if len(result.output_ids) > cfg.max_new_tokens:
            raise ServerError(f"the server returned {len(result.output_ids)} tokens for "
                              f"max_tokens={cfg.max_new_tokens}")
        return result

    def generate(
        self,
        requests: Sequence[GenRequest],
        cfg: SamplingConfig,
        on_done: Callable[[int], None] | None = None,
    ) -> tuple[list[GenResult], GenStats]:
        """Generate every request; `on_done(i)` is called as request i finishes.

        GenStats stays empty: decoder utilisation is the server's business, not measured here.
        """
        results: list[GenResult | None] = [None] * len(requests)
        if not requests:
            return [], GenStats()
        _ = self.model  # resolve the served name once, before the pool starts

        failed = threading.Event()  # after one failure, queued requests are not sent

        def one(i: int) -> None:
            if failed.is_set():
                return
            try:
                results[i] = self.complete(requests[i], cfg)
            except BaseException:
                failed.set()
                raise
            if on_done is not None:
                on_done(i)

        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests)),
                                  thread_name_prefix="openai-gen")
        try:
            futures = [pool.submit(one, i) for i in range(len(requests))]
            wait(futures, return_when=FIRST_EXCEPTION)
            for f in futures:
                if f.done() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        assert all(r is not None for r in results)
        return results, GenStats()  # type: ignore[return-value]
