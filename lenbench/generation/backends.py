"""Backend dispatch: `generation.backend` -> a `Generator` (the protocol of `protocol.py`).

Every backend receives the prompt ids lenbench rendered and the same EOS ids, and reports L the
same way (docs/protocol.md, Labels), so labels from `hf`, `vllm`, `openai` and `llamacpp` differ
only by the backend's numerics and random streams. Backend modules are imported only when chosen:
vLLM and llama.cpp's server are optional extras and the OpenAI client needs a server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lenbench.configs.generation import GenerationConfig
from lenbench.generation.protocol import Generator, SamplingConfig, penalty_in_effect

BACKENDS = ("hf", "vllm", "openai", "llamacpp")

# Backend-specific `generation.*` keys that change which tokens are sampled, and so enter the
# generate stage's cache key. Throughput settings (batch_size, concurrency, tensor_parallel_size,
# gpu_memory_utilization, retries, timeouts) are deliberately absent: changing them reuses labels.
LABEL_KEYS: dict[str, tuple[str, ...]] = {
    "hf": (),
    "vllm": ("dtype", "quantization", "sampling_extra"),
    "openai": ("model", "extra_body"),
    # the GGUF file is the model's (its sha256 is in the model key) unless generation.gguf is set
    "llamacpp": ("gguf", "extra_body"),
}


@dataclass
class GenerationTarget:
    """What a backend may need of the target model; the HF weights load only if asked for."""

    path: str
    revision: str | None
    dtype: str
    tokenizer: Any
    load: Callable[[], Any]  # -> lenbench.contract.needs.TargetModel (memoised by the caller)


def backend_name(gen: GenerationConfig) -> str:
    name = gen.backend
    if name not in BACKENDS:
        raise ValueError(f"generation.backend={name!r} is unknown; use one of {list(BACKENDS)} "
                         "(generation=hf | vllm | openai | llamacpp)")
    return name


def label_key(gen: GenerationConfig) -> dict:
    """The backend-specific part of the generate stage's cache key (only keys that are set)."""
    values = {k: getattr(gen, k) for k in LABEL_KEYS[backend_name(gen)]}
    return {k: v for k, v in values.items() if v not in (None, {}, [])}


def sampling_config(gen: GenerationConfig, max_new_tokens: int | None = None) -> SamplingConfig:
    """The sampling settings of a generation config (its cap, or another one)."""
    return SamplingConfig(gen.temperature, gen.top_p, max_new_tokens or gen.max_new_tokens,
                          penalty_in_effect(gen.repetition_penalty) or 1.0)


def make_generator(gen: GenerationConfig, target: GenerationTarget,
                   eos_ids: Sequence[int]) -> Generator:
    """The generator `generation.backend` names, built from the `generation` group's schema
    (each backend's own: conf/generation/<backend>.yaml)."""
    name = backend_name(gen)
    if name == "hf":
        from lenbench.generation.hf import HFGenerator

        return HFGenerator(target.load().model, eos_ids, batch_size=int(gen.batch_size))
    if name == "vllm":
        from lenbench.generation.vllm_backend import VLLMGenerator

        return VLLMGenerator.from_config(gen, target, eos_ids)
    if name == "llamacpp":
        from lenbench.generation.llamacpp_backend import LlamaCppGenerator

        return LlamaCppGenerator.from_config(gen, target, eos_ids)
    from lenbench.generation.openai_backend import OpenAIGenerator

    return OpenAIGenerator.from_config(gen, target.tokenizer, eos_ids)
