"""Side-by-side timing of lenbench's generate and features stages against plain transformers.

Same model, same prompts, same sampling settings, same process: the figures that matter are the
ratios (these machines are shared and noisy), and the share of decoded row-slots that carried a
real response token (plain `generate` pads each batch to its longest response).

    .venv/bin/python benchmarks/generate_features_bench.py            # default toy model
    .venv/bin/python benchmarks/generate_features_bench.py --tiny     # seconds-scale check
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from omegaconf import OmegaConf

from lenbench.data.promptset import build_promptset, toyworld_source
from lenbench.features.extract import FeatureConfig, extract_features, role_layers
from lenbench.generation.hf import GenRequest, HFGenerator, SamplingConfig
from lenbench.generation.runner import eos_token_ids, render_prompt
from lenbench.models.loading import load_target, resolve_model

ROOT = Path(__file__).resolve().parent.parent


def plain_generate(model, tokenizer, prompts: list[list[int]], batch_size: int,
                   sampling: SamplingConfig, eos: list[int]) -> tuple[float, float]:
    """`model.generate` on left-padded static batches; returns (seconds, real-token fraction)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
    real = slots = 0
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
        gen = out[:, width:]
        steps = gen.shape[1]
        for row in gen.tolist():
            n = next((k + 1 for k, t in enumerate(row) if t in eos), len(row))
            real += n
        slots += steps * len(batch)
    return time.perf_counter() - start, real / slots


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
    ap.add_argument("--prompts", type=int, default=96)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache-dir", default=str(ROOT / ".cache/lenbench"))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model_cfg = OmegaConf.to_container(
        OmegaConf.load(ROOT / "conf/model" / ("toy_tiny.yaml" if args.tiny else "toy.yaml")))
    path, _ = resolve_model(model_cfg, args.cache_dir)
    tm = load_target(path)
    df, _ = build_promptset(toyworld_source(args.prompts, seed=123),
                            {"train": 0.0, "val": 0.0, "test": 1.0}, limit=args.prompts)
    prompts = [render_prompt(tm.tokenizer, t) for t in df["text"]]
    eos = eos_token_ids(tm.model, tm.tokenizer)
    sampling = SamplingConfig(temperature=1.0, top_p=1.0, max_new_tokens=256)

    requests = [GenRequest(tuple(p), (0, i, 0)) for i, p in enumerate(prompts)]
    gen = HFGenerator(tm.model, eos, batch_size=args.batch_size)
    start = time.perf_counter()
    results, stats = gen.generate(requests, sampling)
    ours_gen = time.perf_counter() - start
    torch.manual_seed(0)
    plain_gen, plain_frac = plain_generate(tm.model, tm.tokenizer, prompts, args.batch_size,
                                           sampling, eos)

    labels = pd.DataFrame({"prompt_token_ids": prompts,
                           "output_token_ids": [r.output_ids for r in results],
                           "L": [len(r.output_ids) for r in results]})
    layers = role_layers(tm.model.config.num_hidden_layers)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        extract_features(labels, tm.model, Path(tmp), FeatureConfig(step_roles=("mid",)),
                         progress=False)
        ours_feat = time.perf_counter() - start
    plain_feat = plain_features(tm.model, labels, layers)

    n_tokens = int(labels["L"].sum())
    print(f"model: {path} ({tm.info['n_parameters'] / 1e6:.2f}M params), {len(prompts)} prompts,"
          f" batch {args.batch_size}, {args.threads} threads, {n_tokens} response tokens"
          f" (mean L {np.mean(labels['L']):.1f})")
    print(f"{'stage':<10}{'lenbench s':>12}{'plain s':>10}{'speed-up':>10}  notes")
    print(f"{'generate':<10}{ours_gen:>12.2f}{plain_gen:>10.2f}{plain_gen / ours_gen:>9.2f}x"
          f"  real-token fraction: lenbench {stats.real_token_fraction:.3f}, plain generate"
          f" {plain_frac:.3f}; lenbench KV fill {stats.kv_fill:.3f}")
    print(f"{'features':<10}{ours_feat:>12.2f}{plain_feat:>10.2f}{plain_feat / ours_feat:>9.2f}x"
          f"  lenbench also writes 3 poolings x 4 roles + step states; plain: last token only")


if __name__ == "__main__":
    main()
