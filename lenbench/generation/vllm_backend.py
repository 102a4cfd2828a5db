"""vLLM offline backend: `LLM.generate` on our own rendered prompt ids, one seeded sample each.

- Prompts go in as token ids (`{"prompt_token_ids": [...]}`, a `TokensPrompt`), so vLLM decodes
  after exactly the chat template lenbench rendered and recorded; it adds no BOS or template.
- Each GenRequest is one vLLM request with `n=1` and its own `seed` (derived from the request's
  seed tuple as the OpenAI backend derives it), so a row's tokens do not depend on which other
  samples were asked for together. vLLM's outputs still depend slightly on batch composition
  (floating point), so reruns are close, not bit-identical, except at temperature 0 in most cases.
- Our EOS ids are passed as `stop_token_ids`, so vLLM stops on exactly the ids the HF backend
  stops on. vLLM keeps a stop token in `CompletionOutput.token_ids`; `request_output_results`
  puts it back if a version ever strips it, so L counts the EOS as the protocol requires
  (docs/protocol.md).
- Tensor parallelism is vLLM's (`tensor_parallel_size`); data parallelism is lenbench's shard
  workers (`generation.workers` / `generation.worker`, one process per GPU group).

vLLM is an optional extra: `pip install -e ".[vllm]"` on a CUDA machine.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from lenbench.configs.generation import VLLMGeneration
from lenbench.generation.openai_backend import request_seed
from lenbench.generation.protocol import (
    Generated,
    Generator,
    GenRequest,
    GenResult,
    GenStats,
    OnDone,
    SamplingConfig,
)

INSTALL_HINT = ('generation.backend=vllm needs the optional vLLM extra: pip install -e ".[vllm]" '
                "(a CUDA machine; vLLM brings its own torch build). Or use generation=hf, or "
                "generation=openai against a running `vllm serve`.")

# Engine arguments that do not change which tokens are sampled (so not in the stage's cache key).
ENGINE_KEYS = ("tensor_parallel_size", "gpu_memory_utilization", "max_model_len", "max_num_seqs",
               "enforce_eager", "enable_prefix_caching", "swap_space", "trust_remote_code",
               "download_dir")


def import_vllm() -> Any:
    """The `vllm` module, or an ImportError that says how to install it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc})") from exc


def sampling_kwargs(request: GenRequest, cfg: SamplingConfig, eos_ids: Sequence[int],
                    extra: dict | None = None) -> dict:
    """Keyword arguments of one request's `vllm.SamplingParams`.

    `extra` (generation.sampling_extra) may add vLLM options such as top_k; the defaults of
    SamplingParams already disable top_k, min_p and penalties, matching the HF backend.
    """
    return {"n": 1, "temperature": float(cfg.temperature), "top_p": float(cfg.top_p),
            "max_tokens": int(cfg.max_new_tokens), "seed": request_seed(request.seed),
            "stop_token_ids": sorted({int(e) for e in eos_ids}),
            **({"repetition_penalty": float(cfg.repetition_penalty)}
               if cfg.repetition_penalty != 1 else {}), **(extra or {})}


def completion_result(completion: Any, eos_ids: Sequence[int],
                      default_eos: int | None = None) -> GenResult:
    """One vLLM `CompletionOutput` -> GenResult, L counted the way the HF backend counts it.

    A `stop` finish must end with an EOS id. vLLM keeps stop tokens in `token_ids`; should one be
    missing, it is put back from `stop_reason` (the stop token id) or, when `stop_reason` is None
    (vLLM's mark for the tokenizer's own EOS), from `default_eos`. A stop on anything else (a
    stop string) cannot be counted as a length and is refused.
    """
    ids = [int(t) for t in completion.token_ids]
    eos = {int(e) for e in eos_ids}
    reason = completion.finish_reason
    if reason == "stop":
        if not ids or ids[-1] not in eos:
            stop = getattr(completion, "stop_reason", None)
            if isinstance(stop, int) and stop in eos:
                ids.append(stop)
            elif stop is None and default_eos is not None and int(default_eos) in eos:
                ids.append(int(default_eos))
            else:
                raise ValueError(f"vLLM finished with 'stop' without an EOS among the output ids "
                                 f"(stop_reason {stop!r}, eos {sorted(eos)}): L cannot be "
                                 "counted; do not pass stop strings to the vllm backend")
        return GenResult(ids, "stop")
    if reason == "length":
        return GenResult(ids, "length")  # right-censored: the limit was reached without EOS
    raise ValueError(f"vLLM returned finish_reason {reason!r} (expected 'stop' or 'length'); "
                     "an aborted request is not a label")


def request_output_results(outputs: Sequence[Any], n_requests: int, eos_ids: Sequence[int],
                           default_eos: int | None = None) -> tuple[list[GenResult], GenStats]:
    """vLLM `RequestOutput`s (one per request, in request order) -> GenResults and stats.

    vLLM decodes only live sequences, so every decoded slot is a real token (fraction 1.0).
    """
    if len(outputs) != n_requests:
        raise ValueError(f"vLLM returned {len(outputs)} outputs for {n_requests} requests")
    results = []
    for out in outputs:
        if len(out.outputs) != 1:
            raise ValueError(f"request {getattr(out, 'request_id', '?')}: {len(out.outputs)} "
                             "completions; the vllm backend sends n=1 per request")
        results.append(completion_result(out.outputs[0], eos_ids, default_eos))
    n_tokens = sum(len(r.output_ids) for r in results)
    stats = GenStats(decode_steps=max((len(r.output_ids) for r in results), default=0),
                     decoded_slots=n_tokens, real_tokens=n_tokens)
    return results, stats


class VLLMGenerator(Generator):
    """Generates GenRequests with vLLM's offline engine."""

    def __init__(self, model: str, eos_ids: Sequence[int], *, revision: str | None = None,
                 dtype: str = "auto", tensor_parallel_size: int = 1, seed: int = 0,
                 max_model_len: int | None = None, engine_kwargs: dict | None = None,
                 sampling_extra: dict | None = None, default_eos: int | None = None,
                 vllm_module: Any = None):
        self.eos_ids = sorted({int(e) for e in eos_ids})
        self.default_eos = default_eos
        self.sampling_extra = dict(sampling_extra or {})
        # `vllm_module` lets tests stand in a fake vllm (LLM, SamplingParams) for the real one
        self._vllm = vllm_module if vllm_module is not None else import_vllm()
        self.engine_args = {"model": model, "tokenizer": model, "revision": revision,
                            "tokenizer_revision": revision, "dtype": dtype,
                            "tensor_parallel_size": int(tensor_parallel_size), "seed": int(seed),
                            **({"max_model_len": int(max_model_len)} if max_model_len else {}),
                            **(engine_kwargs or {})}
        self.llm = self._vllm.LLM(**self.engine_args)

    @classmethod
    def from_config(cls, gen: VLLMGeneration, target: Any, eos_ids: Sequence[int],
                    vllm_module: Any = None) -> VLLMGenerator:
        """Build from the `generation` group (conf/generation/vllm.yaml) and the target's identity
        (`path`, `revision`, `dtype`, `tokenizer`)."""
        max_model_len = gen.max_model_len or \
            int(gen.max_prompt_tokens) + int(gen.max_new_tokens)
        engine = {k: getattr(gen, k) for k in ENGINE_KEYS
                  if getattr(gen, k, None) is not None and k != "max_model_len"}
        engine.update(gen.engine_kwargs or {})
        tp = engine.pop("tensor_parallel_size", 1)
        return cls(target.path, eos_ids, revision=target.revision,
                   dtype=gen.dtype or target.dtype or "auto",
                   tensor_parallel_size=tp, seed=int(gen.seed),
                   max_model_len=max_model_len, engine_kwargs=engine,
                   sampling_extra=dict(gen.sampling_extra or {}),
                   default_eos=getattr(target.tokenizer, "eos_token_id", None),
                   vllm_module=vllm_module)

    def describe(self) -> dict:
        """Provenance recorded in the generation card."""
        return {"backend": "vllm", "vllm_version": getattr(self._vllm, "__version__", None),
                **{k: v for k, v in self.engine_args.items() if k not in ("model", "tokenizer")},
                "sampling_extra": self.sampling_extra}

    def generate(self, requests: Sequence[GenRequest], cfg: SamplingConfig,
                 on_done: OnDone | None = None) -> Generated:
        """Generate every request in one `LLM.generate` call (vLLM batches continuously)."""
        if not requests:
            return [], GenStats()
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        params = [self._vllm.SamplingParams(**sampling_kwargs(r, cfg, self.eos_ids,
                                                              self.sampling_extra))
                  for r in requests]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        results, stats = request_output_results(outputs, len(requests), self.eos_ids,
                                                self.default_eos)
        if on_done is not None:
            for i in range(len(requests)):
                on_done(i, results[i])
        return results, stats
