"""Estimated saturation rate of a configured cluster, so load can be set relative to capacity.

The same load factor then means the same saturation for the paper's long answers and for a toy
world's short ones, which an absolute QPS cannot express.
"""

from __future__ import annotations

import math

from lenbench.sim.config import SimConfig
from lenbench.sim.timing import TimeModel, get_time_model


def capacity(cfg: SimConfig, mean_prompt: float, mean_output: float,
             time_model: TimeModel | None = None) -> dict[str, float]:
    """Requests per second each stage sustains with full batches, and the minimum of them.

    Decode: each instance runs B = min(max_num_seqs, KV capacity / average context) sequences
    whose average context is prompt + half the output; it produces B tokens per iteration, and
    a request needs mean_output - 1 decode tokens (prefill emits the first). Prefill: full
    max_prefill_tokens batches. Link: prompt KV bytes over the bandwidth.
    """
    model = time_model or get_time_model(cfg.time_model, cfg.linear_abc)
    mean_prompt = max(float(mean_prompt), 0.0)
    decode_tokens = max(float(mean_output) - 1.0, 1.0)
    avg_ctx = mean_prompt + 1.0 + decode_tokens / 2.0
    batch = int(min(cfg.max_num_seqs, max(1.0, math.floor(cfg.kv_capacity_tokens / avg_ctx))))
    iter_ms = float(model.decode_ms(batch, batch * avg_ctx))
    decode_tok_s = cfg.n_decode * batch / (iter_ms * 1e-3)
    decode_qps = decode_tok_s / decode_tokens

    per_batch = max(1.0, math.floor(cfg.max_prefill_tokens / max(mean_prompt, 1.0)))
    batch_tokens = int(per_batch * mean_prompt)
    prefill_s = model.prefill_ms(batch_tokens, per_batch * mean_prompt**2) * 1e-3
    prefill_qps = cfg.n_prefill * per_batch / prefill_s

    link_s = mean_prompt * cfg.kv_bytes_per_token / (cfg.link_bandwidth_gb_s * 1e9)
    link_qps = 1.0 / link_s if link_s > 0 else math.inf
    return {
        "decode_batch": float(batch),
        "decode_tok_s": decode_tok_s,
        "decode_qps": decode_qps,
        "prefill_qps": prefill_qps,
        "link_qps": link_qps,
        "saturation_qps": min(decode_qps, prefill_qps, link_qps),
    }


def saturation_qps(cfg: SimConfig, mean_prompt: float, mean_output: float,
                   time_model: TimeModel | None = None) -> float:
    """Estimated request rate at which the cluster saturates (see `capacity`)."""
    return capacity(cfg, mean_prompt, mean_output, time_model)["saturation_qps"]


def resolve_qps(cfg: SimConfig, mean_prompt: float, mean_output: float,
                time_model: TimeModel | None = None) -> tuple[float, float]:
    """(qps, saturation_qps): load_factor * saturation when load_factor is set, else cfg.qps."""
    sat = saturation_qps(cfg, mean_prompt, mean_output, time_model)
    if cfg.load_factor is not None:
        return cfg.load_factor * sat, sat
    assert cfg.qps is not None
    return float(cfg.qps), sat
