"""OpenAI-compatible generation backend: any server with a `/v1/completions` endpoint.

Works with vLLM, SGLang, TGI and lenbench's own `toy_server`. What it relies on:

- Prompts are sent as token ids (`"prompt": [int, ...]`, accepted by vLLM, SGLang and the OpenAI
  API itself), so the server generates after exactly our rendered chat template and adds no BOS.
- Lengths come from what the server gives, never from text. In order of preference:
  1. `choices[i].token_ids` (vLLM >= 0.10.2 with `"return_token_ids": true`; toy_server);
  2. `choices[i].logprobs.tokens` written as `"token_id:N"` (vLLM with `"logprobs": 0` and
     `"return_tokens_as_token_ids": true`), enabled with `token_ids_via_logprobs: true`;
  3. `usage.completion_tokens` with `finish_reason` (llama.cpp's llama-server, and any server that
     returns no ids): exact per sample because every request asks for one sample. Those labels
     carry no `output_token_ids`.
  L counts the EOS token like the HF backend: we send our EOS ids as `stop_token_ids`; if a
  server strips the EOS from the returned ids on a `stop` finish, it is put back (`stop_reason`
  names it; null `stop_reason` means the tokenizer's EOS, as in vLLM). Whether a server's own
  count includes the EOS is probed once at start (lenbench/generation/length_counts.py) and
  recorded in the generation card; a server whose counts fit no convention, or that returns
  neither ids nor a count, is refused.
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

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lenbench.configs.generation import OpenAIGeneration
from lenbench.generation.eos_probe import EOSProbe
from lenbench.generation.http_client import JSONClient, ServerError, client_kwargs, run_pool
from lenbench.generation.length_counts import (
    DEFAULT_PROBE_MAX_TOKENS,
    DEFAULT_PROBE_PROMPTS,
    Convention,
    CountError,
    usage_result,
)
from lenbench.generation.protocol import (
    Generated,
    Generator,
    GenRequest,
    GenResult,
    GenStats,
    OnDone,
    SamplingConfig,
)

log = logging.getLogger(__name__)

# Sampling extensions that keep a vLLM/SGLang server from applying defaults of its own (vLLM reads
# generation_config.json, which may set top_k, min_p or a repetition penalty): plain softmax with
# temperature and top-p is what the HF backend samples from.
DEFAULT_EXTRA_BODY = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0}


LENGTH_SOURCES = ("auto", "token_ids", "usage")


@dataclass
class Reply:
    """One completion, whatever the endpoint: what lengths can be read from."""

    finish_reason: str | None
    count: int | None          # the server's own token count for this one sample
    text: str
    ids: list[int] | None      # the generated ids as returned (None: the server gave none)
    stop_reason: object = None


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

    With ids, `usage.completion_tokens` is not read (it sums over every choice of a request).
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


class OpenAIGenerator(EOSProbe, JSONClient, Generator):
    """Generates GenRequests on an OpenAI-compatible server.

    Subclasses for other endpoints (llama.cpp's native one) override `completion_path`,
    `request_body`, `read_reply` and `ids_result`; probing, retries, the request pool and the
    usage fallback are shared.
    """

    backend = "openai"
    completion_path = "/completions"

    def __init__(self, base_url: str, eos_ids: Sequence[int], model: str | None = None,
                 api_key: str | None = None, concurrency: int = 8, max_retries: int = 5,
                 timeout_s: float = 600.0, backoff_s: float = 1.0, max_backoff_s: float = 30.0,
                 extra_body: dict | None = None, token_ids_via_logprobs: bool = False,
                 tokenizer=None, length_source: str = "auto",
                 usage_counts_eos: bool | None = None,
                 probe_prompts: Sequence[str] = DEFAULT_PROBE_PROMPTS,
                 probe_max_tokens: int = DEFAULT_PROBE_MAX_TOKENS, api_suffix: str = "/v1"):
        if length_source not in LENGTH_SOURCES:
            raise ValueError(f"generation.length_source={length_source!r}: use one of "
                             f"{list(LENGTH_SOURCES)}")
        super().__init__(base_url, api_key=api_key, max_retries=max_retries, timeout_s=timeout_s,
                         backoff_s=backoff_s, max_backoff_s=max_backoff_s, api_suffix=api_suffix)
        self.eos_ids = sorted({int(e) for e in eos_ids})
        self.concurrency = max(1, int(concurrency))
        self.extra_body = dict(DEFAULT_EXTRA_BODY if extra_body is None else extra_body)
        self.token_ids_via_logprobs = token_ids_via_logprobs
        # the tokenizer names the primary EOS (see choice_result) and renders and counts the
        # probe; lengths never come from text
        self.tokenizer = tokenizer
        self.primary_eos = getattr(tokenizer, "eos_token_id", None)
        self.length_source = length_source
        self.usage_counts_eos = usage_counts_eos
        self.probe_prompts = list(probe_prompts)
        self.probe_max_tokens = int(probe_max_tokens)
        self.convention: Convention | None = None
        self._model = model
        self._model_lock = threading.Lock()
        self._probe_lock = threading.Lock()

    @classmethod
    def from_config(cls, gen: OpenAIGeneration, tokenizer, eos_ids: Sequence[int]
                    ) -> OpenAIGenerator:
        """Build from the `generation` group (conf/generation/openai.yaml)."""
        return cls(base_url=gen.base_url, eos_ids=eos_ids, model=gen.model,
                   tokenizer=tokenizer, **client_kwargs(gen))

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
        return {"backend": self.backend, "base_url": self.base_url, "model": self._model,
                "extra_body": self.extra_body,
                "token_ids_via_logprobs": self.token_ids_via_logprobs,
                "concurrency": self.concurrency, **self.length_provenance()}

    def length_provenance(self) -> dict:
        """Where L came from and the probe that settled the server's EOS-counting convention."""
        source = self.length_source
        return {"length_source": source,
                "output_token_ids": "as returned by the server" if source == "token_ids" else
                "empty: the server returned no token ids; L is its own count" if source == "usage"
                else None,
                "eos_probe": self.convention.as_dict() if self.convention else None}

    # -- one completion ---------------------------------------------------------------------

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
        if cfg.repetition_penalty != 1:  # vLLM's and SGLang's name for it
            body["repetition_penalty"] = cfg.repetition_penalty
        if self.token_ids_via_logprobs:
            body.update(logprobs=0, return_tokens_as_token_ids=True)
        else:
            body["return_token_ids"] = True
        return body

    def read_reply(self, response: dict, request: GenRequest) -> Reply:
        """The one choice of an n=1 response (the prompt ids checked where they are echoed)."""
        choices = response.get("choices") or []
        if len(choices) != 1:
            raise ServerError(f"{self.base_url}{self.completion_path} returned {len(choices)} "
                              "choices for n=1")
        choice = choices[0]
        sent = choice.get("prompt_token_ids", response.get("prompt_token_ids"))
        if sent is not None and list(sent) != list(request.prompt_ids):
            raise ServerError("the server changed the prompt token ids (added a BOS?): got "
                              f"{list(sent)[:8]}..., sent {list(request.prompt_ids)[:8]}...")
        ids = None
        if choice.get("token_ids") is not None:
            ids = [int(t) for t in choice["token_ids"]]
        elif (choice.get("logprobs") or {}).get("tokens") is not None:
            ids = [_parse_token_id(t) for t in choice["logprobs"]["tokens"]]
        count = (response.get("usage") or {}).get("completion_tokens")
        return Reply(choice.get("finish_reason"), count, choice.get("text") or "", ids,
                     choice.get("stop_reason"))

    def ids_result(self, reply: Reply) -> GenResult:
        """L from the returned ids (EOS put back where the server stripped it)."""
        return choice_result({"token_ids": reply.ids, "finish_reason": reply.finish_reason,
                              "stop_reason": reply.stop_reason}, self.eos_ids, self.primary_eos)

    def probe_ids_count(self, reply: Reply) -> int:
        """What the server's own count is compared with: the ids with the EOS put back."""
        return len(self.ids_result(reply).output_ids)

    def call(self, request: GenRequest, cfg: SamplingConfig) -> Reply:
        response = self._http("POST", self.completion_path, self.request_body(request, cfg))
        return self.read_reply(response, request)

    def complete(self, request: GenRequest, cfg: SamplingConfig) -> GenResult:
        self.probe()
        reply = self.call(request, cfg)
        try:
            if self.length_source == "token_ids":
                if reply.ids is None:
                    raise ServerError("the server returned no token ids for this request although "
                                      "the probe's responses had them")
                result = self.ids_result(reply)
            else:
                result = usage_result(reply.finish_reason, reply.count,
                                      bool(self.convention.counts_eos), cfg.max_new_tokens)
        except CountError as e:
            raise ServerError(str(e)) from e
        if len(result.output_ids) > cfg.max_new_tokens:
            raise ServerError(f"the server returned {len(result.output_ids)} tokens for "
                              f"max_tokens={cfg.max_new_tokens}")
        return result

    # -- generation -------------------------------------------------------------------------

    def generate(self, requests: Sequence[GenRequest], cfg: SamplingConfig,
                 on_done: OnDone | None = None) -> Generated:
        """Generate every request; `on_done(i, result)` is called as request i finishes.

        GenStats stays empty: decoder utilisation is the server's business, not measured here.
        """
        results: list[GenResult | None] = [None] * len(requests)
        if not requests:
            return [], GenStats()
        _ = self.model  # resolve the served name once, before the pool starts
        self.probe()

        run_pool(len(requests), self.concurrency, f"{self.backend}-gen",
                 lambda i: results.__setitem__(i, self.complete(requests[i], cfg)),
                 None if on_done is None else lambda i: on_done(i, results[i]))
        assert all(r is not None for r in results)
        return results, GenStats()  # type: ignore[return-value]
