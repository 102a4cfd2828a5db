"""OUTLETS decode-step overhead at real model sizes, with random weights (no download needed).

For each target shape (Llama-3.2-1B, Llama-3.1-8B, Qwen3-30B-A3B's SpecForge draft config) this
builds the draft backbone and length head, and times one decode step at batch 1 and 64 with
`--context` cached positions per row: fc + the gated draft layer ("backbone"), the draft LM head,
and the length head, each separately (median of repetitions, CUDA synchronised). All sizes run in
one process, so the head/backbone ratios compare like with like. Run:

    python benchmarks/outlets_overhead.py [--device cuda] [--dtype bfloat16] [--json out.json]

The paper reports 1.7 ms (backbone) and 0.7 ms (head) per step for H=2048 on its GPUs.
"""

from __future__ import annotations

import argparse
import json
import platform

import torch

from lenbench.outlets.modeling import DraftConfig, DraftModel
from lenbench.outlets.overhead import decode_step_ms

SHAPES = {  # hidden, heads, kv heads, head_dim, intermediate, target vocab (SpecForge configs)
    "llama-3.2-1b": (2048, 32, 8, 64, 8192, 128256),
    "llama-3.1-8b": (4096, 32, 8, 128, 14336, 128256),
    "qwen3-30b-a3b": (2048, 32, 4, 128, 12288, 151936),
}


def build(shape, device: str, dtype: torch.dtype) -> DraftModel:
    h, heads, kv, hd, inter, vocab = shape
    cfg = DraftConfig(hidden_size=h, target_hidden_size=h, num_heads=heads, num_kv_heads=kv,
                      head_dim=hd, intermediate_size=inter, vocab_size=vocab,
                      draft_vocab_size=32000)
    torch.manual_seed(0)
    d2t = torch.zeros(32000, dtype=torch.long)
    t2d = torch.zeros(vocab, dtype=torch.bool)
    t2d[:32000] = True
    return DraftModel(cfg, torch.empty(vocab, h).normal_(0, 0.02), d2t, t2d).to(device, dtype)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16" if torch.cuda.is_available() else "float32")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--json")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    rows = []
    for name in args.shapes.split(","):
        draft = build(SHAPES[name], args.device, dtype)
        counts = draft.parameter_counts()
        for b in (int(x) for x in args.batches.split(",")):
            t = decode_step_ms(draft, b, args.context, args.reps, dtype)
            rows.append({"shape": name, **counts, **t,
                         "head_over_backbone": t["length_head_ms"] / t["backbone_ms"]})
            print(f"{name:14s} batch {b:3d}: backbone {t['backbone_ms']:8.3f} ms  "
                  f"draft lm head {t['draft_lm_head_ms']:8.3f} ms  length head "
                  f"{t['length_head_ms']:7.3f} ms  "
                  f"(head/backbone {rows[-1]['head_over_backbone']:.3f})"
                  f"  params: backbone {counts['backbone'] / 1e6:.1f}M, "
                  f"head {counts['length_head'] / 1e6:.2f}M", flush=True)
        del draft
    env = {"device": args.device, "dtype": args.dtype, "context": args.context,
           "torch": torch.__version__, "machine": platform.processor() or platform.machine(),
           "threads": torch.get_num_threads(),
           "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": env, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
