"""One OUTLETS training step (TTT unroll, drafting and length losses, backward, AdamW) in float32
against bfloat16 autocast (`predictor.train.amp`), side by side in one process on this CPU.

Why: training OUTLETS and its ablations to convergence on a real world costs hours on a CPU, and
whether bfloat16 pays depends on the instruction set (fast with AMX or AVX-512 BF16, emulated
without). The draft is randomly initialised at a target's real shape (SmolLM2-135M's by default),
fed random fused features and a random teacher: the cost of a step does not depend on the values.
Also printed: the rate of a plain matmul at the draft's MLP shape in both dtypes, the ceiling that
bfloat16 can lift. Run:

    python benchmarks/outlets_train_step.py [--hidden 576 --heads 9 --kv-heads 3
        --intermediate 1536 --draft-vocab 2048 --batch 2 --tokens 512 --ttt 3 --threads 1]
"""

from __future__ import annotations

import argparse
import time

import torch

from lenbench.models.build_info import CPU_FLAGS, cpu_description
from lenbench.outlets.batches import autocast
from lenbench.outlets.losses import Teacher, length_loss, sd_loss
from lenbench.outlets.modeling import DraftConfig, DraftModel


def matmul_gflops(rows: int, inner: int, cols: int, dtype: torch.dtype, repeats: int = 30
                  ) -> float:
    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, cols, dtype=dtype)
    for _ in range(3):
        a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * rows * inner * cols * repeats / (time.perf_counter() - started) / 1e9


def step_seconds(cfg: DraftConfig, amp: str, batch: int, tokens: int, ttt: int,
                 repeats: int) -> tuple[float, float]:
    """(seconds a step, the last step's loss) of a fresh draft trained under `amp`."""
    torch.manual_seed(0)
    emb = torch.randn(cfg.vocab_size, cfg.hidden_size) * 0.02
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    t2d[: cfg.draft_vocab_size] = True
    draft = DraftModel(cfg, emb, torch.zeros(cfg.draft_vocab_size, dtype=torch.long), t2d)
    opt = torch.optim.AdamW([p for p in draft.parameters() if p.requires_grad], lr=1e-3)
    fused = torch.randn(batch, tokens, 3 * cfg.target_hidden_size)
    ids = torch.randint(0, cfg.draft_vocab_size, (batch, tokens))
    valid = torch.ones(batch, tokens, dtype=torch.bool)
    teacher = Teacher(torch.softmax(torch.randn(batch, tokens, cfg.draft_vocab_size), -1),
                      valid, ids)
    remaining = torch.rand(batch, tokens) * 6

    def step() -> float:
        with autocast("cpu", amp):
            steps = draft.unroll(fused, ids, valid, ttt)
            loss = sd_loss([s.logits for s in steps], teacher, [valid] * ttt) \
                + 0.1 * length_loss(draft.length(steps[0].state), remaining, valid)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    for _ in range(2):
        step()
    started = time.perf_counter()
    for _ in range(repeats):
        loss = step()
    return (time.perf_counter() - started) / repeats, loss


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=576)
    ap.add_argument("--heads", type=int, default=9)
    ap.add_argument("--kv-heads", type=int, default=3)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--draft-vocab", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--ttt", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = DraftConfig(hidden_size=args.hidden, target_hidden_size=args.hidden,
                      num_heads=args.heads, num_kv_heads=args.kv_heads,
                      head_dim=args.hidden // args.heads, intermediate_size=args.intermediate,
                      vocab_size=args.vocab, draft_vocab_size=args.draft_vocab)
    cpu = cpu_description(CPU_FLAGS)
    print(f"CPU: {cpu['name']} ({', '.join(cpu['flags'])}); torch {torch.__version__}; "
          f"{args.threads} thread(s)")
    rows = args.batch * args.tokens
    print(f"matmul {rows}x{args.hidden} @ {args.hidden}x{args.intermediate}: "
          f"float32 {matmul_gflops(rows, args.hidden, args.intermediate, torch.float32):.0f} "
          f"GFLOP/s, bfloat16 "
          f"{matmul_gflops(rows, args.hidden, args.intermediate, torch.bfloat16):.0f} GFLOP/s")
    print(f"draft step: batch {args.batch} x {args.tokens} tokens, K = {args.ttt}, draft vocab "
          f"{args.draft_vocab}")
    base = None
    for amp in ("off", "bf16"):
        seconds, loss = step_seconds(cfg, amp, args.batch, args.tokens, args.ttt, args.repeats)
        base = base or seconds
        print(f"  amp={amp:<4} {1000 * seconds:7.0f} ms a step  {rows / seconds:7.0f} tokens/s  "
              f"{base / seconds:.2f}x  (loss {loss:.3f})")


if __name__ == "__main__":
    main()
