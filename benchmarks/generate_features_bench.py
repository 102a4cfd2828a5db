"""Side-by-side timing of lenbench's generate and features stages against plain transformers.

Same model, same prompts, same sampling settings, same process: the figures that matter are the
ratios (these machines are shared and noisy), and the share of decoded row-slots that carried a
real response token (plain `generate` pads each batch to its longest response).

    .venv/bin/python benchmarks/generate_features_bench.py            # default toy model
    .venv/bin/python benchmarks/generate_features_bench.py --tiny     # seconds-scale check
    .venv/bin/python benchmarks/generate_features_bench.py --model smollm2-135m-instruct \\
        --prompts 32 --max-new-tokens 192                             # generate only, real model
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from lenbench.configs import preset_config
from lenbench.configs.run import FeaturesConfig
from lenbench.contract.features import role_layers
from lenbench.data.promptset import build_promptset, toyworld_source
from lenbench.features.extract import extract_features
from lenbench.generation.hf import HFGenerator
from lenbench.generation.protocol import GenRequest, GenStats, SamplingConfig
from lenbench.models.chat import eos_token_ids, render_prompt
from lenbench.models.loading import load_target, model_folder, resolve_model

ROOT = Path(__file__).resolve().parent.parent

# Varied instructions for a real chat model: short factual answers to long-form writing, so the
# response lengths spread the way they do in real label sets.
INSTRUCTIONS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain how a refrigerator works, step by step.",
    "Give me three tips for a good night's sleep.",
    "Translate 'good morning, how are you?' into Spanish.",
    "Write a short story about a robot who learns to paint.",
    "What is 17 times 23?",
    "List five fruits that are rich in vitamin C.",
    "Summarise the plot of Romeo and Juliet in two sentences.",
    "Write a Python function that reverses a string.",
    "Why is the sky blue?",
    "Describe your ideal weekend in one paragraph.",
    "What are the main differences between a cat and a dog as pets?",
    "Write a polite email declining a meeting invitation.",
    "Name the planets of the solar system in order.",
    "How do I boil an egg?",
    "Explain photosynthesis to a ten-year-old.",
    "Give a one-word synonym for 'happy'.",
    "Write a limerick about a programmer.",
    "What causes the seasons on Earth?",
    "Suggest a name for a coffee shop by the sea.",
    "Write a detailed guide to planting tomatoes in a small garden.",
    "Is a tomato a fruit or a vegetable? Answer briefly.",
    "Compose a motivational speech for a football team at half time.",
    "What year did the Second World War end?",
    "Explain the difference between weather and climate.",
    "Write a recipe for pancakes.",
    "What does a CPU do in a computer?",
    "Tell me a joke about mathematicians.",
    "Describe the water cycle.",
    "Write a product description for a reusable water bottle.",
    "Reply with only 'yes' or 'no': is water wet?",
]


def plain_generate(model, tokenizer, prompts: list[list[int]], batch_size: int,
                   sampling: SamplingConfig, eos: list[int]) -> tuple[float, int, GenStats]:
    """`model.generate` on left-padded static batches; returns (seconds, response tokens, stats).

    The stats count decode steps as GenStats does (the first token comes from the prefill): a
    slot is real until its row's EOS, a cache column is real if it holds a prompt or response
    token of a row that is still live.
    """
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    outputs = []
    start = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        batch = prompts[i:i + batch_size]
        width = max(len(p) for p in batch)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                             temperature=sampling.temperature, top_p=sampling.top_p,
                             max_new_tokens=sampling.max_new_tokens, eos_token_id=eos,
                             pad_token_id=pad)
        outputs.append((batch, width, out[:, width:].tolist()))
    seconds = time.perf_counter() - start
    stats = GenStats()
    n_tokens = 0
    for batch, width, gen in outputs:
        lengths = [next((k + 1 for k, t in enumerate(row) if t in eos), len(row)) for row in gen]
        n_tokens += sum(lengths)
        for t in range(1, len(gen[0])):  # decode step t feeds token t-1 and appends token t
            live = [len(p) for p, L in zip(batch, lengths) if t < L]
            stats.decode_steps += 1
            stats.decoded_slots += len(batch)
            stats.real_tokens += len(live)
            stats.kv_columns += len(batch) * (width + t)
            stats.kv_real += sum(n + t for n in live)
    return seconds, n_tokens, stats


def plain_features(model, labels: pd.DataFrame, layers: dict[str, int]) -> float:
    """One unbatched forward per row with hidden states, pooled by last token: the naive way."""
    start = time.perf_counter()
    with torch.inference_mode():
        for ids, out_ids in zip(labels["prompt_token_ids"], labels["output_token_ids"]):
            seq = torch.tensor([list(ids) + list(out_ids)])
            out = model(input_ids=seq, output_hidden_states=True)
            n = len(ids)
            for idx in layers.values():
                out.hidden_states[idx][0, n - 1].numpy()
            logp = torch.log_softmax(out.logits[0].float(), -1)
            (-(logp.exp() * logp).sum(-1)).numpy()
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tiny", action="store_true", help="use the toy_tiny model")
    ap.add_argument("--model", help="a from_pretrained folder or a model preset name: generate "
                                    "only, on built-in instructions rendered through its chat "
                                    "template")
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache/lenbench"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.model:
        path = model_folder(args.model, args.cache_dir)
        tm = load_target(path)
        texts = [INSTRUCTIONS[i % len(INSTRUCTIONS)] for i in range(args.prompts)]
    else:
        model_cfg = preset_config("model", "toy_tiny" if args.tiny else "toy")
        path, _ = resolve_model(model_cfg, args.cache_dir)
        tm = load_target(path)
        df, _ = build_promptset(toyworld_source(args.prompts, seed=123),
                                {"train": 0.0, "val": 0.0, "test": 1.0}, limit=args.prompts)
        texts = list(df["text"])
    prompts = [render_prompt(tm.tokenizer, t) for t in texts]
    eos = eos_token_ids(tm.model, tm.tokenizer)
    sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                              max_new_tokens=args.max_new_tokens)

    requests = [GenRequest(tuple(p), (0, i, 0)) for i, p in enumerate(prompts)]
    gen = HFGenerator(tm.model, eos, batch_size=args.batch_size)
    start = time.perf_counter()
    results, stats = gen.generate(requests, sampling)
    ours_gen = time.perf_counter() - start
    torch.manual_seed(0)
    plain_gen, plain_tokens, plain_stats = plain_generate(
        tm.model, tm.tokenizer, prompts, args.batch_size, sampling, eos)

    labels = pd.DataFrame({"prompt_token_ids": prompts,
                           "output_token_ids": [r.output_ids for r in results],
                           "L": [len(r.output_ids) for r in results]})
    n_tokens = int(labels["L"].sum())
    print(f"model: {path} ({tm.info['n_parameters'] / 1e6:.2f}M params), {len(prompts)} prompts,"
          f" batch {args.batch_size}, {args.threads} threads, T={args.temperature},"
          f" top_p={args.top_p}, max_new_tokens={args.max_new_tokens}")
    print(f"{'stage':<10}{'lenbench s':>12}{'plain s':>10}{'speed-up':>10}  notes")
    print(f"{'generate':<10}{ours_gen:>12.2f}{plain_gen:>10.2f}{plain_gen / ours_gen:>9.2f}x"
          f"  tokens/s: lenbench {n_tokens / ours_gen:.1f} ({n_tokens} tokens, mean L"
          f" {n_tokens / len(prompts):.1f}), plain {plain_tokens / plain_gen:.1f}"
          f" ({plain_tokens} tokens, mean L {plain_tokens / len(prompts):.1f})")
    print(f"{'':<42}  real-token fraction: lenbench {stats.real_token_fraction:.3f},"
          f" plain {plain_stats.real_token_fraction:.3f}; KV fill: lenbench"
          f" {stats.kv_fill:.3f}, plain {plain_stats.kv_fill:.3f}")
    if args.model:
        return

    layers = role_layers(tm.model.config.num_hidden_layers)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        extract_features(labels, tm.model, Path(tmp), FeaturesConfig(step_roles=["mid"]),
                         progress=False)
        ours_feat = time.perf_counter() - start
    plain_feat = plain_features(tm.model, labels, layers)
    print(f"{'features':<10}{ours_feat:>12.2f}{plain_feat:>10.2f}{plain_feat / ours_feat:>9.2f}x"
          f"  lenbench also writes 3 poolings x 4 roles + step states; plain: last token only")


if __name__ == "__main__":
    main()
