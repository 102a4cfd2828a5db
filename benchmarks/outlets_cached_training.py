"""OUTLETS training with the target online vs from the target cache, side by side on one model.

Online (`train.target_cache=off`), every batch of every epoch reruns the frozen target's forward
(fused features and full-vocabulary logits for the drafting teacher). Cached (`on`), the target
runs once into memory-mapped files and every epoch costs only the draft. Both modes train the same
draft from the same initialisation on the same sequences (token windows of this repository's
README and source), so their losses should agree to storage precision. Run:

    python benchmarks/outlets_cached_training.py --model smollm2-135m-instruct \
        [--sequences 24 --tokens 300 --epochs 3 --batch-tokens 2048 --draft-vocab 2048]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from lenbench.outlets.batches import Sequence, TrainConfig
from lenbench.outlets.modeling import DraftConfig, DraftModel
from lenbench.outlets.target_cache import open_target_cache
from lenbench.outlets.train import train_draft, uses_sd
from lenbench.outlets.vocab import build_draft_vocab

REPO = Path(__file__).resolve().parent.parent


def sequences(tokenizer, count: int, tokens: int, seed: int = 0) -> list[Sequence]:
    """`count` windows of about `tokens` tokens (+-15%), the first quarter of each the prompt."""
    text = "\n".join(p.read_text() for p in [REPO / "README.md",
                                               *sorted((REPO / "lenbench").rglob("*.py"))])
    ids = np.asarray(tokenizer(text)["input_ids"], dtype=np.int64)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        size = int(rng.integers(int(0.85 * tokens), int(1.15 * tokens) + 1))
        start = int(rng.integers(0, len(ids) - size))
        n = size // 4
        out.append(Sequence(ids[start: start + size], n, size - n))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct",
                    help="a from_pretrained folder or a model preset name")
    ap.add_argument("--sequences", type=int, default=24)
    ap.add_argument("--tokens", type=int, default=300)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--draft-vocab", type=int, default=2048)
    ap.add_argument("--ttt-length", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lenbench.models.loading import model_folder

    cache_dir = Path(__file__).resolve().parent.parent / ".cache/lenbench"
    args.model = model_folder(args.model, cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    target = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    seqs = sequences(tokenizer, args.sequences, args.tokens)
    d2t, t2d, _ = build_draft_vocab([s.ids[s.n:] for s in seqs], target.config.vocab_size,
                                    args.draft_vocab)
    torch.manual_seed(0)
    draft = DraftModel(DraftConfig.from_target(target.config, args.draft_vocab),
                       target.get_input_embeddings().weight, d2t, t2d)
    base = {"epochs": args.epochs, "lr": 5e-4, "warmup_steps": 3,
            "batch_tokens": args.batch_tokens, "ttt_length": args.ttt_length}
    tokens = sum(len(s.ids) for s in seqs)
    print(f"target {args.model}: {target.config.num_hidden_layers} layers, hidden "
          f"{target.config.hidden_size}, vocab {target.config.vocab_size}; draft vocab "
          f"{args.draft_vocab}, K={args.ttt_length}; {len(seqs)} sequences, {tokens} tokens, "
          f"{args.epochs} epochs, batch_tokens {args.batch_tokens}, {args.threads} thread(s)")

    online = train_draft(copy.deepcopy(draft), target, seqs,
                         TrainConfig(**base, target_cache="off"), progress=False)
    cfg = TrainConfig(**base, target_cache="on")
    started = time.perf_counter()
    cache, _ = open_target_cache(target, seqs, cfg, t2d, uses_sd(draft, cfg))
    build = time.perf_counter() - started
    cached = train_draft(copy.deepcopy(draft), target, seqs, cfg, progress=False, cache=cache)
    size = cache.nbytes
    cache.close()

    rows = {"online": online["history"], "cached": cached["history"]}
    for mode, history in rows.items():
        secs = [h["seconds"] for h in history]
        losses = ", ".join(f"{h['loss']:.4f}" for h in history)
        print(f"{mode:>6}: seconds per epoch {', '.join(f'{s:.1f}' for s in secs)} "
              f"(mean {statistics.mean(secs):.1f}); loss per epoch {losses}")
    on = [h["seconds"] for h in rows["online"]]
    ca = [h["seconds"] for h in rows["cached"]]
    print(f"cache build (one target pass + writes): {build:.1f} s; cache {size / 1e6:.1f} MB "
          f"({size / tokens / 1e3:.2f} KB/token)")
    print(f"speed-up per epoch: {statistics.mean(on) / statistics.mean(ca):.2f}x; "
          f"end to end over {args.epochs} epochs: {sum(on):.1f} s online vs "
          f"{build + sum(ca):.1f} s cached incl. build = {sum(on) / (build + sum(ca)):.2f}x")


if __name__ == "__main__":
    main()
