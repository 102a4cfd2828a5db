"""llama.cpp's llama-server against lenbench's HF generate stage: tokens/s side by side.

Same model (SmolLM2-135M-Instruct: the GGUF for llama.cpp, its converted folder for HF), same
prompts (ShareGPT first turns from the sharegpt_wheel preset), same sampling settings
(the model card's temperature 0.2, top_p 0.9 by default), same seeds, in one run, at 1 and 2
threads. The figure that matters is the ratio (machines are shared and noisy). Server start-up is
timed apart from generation.

    .venv/bin/python benchmarks/llamacpp_vs_hf.py --prompts 32 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer

from lenbench.generation.parity import build_backend, model_preset, sharegpt_prompts
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.models.chat import pretrained_eos_ids, render_prompt
from lenbench.models.loading import model_folder


def timed(gen, requests, cfg) -> tuple[int, float]:
    started = time.perf_counter()
    results, _ = gen.generate(requests, cfg)
    return sum(len(r.output_ids) for r in results), time.perf_counter() - started


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.2)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--batch-size", type=int, default=16, help="HF live rows")
    p.add_argument("--slots", type=int, default=4, help="llama-server parallel slots")
    p.add_argument("--cache-dir", default=".lenbench_cache")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    preset = model_preset(args.model)
    folder = model_folder(args.model, args.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    eos = pretrained_eos_ids(folder, tokenizer)
    texts = sharegpt_prompts(args.prompts)
    template = preset.get("chat_template_kwargs") or {}
    requests = [GenRequest(tuple(render_prompt(tokenizer, t, template)), (0, i, 0))
                for i, t in enumerate(texts)]
    cfg = SamplingConfig(args.temperature, args.top_p, args.max_new_tokens)
    longest = max(len(r.prompt_ids) for r in requests)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        hf = build_backend("hf", folder, preset, tokenizer, eos, threads, args.slots, longest,
                           args.max_new_tokens, batch_size=args.batch_size)
        hf_tokens, hf_s = timed(hf, requests, cfg)
        started = time.perf_counter()
        lc = build_backend("llamacpp", folder, preset, tokenizer, eos, threads, args.slots,
                           longest, args.max_new_tokens)
        startup = time.perf_counter() - started
        try:
            lc.probe()  # the EOS probe belongs to start-up, not to the timed generation
            startup = time.perf_counter() - started
            lc_tokens, lc_s = timed(lc, requests, cfg)
        finally:
            lc.close()
        row = {"threads": threads, "hf_tokens": hf_tokens, "hf_s": round(hf_s, 2),
               "hf_tok_s": round(hf_tokens / hf_s, 1), "llamacpp_tokens": lc_tokens,
               "llamacpp_s": round(lc_s, 2), "llamacpp_tok_s": round(lc_tokens / lc_s, 1),
               "llamacpp_startup_s": round(startup, 2),
               "ratio_llamacpp_over_hf": round((lc_tokens / lc_s) / (hf_tokens / hf_s), 2)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"\n{len(requests)} prompts, max_new_tokens {args.max_new_tokens}, temperature "
          f"{args.temperature}, top_p {args.top_p}; HF batch {args.batch_size}, llama-server "
          f"slots {args.slots}")
    print(f"{'threads':>7} {'hf tok/s':>9} {'llama.cpp tok/s':>16} {'ratio':>6}")
    for r in rows:
        print(f"{r['threads']:>7} {r['hf_tok_s']:>9} {r['llamacpp_tok_s']:>16} "
              f"{r['ratio_llamacpp_over_hf']:>6}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
