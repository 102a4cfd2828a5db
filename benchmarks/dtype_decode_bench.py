"""Decode-step speed of bfloat16 against float32 on this CPU, side by side in one process.

Plain Hugging Face decode steps (KV cache, one token per row), not lenbench's generator: a
measure of the dtype's cost on this CPU, not of the generate stage.

Whether bfloat16 labels are worth making depends on the CPU: with AVX-512 BF16 or AMX its matrix
products run natively, without them PyTorch emulates them. This loads one model twice (float32 and
bfloat16), prefills the same random batch, then times decode steps (one token per row, KV cache
on) of the two in alternating rounds, so that a machine's noise falls on both alike, and reports
ms per step, tokens/s and the ratio. Run:

    PYTHONPATH=. python benchmarks/dtype_decode_bench.py --model smollm2-135m-instruct
    PYTHONPATH=. python benchmarks/dtype_decode_bench.py --model PATH --batch 24 --threads 2

`--model` is a `from_pretrained` folder or a model preset name (converted on first use).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

from lenbench.generation.hf import cache_kwarg
from lenbench.models.build_info import cpu_description
from lenbench.models.loading import model_folder
from lenbench.worlds.pack import CPU_FLAGS

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@torch.inference_mode()
def time_steps(model, batch: torch.Tensor, steps: int) -> float:
    """Seconds per decode step after a prefill of `batch`."""
    arg = cache_kwarg(model)
    out = model(batch, use_cache=True)
    cache, nxt = out[arg], out.logits[:, -1:].argmax(-1)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = model(nxt, use_cache=True, **{arg: cache})
        cache, nxt = out[arg], out.logits[:, -1:].argmax(-1)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--steps", type=int, default=16, help="decode steps per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    folder = model_folder(args.model, Path(__file__).resolve().parent.parent / ".cache/lenbench")
    models = {name: AutoModelForCausalLM.from_pretrained(folder, dtype=dt).eval()
              for name, dt in DTYPES.items()}
    vocab = models["float32"].config.vocab_size
    batch = torch.randint(100, vocab, (args.batch, args.prompt_tokens))
    for m in models.values():  # warm-up
        time_steps(m, batch, 2)
    seconds: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(args.rounds):
        for name, m in models.items():
            seconds[name].append(time_steps(m, batch, args.steps))
    best = {name: min(s) for name, s in seconds.items()}
    report = {
        "model": str(folder), "batch": args.batch, "threads": args.threads,
        "cpu": cpu_description(CPU_FLAGS),
        "torch": torch.__version__,
        "ms_per_step": {n: round(1000 * s, 1) for n, s in best.items()},
        "tokens_per_s": {n: round(args.batch / s, 1) for n, s in best.items()},
        "bfloat16_over_float32_time": round(best["bfloat16"] / best["float32"], 2),
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
