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

With `--model PATH` (a `from_pretrained` folder, or a preset name such as smollm2-135m-instruct)
the real model is compared instead, each variant in a fresh subprocess so that its peak memory can
be read on its own: the peak resident set (VmHWM, reset after loading the model and a warm-up)
minus the resident set before the timed run, or the peak CUDA memory allocated on a GPU.
`--threads` and `--dtype` then take comma lists (e.g. `--threads 1,2 --dtype float32,bfloat16`),
every combination is run:

    PYTHONPATH=. python benchmarks/features_throughput.py --model smollm2-135m-instruct --rows 32
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from lenbench.configs.run import FeaturesConfig
from lenbench.features.extract import extract_features
from lenbench.runtime.batching import length_batches, pad_right

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
    """The batches `extract_features` forms (the same lenbench.runtime.batching call)."""
    return length_batches((labels["prompt_token_ids"].map(len) + labels["L"]).to_numpy(),
                          batch_tokens)


def padded(labels: pd.DataFrame, batch: list[int]):
    return pad_right([list(labels.at[i, "prompt_token_ids"])
                      + list(labels.at[i, "output_token_ids"]) for i in batch])


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


def run_extract(model, labels, cfg: FeaturesConfig, device) -> tuple[float, dict]:
    with tempfile.TemporaryDirectory(prefix="lenbench_feat_") as tmp:
        sync(device)
        t0 = time.perf_counter()
        meta = extract_features(labels, model, Path(tmp), cfg, progress=False)
        sync(device)
        dt = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
    return dt, {**meta, "bytes_written": size}


def _proc_status(field: str) -> int:
    """A memory field of /proc/self/status, in bytes (Linux)."""
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE).group(1)) * 1024


def reset_peak_memory(device: torch.device) -> int:
    """Reset the peak-memory counter; return the memory in use now (bytes)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak resident set (VmHWM)
    return _proc_status("VmRSS")


def peak_memory(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return _proc_status("VmHWM")


def model_worker(args) -> int:
    """One variant (plain forward or extract_features) on a `from_pretrained` model; prints a
    JSON line with its time and peak memory."""
    device = torch.device(args.device)
    torch.set_num_threads(int(args.threads))
    dtype = getattr(torch, args.dtype)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).to(device).eval()
    labels = make_labels(args.rows, args.prompt_len, args.resp_len, model.config.vocab_size)
    cfg = FeaturesConfig(batch_tokens=args.batch_tokens)
    batches = batches_like_extract(labels, args.batch_tokens)
    # Warm-up: a short forward (installs the hidden-state hooks, first-call overheads).
    with torch.inference_mode():
        model(input_ids=torch.ones((1, 16), dtype=torch.long, device=device),
              output_hidden_states=True, use_cache=False)
    base = reset_peak_memory(device)
    cpu0 = time.process_time()
    if args.worker == "plain":
        seconds = plain_forward(model, labels, batches, device)
    else:
        seconds, _ = run_extract(model, labels, cfg, device)
    cpu_seconds = time.process_time() - cpu0
    peak = peak_memory(device)
    print(json.dumps({"variant": args.worker, "threads": int(args.threads), "dtype": args.dtype,
                      "seconds": seconds, "cpu_seconds": cpu_seconds,
                      "tokens": args.rows * (args.prompt_len + args.resp_len),
                      "n_batches": len(batches), "base_bytes": base, "peak_bytes": peak,
                      "peak_delta_bytes": peak - base}))
    return 0


def compare_model(args) -> int:
    """Run plain forward and extract_features, each in a fresh subprocess, for every thread
    count and dtype asked; print tokens/s, the time ratio and the peak memory of each."""
    rows = args.rows or 32
    prompt_len, resp_len = args.prompt_len or 128, args.resp_len or 192
    batch_tokens = args.batch_tokens or 8192
    threads = (args.threads or "1").split(",")
    default_dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    dtypes = (args.dtype or default_dtype).split(",")
    env = environment(torch.device(args.device), getattr(torch, dtypes[0]))
    env.pop("threads"), env.pop("dtype")
    print("environment: " + "  ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    tokens = rows * (prompt_len + resp_len)
    print(f"model: {args.model}; workload: {rows} rows x ({prompt_len} prompt + {resp_len} "
          f"response) = {tokens} tokens, batches of <= {batch_tokens} tokens; each variant in a "
          "fresh process; memory: the peak during the timed run, and (+) its rise over the "
          "memory in use before it (model loaded)", flush=True)
    mem_name = "peak CUDA alloc (run)" if args.device.startswith("cuda") else "peak RSS (run)"
    print(f"{'variant':<18}{'threads':>8}{'dtype':>10}{'tok/s':>10}{'time s':>9}{'cpu s':>9}"
          f"{mem_name:>26}", flush=True)
    results = []
    for th in threads:
        for dt in dtypes:
            pair = {}
            for variant in ("plain", "extract"):
                cmd = [sys.executable, __file__, "--worker", variant, "--model", args.model,
                       "--device", args.device, "--dtype", dt, "--threads", th,
                       "--rows", str(rows), "--prompt-len", str(prompt_len),
                       "--resp-len", str(resp_len), "--batch-tokens", str(batch_tokens)]
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
                if proc.returncode != 0:
                    print(proc.stderr[-3000:], file=sys.stderr)
                    return proc.returncode
                r = json.loads(proc.stdout.strip().splitlines()[-1])
                r["tok_s"] = r["tokens"] / r["seconds"]
                pair[variant] = r
                name = "plain forward" if variant == "plain" else "extract_features"
                print(f"{name:<18}{th:>8}{dt:>10}{r['tok_s']:>10,.0f}{r['seconds']:>9.2f}"
                      f"{r['cpu_seconds']:>9.2f}{r['peak_bytes'] / 2**20:>12,.0f} MiB"
                      f" (+{r['peak_delta_bytes'] / 2**20:,.0f} MiB)", flush=True)
            ratio = pair["extract"]["seconds"] / pair["plain"]["seconds"]
            mem = pair["extract"]["peak_delta_bytes"] / max(1, pair["plain"]["peak_delta_bytes"])
            print(f"  -> extract_features takes {ratio:.2f}x the plain forward's time "
                  f"({1 / ratio:.2f}x its throughput) and {mem:.2f}x its peak memory", flush=True)
            results.append({"threads": int(th), "dtype": dt, **{k: v for k, v in pair.items()},
                            "extract_over_plain_time": ratio,
                            "extract_over_plain_memory": mem})
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "model": args.model,
                                               "results": results}, indent=2))
    return 0


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
    ap.add_argument("--rows", type=int, default=None, help="default 64 (tiny: 8, --model: 32)")
    ap.add_argument("--prompt-len", type=int, default=None, help="default 128 (tiny: 16)")
    ap.add_argument("--resp-len", type=int, default=None,
                    help="default 384 (tiny: 48, --model: 192)")
    ap.add_argument("--batch-tokens", type=int, default=None,
                    help="FeaturesConfig.batch_tokens, default 8192 (tiny: 256)")
    ap.add_argument("--reps", type=int, default=2, help="timed repetitions of each (best kept)")
    ap.add_argument("--threads", default=None,
                    help="torch CPU threads (cpu default 1); with --model a comma list, e.g. 1,2")
    ap.add_argument("--model", help="a from_pretrained folder or a model preset name: compare on "
                    "this model instead (--dtype and --threads then take comma lists)")
    ap.add_argument("--worker", choices=("plain", "extract"), help=argparse.SUPPRESS)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.worker:
        return model_worker(args)
    if args.model:
        from lenbench.models.loading import model_folder

        args.model = model_folder(args.model, Path(__file__).resolve().parent.parent
                                  / ".cache/lenbench")
        return compare_model(args)

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("features_throughput: CUDA requested but torch.cuda.is_available() is False "
              f"(torch {torch.__version__})", file=sys.stderr)
        return 2
    if args.threads or device.type == "cpu":
        torch.set_num_threads(int(args.threads or 1))
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
    cfg = FeaturesConfig(batch_tokens=batch_tokens)
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
