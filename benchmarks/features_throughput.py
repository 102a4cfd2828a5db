"""Throughput of the features stage against a plain forward, on a random Llama (no download).

Builds `LlamaForCausalLM` with Llama-3.1-8B's shape (hidden 4096, 32 layers, 32 heads, 8 kv heads,
intermediate 14336, vocab 128256) and random weights, directly on the device in the chosen dtype
(no fp32 copy on the CPU first), or a tiny shape with `--tiny`. Random token rows (prompt +
response) are then run, side by side in one process, through
  (a) a plain `model(input_ids, attention_mask, output_hidden_states=True, use_cache=False)` over
      the same batches that (b) forms, and
  (b) `lenbench.features.extract.extract_features` (entropy over the full vocabulary, static
      poolings for every role, step states; written to a temporary folder),
and tokens/s of both and their ratio are reported. Run:

    PYTHONPATH=. python benchmarks/features_throughput.py [--device cuda] [--json out.json]
    PYTHONPATH=. python benchmarks/features_throughput.py --tiny --device cpu
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from lenbench.batching import length_batches, pad_right
from lenbench.features.extract import FeatureConfig, extract_features

LLAMA_31_8B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256}
TINY = {"hidden_size": 64, "num_hidden_layers": 8, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000}


@contextmanager
def default_dtype(dtype: torch.dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def build_model(shape: dict, device: torch.device, dtype: torch.dtype, max_pos: int):
    cfg = LlamaConfig(**shape, max_position_embeddings=max(max_pos, 2048), bos_token_id=None,
                      pad_token_id=0, eos_token_id=None)
    torch.manual_seed(0)
    # Parameters are created on `device` in `dtype` (no fp32 model on the CPU first).
    with torch.device(device), default_dtype(dtype):
        model = LlamaForCausalLM(cfg)
    return model.eval()


def make_labels(n_rows: int, prompt_len: int, resp_len: int, vocab: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_rows):
        rows.append({"prompt_id": i,
                     "prompt_token_ids": rng.integers(1, vocab, prompt_len).tolist(),
                     "output_token_ids": rng.integers(1, vocab, resp_len).tolist(),
                     "L": resp_len})
    return pd.DataFrame(rows)


def batches_like_extract(labels: pd.DataFrame, batch_tokens: int) -> list[list[int]]:
    """The batches `extract_features` forms (the same lenbench.batching call)."""
    return length_batches((labels["prompt_token_ids"].map(len) + labels["L"]).to_numpy(),
                          batch_tokens)


def padded(labels: pd.DataFrame, batch: list[int]):
    return pad_right([list(labels.at[i, "prompt_token_ids"]) + list(labels.at[i, "output_token_ids"])
                      for i in batch])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain_forward(model, labels, batches, device) -> float:
    """Seconds for one plain forward over every batch (host->device copy included, as in (b))."""
    sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for batch in batches:
            ids, mask = padded(labels, batch)
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                        output_hidden_states=True, use_cache=False)
            del out
    sync(device)
    return time.perf_counter() - t0


def run_extract(model, labels, cfg: FeatureConfig, device) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory(prefix="lenbench_feat_") as tmp:
        sync(device)
        t0 = time.perf_counter()
        meta = extract_features(labels, model, Path(tmp), cfg, progress=False)
        sync(device)
        dt = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return dt, {**meta, "bytes_written": size}


def environment(device: torch.device, dtype: torch.dtype) -> dict:
    env = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "numpy": np.__version__,
           "pandas": pd.__version__, "device": str(device), "dtype": str(dtype).split(".")[-1],
           "threads": torch.get_num_threads(),
           "cpu": platform.processor() or platform.machine()}
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
        env["gpu_mem_gib"] = round(torch.cuda.get_device_properties(device).total_memory / 2**30, 1)
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--tiny", action="store_true", help="tiny model and sizes (CPU smoke test)")
    ap.add_argument("--rows", type=int, default=None, help="default 64 (tiny: 8)")
    ap.add_argument("--prompt-len", type=int, default=None, help="default 128 (tiny: 16)")
    ap.add_argument("--resp-len", type=int, default=None, help="default 384 (tiny: 48)")
    ap.add_argument("--batch-tokens", type=int, default=None,
                    help="FeatureConfig.batch_tokens, default 8192 (tiny: 256)")
    ap.add_argument("--reps", type=int, default=2, help="timed repetitions of each (best kept)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (cpu default 1)")
    ap.add_argument("--json")
    args = ap.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("features_throughput: CUDA requested but torch.cuda.is_available() is False "
              f"(torch {torch.__version__})", file=sys.stderr)
        return 2
    if args.threads or device.type == "cpu":
        torch.set_num_threads(args.threads or 1)
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    shape = TINY if args.tiny else LLAMA_31_8B
    rows = args.rows or (8 if args.tiny else 64)
    prompt_len = args.prompt_len or (16 if args.tiny else 128)
    resp_len = args.resp_len or (48 if args.tiny else 384)
    batch_tokens = args.batch_tokens or (256 if args.tiny else 8192)

    env = environment(device, dtype)
    print("environment: " + "  ".join(f"{k}={v}" for k, v in env.items()), flush=True)

    t0 = time.perf_counter()
    model = build_model(shape, device, dtype, prompt_len + resp_len)
    sync(device)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in model.parameters())
    p = next(model.parameters())
    print(f"model: random Llama {'tiny' if args.tiny else '3.1-8B shape'} "
          f"({n_params / 1e6:,.1f}M params, {p.dtype}, on {p.device}), built in {build_s:.1f} s",
          flush=True)

    labels = make_labels(rows, prompt_len, resp_len, shape["vocab_size"])
    cfg = FeatureConfig(batch_tokens=batch_tokens)
    batches = batches_like_extract(labels, batch_tokens)
    tokens = rows * (prompt_len + resp_len)
    print(f"workload: {rows} rows x ({prompt_len} prompt + {resp_len} response) = {tokens} tokens,"
          f" {len(batches)} batches of <= {batch_tokens} tokens; features: roles {cfg.roles}, "
          f"poolings {cfg.poolings}, step roles {cfg.step_roles} x {cfg.step_poolings}",
          flush=True)

    # Warm-up (kernels, allocator, first-call overheads) on one batch, then the timed runs.
    plain_forward(model, labels, batches[:1], device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    plain_s, extract_s = [], []
    for _ in range(max(1, args.reps)):
        plain_s.append(plain_forward(model, labels, batches, device))
        dt, meta = run_extract(model, labels, cfg, device)
        extract_s.append(dt)
    plain, extract = min(plain_s), min(extract_s)
    result = {
        "tokens": tokens, "rows": rows, "prompt_len": prompt_len, "resp_len": resp_len,
        "batch_tokens": batch_tokens, "n_batches": len(batches), "params": n_params,
        "build_s": build_s, "plain_s": plain_s, "extract_s": extract_s,
        "plain_tok_s": tokens / plain, "extract_tok_s": tokens / extract,
        "extract_over_plain_time": extract / plain,
        "feature_bytes": meta["bytes_written"], "n_steps": meta["n_steps"],
    }
    if device.type == "cuda":
        result["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    print(f"plain forward (hidden states): {result['plain_tok_s']:12,.0f} tok/s "
          f"(best of {len(plain_s)}: {plain:.3f} s)")
    print(f"extract_features:              {result['extract_tok_s']:12,.0f} tok/s "
          f"(best of {len(extract_s)}: {extract:.3f} s, "
          f"{result['feature_bytes'] / 2**20:.1f} MiB written)")
    ratio = result["extract_over_plain_time"]
    mem = f"; peak GPU memory {result['peak_mem_gib']:.1f} GiB" if "peak_mem_gib" in result else ""
    print(f"ratio: extract_features takes {ratio:.2f}x the plain forward's time "
          f"({1 / ratio:.3f} of its throughput){mem}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "result": result}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
