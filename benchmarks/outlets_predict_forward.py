"""The target's pass in OUTLETS prediction, with and without the output head, side by side.

OUTLETS predicts from the target's hidden states alone; only training with the SD loss needs the
target's logits (the teacher). `lenbench.outlets.batches.target_forward(..., with_head=False)` runs
the model without its head. This measures what that saves on a model of SmolLM2-135M's shape
(random weights, no download; vocabulary 49,152, so the logits of a 16k-token batch are 3.2 GB in
float32) and checks that the fused features are the same. Run:

    PYTHONPATH=. python benchmarks/outlets_predict_forward.py [--rows 8 --tokens 1024 --repeats 2]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lenbench.models.build_info import CPU_FLAGS, cpu_description
from lenbench.outlets.batches import Batch, target_forward

SMOLLM2_135M = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "intermediate_size": 1536, "vocab_size": 49152,
                "tie_word_embeddings": True}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=1024, help="tokens per row")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    model = LlamaForCausalLM(LlamaConfig(**SMOLLM2_135M)).eval()
    ids = torch.randint(0, SMOLLM2_135M["vocab_size"], (args.rows, args.tokens))
    valid = torch.ones_like(ids, dtype=torch.bool)
    n = torch.full((args.rows,), args.tokens)
    batch = Batch(ids, valid, n, torch.zeros_like(n))
    n_tokens = args.rows * args.tokens
    seconds = {True: [], False: []}
    fused = {}
    with torch.no_grad():
        target_forward(model, Batch(ids[:1, :64], valid[:1, :64], n[:1], n[:1]))  # warm-up
        for _ in range(args.repeats):  # alternated, so that a busy machine slows both alike
            for with_head in (True, False):
                t0 = time.perf_counter()
                fused[with_head], _ = target_forward(model, batch, with_head=with_head)
                seconds[with_head].append(time.perf_counter() - t0)
    cpu = cpu_description(CPU_FLAGS)
    print(f"CPU: {cpu['name']} ({', '.join(cpu['flags'])}); torch {torch.__version__}; "
          f"{args.threads} thread(s); float32; {args.rows} rows x {args.tokens} tokens")
    print(f"{'target pass':<26}{'best s':>8}{'tokens/s':>10}")
    for with_head, label in ((True, "with the output head"), (False, "hidden states only")):
        best = min(seconds[with_head])
        print(f"{label:<26}{best:8.2f}{n_tokens / best:10.0f}")
    print(f"speed-up without the head: {min(seconds[True]) / min(seconds[False]):.2f}x; "
          f"fused features equal: {torch.equal(fused[True], fused[False])}")


if __name__ == "__main__":
    main()
