"""llama.cpp backend: labels from `llama-server` on the model preset's own GGUF file.

lenbench starts llama-server on the GGUF the model preset names (found as lenbench/models/gguf.py
finds it; its sha256 must be the one the converted transformers folder was made from), or
connects to a running one (`generation.url`), and stops a server it started when the generate
stage ends. Prompts go to the native `/completion` endpoint as token ids with
`"return_tokens": true`, so L is counted from the generated ids (EOS included, as in the hf
backend); `tokens_predicted` is checked against them by the same EOS probe as the openai backend.
Requests, retries, the probe and shard resume are the openai backend's (this class only speaks
the native endpoint), so a run whose server died resumes at the next unfinished shard.

The labels come from llama.cpp's quantised kernels (e.g. Q4_1 weights with 8-bit activations in
the matrix products); features come from transformers on the converted, dequantised folder. Both
read the same weights, so greedy labels agree with the hf backend's on most tokens but not all:
`python -m lenbench.generation.parity` measures how often.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenbench.configs.generation import LlamaCppGeneration
from lenbench.configs.model import GGUFFiles
from lenbench.generation.http_client import ServerError, client_kwargs
from lenbench.generation.llamacpp_server import (
    LlamaServer,
    LlamaServerError,
    binary_version,
    find_binary,
    get_json,
    package_build_info,
    wait_healthy,
)
from lenbench.generation.openai_backend import OpenAIGenerator, Reply, request_seed
from lenbench.generation.protocol import (
    Generated,
    GenRequest,
    GenResult,
    OnDone,
    SamplingConfig,
)

log = logging.getLogger(__name__)

# llama.cpp's sampler chain reduced to plain softmax with temperature and top-p (what the hf
# backend samples from): its defaults (top_k 40, min_p 0.05, ...) are switched off.
DEFAULT_EXTRA_BODY = {"top_k": 0, "min_p": 0.0, "typical_p": 1.0, "repeat_penalty": 1.0,
                      "presence_penalty": 0.0, "frequency_penalty": 0.0, "dry_multiplier": 0.0,
                      "xtc_probability": 0.0, "mirostat": 0, "top_n_sigma": -1.0}
FINISH = {"eos": "stop", "limit": "length"}
PROVENANCE = ("labels: llama.cpp's quantised kernels on the GGUF file; features: transformers "
              "on the converted (dequantised) folder of the same file")


def locate_model_gguf(gen: LlamaCppGeneration, target_path: str | None
                      ) -> tuple[list[Path], str, dict]:
    """(GGUF parts, sha256, source record) for `generation.gguf` or the model preset's GGUF,
    checked against the sha256 the converted folder's model card records."""
    from lenbench.models.gguf import locate_gguf, read_card, sha256_of

    explicit = gen.gguf
    # the model preset's `gguf` block, as the schema's interpolation copies it: plain values
    preset = gen.model_gguf if isinstance(gen.model_gguf, GGUFFiles) else \
        GGUFFiles(**(gen.model_gguf or {}))
    path = explicit or gen.model_path
    if not path and not preset.files:
        raise ValueError("generation=llamacpp needs a GGUF file: a GGUF model preset (e.g. "
                         "model=smollm2-135m-instruct) or generation.gguf=FILE.gguf")
    parts = locate_gguf(path, () if explicit else preset.files, preset.install)
    sha = sha256_of(parts.paths)
    card = read_card(target_path) if target_path else None
    converted = (card or {}).get("gguf_sha256")
    if converted and converted != sha and not explicit:
        raise ValueError(f"{parts.name}: sha256 {sha} differs from the converted model's "
                         f"{converted}; labels and features would come from different weights")
    record = {"gguf_file": parts.name, "gguf_sha256": sha, "gguf_packages": parts.packages,
              "gguf_from": "generation.gguf" if explicit else "the model preset",
              "features_from_same_gguf": converted == sha if converted else None}
    return list(parts.paths), sha, record


class LlamaCppGenerator(OpenAIGenerator):
    """GenRequests on llama-server's native `/completion` endpoint (ids returned)."""

    backend = "llamacpp"
    completion_path = "/completion"

    def __init__(self, base_url: str, eos_ids: Sequence[int], *, server: LlamaServer | None = None,
                 settings: dict | None = None, source: dict | None = None,
                 cache_prompt: bool = True, temp_dir: tempfile.TemporaryDirectory | None = None,
                 **kwargs: Any):
        kwargs.setdefault("extra_body", None)
        if kwargs["extra_body"] is None:
            kwargs["extra_body"] = dict(DEFAULT_EXTRA_BODY)
        super().__init__(base_url, eos_ids, model="llama-server", api_suffix="", **kwargs)
        self.server = server
        self.settings = dict(settings or {})
        self.source = dict(source or {})
        self.cache_prompt = bool(cache_prompt)
        self._temp_dir = temp_dir
        status, props = get_json(f"{self.base_url}/props", timeout=30)
        self.props = props if status == 200 else {}
        self.version = binary_version(server.binary) if server is not None else None

    @classmethod
    def from_config(cls, gen: LlamaCppGeneration, target: Any, eos_ids: Sequence[int]
                    ) -> LlamaCppGenerator:
        """Build from conf/generation/llamacpp.yaml: start llama-server unless `url` is set."""
        paths, _, source = locate_model_gguf(gen, getattr(target, "path", None))
        slots = int(gen.slots or 1)
        threads = int(gen.threads or 1)
        ctx = int(gen.ctx_size or slots * (int(gen.max_prompt_tokens) + int(gen.max_new_tokens)))
        server_args = list(gen.server_args or [])
        settings = {"slots": slots, "threads": threads, "ctx_size": ctx,
                    "server_args": server_args}
        kwargs = client_kwargs(gen, concurrency=slots)
        timeout = float(gen.startup_timeout_s or 120)
        if gen.url:
            url = str(gen.url).rstrip("/")
            wait_healthy(url, timeout)
            return cls(url, eos_ids, settings={**settings, "started_by_lenbench": False},
                       source=source, cache_prompt=gen.cache_prompt,
                       tokenizer=target.tokenizer, **kwargs)
        binary = find_binary(gen.binary)
        temp = None
        gguf = paths[0]
        if len(paths) > 1:  # chunk packages: llama-server reads one file
            from lenbench.models.gguf import join_parts

            temp = tempfile.TemporaryDirectory(prefix="lenbench-gguf-")
            gguf = join_parts(tuple(paths), Path(temp.name) / source["gguf_file"])
        server = LlamaServer(binary, gguf, slots=slots, threads=threads, ctx_size=ctx,
                             extra_args=server_args, startup_timeout_s=timeout)
        return cls(server.url, eos_ids, server=server, settings={
            **settings, "started_by_lenbench": True, "binary": str(binary)}, source=source,
            cache_prompt=gen.cache_prompt, temp_dir=temp, tokenizer=target.tokenizer,
            **kwargs)

    def generate(self, requests: Sequence[GenRequest], cfg: SamplingConfig,
                 on_done: OnDone | None = None) -> Generated:
        """The openai backend's requests; when the server this generator started has died, its
        end (a signal named, with its likely cause) replaces the failed request's error."""
        try:
            return super().generate(requests, cfg, on_done)
        except ServerError as exc:
            died = self.server.died() if self.server is not None else None
            if died is not None:
                raise LlamaServerError(died) from exc
            raise

    def close(self) -> None:
        """Stop the server this generator started (a connected one is left running)."""
        if self.server is not None:
            self.server.stop()
        if self._temp_dir is not None:
            self._temp_dir.cleanup()
            self._temp_dir = None

    def describe(self) -> dict:
        props = self.props
        return {"backend": self.backend, "url": self.base_url, **self.source, **self.settings,
                "server_build": {"props_build_info": props.get("build_info"),
                                 "version": self.version, "package": package_build_info(),
                                 "total_slots": props.get("total_slots"),
                                 "model_path": props.get("model_path")},
                "extra_body": self.extra_body, "cache_prompt": self.cache_prompt,
                "concurrency": self.concurrency, "provenance": PROVENANCE,
                **self.length_provenance()}

    def request_body(self, request: GenRequest, cfg: SamplingConfig) -> dict:
        body = {"prompt": list(request.prompt_ids), "n_predict": cfg.max_new_tokens,
                "temperature": cfg.temperature,
                "top_p": cfg.top_p if cfg.temperature > 0 else 1.0,
                "seed": request_seed(request.seed), "stream": False, "return_tokens": True,
                "cache_prompt": self.cache_prompt, "n_probs": 0, **self.extra_body}
        if cfg.repetition_penalty != 1:  # over the whole context (-1), as the hf backend
            body.update(repeat_penalty=cfg.repetition_penalty, repeat_last_n=-1)
        return body

    def read_reply(self, response: dict, request: GenRequest) -> Reply:
        if response.get("truncated"):
            raise ServerError("llama-server truncated the prompt to fit its context: raise "
                              "generation.ctx_size (each slot gets ctx_size / slots)")
        stop_type = response.get("stop_type")
        if stop_type is None:  # older servers: booleans
            stop_type = "eos" if response.get("stopped_eos") else \
                "limit" if response.get("stopped_limit") else "none"
        if stop_type not in FINISH:
            raise ServerError(f"llama-server stopped with stop_type {stop_type!r} (expected "
                              "'eos' or 'limit'); do not configure stop words for labels")
        ids = response.get("tokens")
        if self.server is not None and not self.server.alive():
            raise ServerError("llama-server exited")
        return Reply(FINISH[stop_type], response.get("tokens_predicted"),
                     response.get("content") or "",
                     [int(t) for t in ids] if ids is not None else None)

    def ids_result(self, reply: Reply) -> GenResult:
        """L from the returned ids: they end at lenbench's first EOS id (a stop id that
        llama.cpp does not know as end-of-generation, e.g. a preset's stop string, ends the
        response there), and a stop must end on one of lenbench's EOS ids."""
        ids = list(reply.ids or [])
        eos = set(self.eos_ids)
        first = next((k for k, t in enumerate(ids) if t in eos), None)
        if first is not None:
            return GenResult(ids[:first + 1], "stop")
        if reply.finish_reason == "stop":
            last = ids[-1] if ids else None
            raise ServerError(f"llama-server stopped on token {last!r}, which is not one of the "
                              f"model's EOS ids {self.eos_ids}; L cannot be counted as the hf "
                              "backend counts it")
        return GenResult(ids, "length")

    def probe_ids_count(self, reply: Reply) -> int:
        """What the server's own count is compared with: the ids exactly as returned."""
        return len(reply.ids or [])
