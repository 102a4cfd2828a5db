"""The generate stage: regenerate every prompt's responses with the target model, in shards.

Ground-truth lengths are the target model's own. Requests are cut into shards of whole prompts;
each shard is written atomically as soon as it finishes, so a killed run resumes by skipping the
shards already on disk. A shard's tokens depend only on its own requests and their seeds, so a
resumed run ends with exactly the labels of an uninterrupted one.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

import pandas as pd
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from lenbench.generation.hf import GenRequest, GenStats, HFGenerator, SamplingConfig
from lenbench.stages import atomic_write_bytes

LABEL_COLUMNS = ["prompt_id", "sample_idx", "split", "family", "text", "prompt_token_ids",
                 "output_token_ids", "L", "finish_reason", "censored"]


def render_prompt(tokenizer, text: str) -> list[int]:
    """Token ids of a user prompt rendered through the model's chat template."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}],
                                            add_generation_prompt=True, tokenize=True)
        if hasattr(ids, "keys"):  # transformers 5 may return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)
    return tokenizer(text)["input_ids"]


def eos_token_ids(model, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the model has no EOS token: set generation_config.eos_token_id")
    return sorted(set(ids))


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), disable=not enabled)


def generate_labels(
    prompts: pd.DataFrame,
    model,
    tokenizer,
    out_dir: Path,
    sampling: SamplingConfig,
    n_samples: int = 1,
    seed: int = 0,
    batch_size: int = 32,
    shard_prompts: int = 64,
    max_prompt_tokens: int = 2048,
    keep_censored: bool = False,
    progress: bool = True,
    generator=None,
) -> tuple[pd.DataFrame, dict]:
    """Generate `n_samples` responses per prompt into `out_dir` (resumable); return labels + card.

    Each sample draws from a random stream seeded by (seed, prompt hash, sample index), so the
    result does not depend on batch size or shard boundaries' neighbours. `generator` is any
    backend with HFGenerator's `generate(requests, sampling, on_done)` method (default: the HF
    backend on `model`).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    prompts = prompts.reset_index(drop=True)
    eos = eos_token_ids(model, tokenizer)
    rendered = [render_prompt(tokenizer, t) for t in prompts["text"]]
    too_long = [len(r) > max_prompt_tokens for r in rendered]
    keep_idx = [i for i, bad in enumerate(too_long) if not bad]
    if generator is None:
        generator = HFGenerator(model, eos, batch_size=batch_size)
    shards = [keep_idx[i:i + shard_prompts] for i in range(0, len(keep_idx), shard_prompts)]
    total = len(keep_idx) * n_samples
    stats = GenStats()
    started = time.perf_counter()
    done_before = 0
    with _progress(progress) as bar:
        task = bar.add_task("generate", total=total)
        for shard_no, shard in enumerate(shards):
            path = out_dir / f"shard-{shard_no:05d}.parquet"
            if path.exists():  # finished by an earlier (possibly killed) run
                stats.add(GenStats(**json.loads(path.with_suffix(".json").read_text())))
                bar.advance(task, len(shard) * n_samples)
                done_before += len(shard) * n_samples
                continue
            requests, keys = [], []
            for i in shard:
                pid = prompts.at[i, "prompt_id"]
                for s in range(n_samples):
                    requests.append(GenRequest(tuple(rendered[i]), (seed, int(pid, 16) % 2**63, s)))
                    keys.append((i, s))
            results, shard_stats = generator.generate(
                requests, sampling, on_done=lambda _: bar.advance(task))
            rows = []
            for (i, s), res in zip(keys, results):
                row = prompts.loc[i]
                rows.append({"prompt_id": row["prompt_id"], "sample_idx": s, "split": row["split"],
                             "family": row.get("family", ""), "text": row["text"],
                             "prompt_token_ids": rendered[i], "output_token_ids": res.output_ids,
                             "L": len(res.output_ids), "finish_reason": res.finish_reason,
                             "censored": res.finish_reason == "length"})
            shard_df = pd.DataFrame(rows, columns=LABEL_COLUMNS)
            # stats first, table last: the table's presence is what marks the shard finished
            atomic_write_bytes(path.with_suffix(".json"), json.dumps(asdict(shard_stats)).encode())
            tmp = path.with_name(path.name + ".tmp")
            shard_df.to_parquet(tmp, index=False)
            tmp.replace(path)
            stats.add(shard_stats)
    labels = pd.concat([pd.read_parquet(out_dir / f"shard-{k:05d}.parquet")
                        for k in range(len(shards))], ignore_index=True) if shards else \
        pd.DataFrame(columns=LABEL_COLUMNS)
    n_censored = int(labels["censored"].sum())
    if not keep_censored:
        labels = labels[~labels["censored"]].reset_index(drop=True)
    card = {
        "n_prompts": len(prompts), "n_prompts_too_long": int(sum(too_long)),
        "n_samples": n_samples, "n_rows": len(labels), "n_censored": n_censored,
        "censored_rows": "kept (flagged)" if keep_censored else "dropped",
        "sampling": asdict(sampling), "seed": seed, "eos_token_ids": eos,
        "chat_template": getattr(tokenizer, "chat_template", None),
        "tokenizer": type(tokenizer).__name__,
        "real_token_fraction": stats.real_token_fraction, "kv_fill": stats.kv_fill,
        "decode_steps": stats.decode_steps,
        "seconds_this_run": time.perf_counter() - started, "rows_resumed": done_before,
        "mean_L": float(labels["L"].mean()) if len(labels) else None,
    }
    return labels, card
