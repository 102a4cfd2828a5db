"""The features stage: one teacher-forced forward of the target over prompt + its own response.

Predictors that read the target's internals (probes, classifiers, EGTP) all take their inputs from
here, computed once and cached as fp16 memory-mapped arrays:
- static states: per layer role, the prompt pooled by last token, mean, or entropy weights;
- step states: per layer role, the state at prompt position n-1+t for response steps t (stride);
- per-token entropy of the next-token distribution over the whole sequence.
Layer roles follow EAGLE-3: low/mid/high = hs[2], hs[L//2], hs[L-3]; last = hs[L] (HF
`hidden_states`, where hs[0] is the embedding output).

Memory is bounded whatever the vocabulary: the forward keeps only the hidden states the roles need
and computes no logits; the entropy applies the output head to a slice of positions at a time.
The names and files of the features, and their reader, are the predictor contract's
(`lenbench/contract/features.py`): this module only writes them.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from lenbench.configs.run import FeaturesConfig
from lenbench.contract.features import (
    POOLINGS,
    ROLES,
    STEP_POOLINGS,
    check_names,
    role_layers,
    static_file,
    step_file,
)
from lenbench.contract.step_index import row_step_offsets, step_index
from lenbench.runtime.batching import length_batches, pad_right
from lenbench.runtime.progress import ProgressLog

log = logging.getLogger(__name__)

# The logits `next_token_entropy` computes at once, as (positions, vocabulary entries). On the CPU a
# tile of 8 MiB (fp32) stays in the last-level cache, which makes the entropy cheaper than
# materialising the full logits as a plain forward does; on an accelerator, bigger tiles (256 MiB)
# keep kernel launches few. Either way peak memory does not grow with the vocabulary.
ENTROPY_TILE = {"cpu": (2048, 1024), "accelerator": (8192, 8192)}


def next_token_entropy(hidden: torch.Tensor, head: torch.nn.Module, softcap: float | None = None,
                       tile: tuple[int, int] | None = None) -> torch.Tensor:
    """Entropy (nats, fp32) of softmax(head(hidden)) for each row of `hidden` [N, H].

    `head` is the linear output head. Its logits are computed one tile of (positions, vocabulary
    entries) at a time and never exist in full: per position, the running maximum m, the sums
    s = sum exp(z - m) and t = sum exp(z - m) * z are rescaled as m grows (the online softmax),
    and H = log s + m - t / s. `softcap` is the final logit softcapping some models (Gemma 2/3)
    apply after the head: z -> c * tanh(z / c).
    """
    positions, block = tile or ENTROPY_TILE["cpu" if hidden.device.type == "cpu" else "accelerator"]
    weight, bias = head.weight, getattr(head, "bias", None)
    out = torch.empty(len(hidden), dtype=torch.float32, device=hidden.device)
    for lo in range(0, len(hidden), positions):
        x = hidden[lo: lo + positions]
        m = torch.full((len(x),), -torch.inf, device=x.device)
        s, t = torch.zeros_like(m), torch.zeros_like(m)
        for v in range(0, weight.shape[0], block):
            z = F.linear(x, weight[v: v + block],
                         None if bias is None else bias[v: v + block]).float()
            if softcap is not None:
                z = z.div_(softcap).tanh_().mul_(softcap)
            new_m = torch.maximum(m, z.max(-1).values)
            scale = torch.exp(m - new_m)  # 0 on the first block (m = -inf)
            p = torch.exp(z - new_m[:, None])
            s = s * scale + p.sum(-1)
            t = t * scale + p.mul_(z).sum(-1)
            m = new_m
        out[lo: lo + positions] = torch.log(s) + m - t / s
    return out


def running_entropy_pool(h: torch.Tensor, entropy: torch.Tensor,
                         ends: torch.Tensor) -> torch.Tensor:
    """Entropy-weighted pools of h[b, 0..e] for each (b, e) in `ends` [K, 2], from running sums.

    h [B, T, H], entropy [B, T]; right padding needs no mask, as pool e never reads beyond e.
    Subtracting each row's maximum entropy before exponentiating keeps the float64 sums finite; the
    shift cancels in the ratio, so each pool equals softmax(H[b, 0..e]) @ h[b, 0..e].
    """
    ent = entropy.double()
    w = torch.exp(ent - ent.max(1, keepdim=True).values)
    num = torch.cumsum(w[..., None] * h.double(), dim=1)
    den = torch.cumsum(w, dim=1)
    b, e = ends[:, 0], ends[:, 1]
    return (num[b, e] / den[b, e, None]).float()


def prompt_pool_weights(entropy: torch.Tensor, n: torch.Tensor, poolings) -> torch.Tensor:
    """[B, P, T] weights over the prompt positions 0..n-1 of each row, one per pooling: one-hot
    at n-1 ('last'), uniform ('mean'), softmax of the per-token entropies ('entropy', EGTP)."""
    pos = torch.arange(entropy.shape[1], device=entropy.device)
    prompt = pos[None, :] < n[:, None]
    weights = {
        "last": (pos[None, :] == n[:, None] - 1).float(),
        "mean": prompt.float() / n[:, None],
        "entropy": torch.softmax(entropy.masked_fill(~prompt, -torch.inf), dim=1),
    }
    return torch.stack([weights[p] for p in poolings], dim=1)


def extract_features(
    labels: pd.DataFrame, model, out_dir: Path, cfg: FeaturesConfig, progress: bool = True
) -> dict:
    """Write the feature arrays for every label row into `out_dir`; return the metadata."""
    check_names("features.roles", cfg.roles, ROLES)
    check_names("features.step_roles", cfg.step_roles, ROLES)
    check_names("features.poolings", cfg.poolings, POOLINGS)
    check_names("features.step_poolings", cfg.step_poolings, STEP_POOLINGS)
    if cfg.step_stride < 1:
        raise ValueError("features.step_stride must be >= 1")
    model.eval()
    n_layers = model.config.num_hidden_layers
    hidden = model.config.hidden_size
    layers = role_layers(n_layers)
    device = next(model.parameters()).device
    prompt_len = labels["prompt_token_ids"].map(len).to_numpy()
    out_len = labels["L"].to_numpy()
    prompt_ids = labels["prompt_token_ids"].to_numpy()
    output_ids = labels["output_token_ids"].to_numpy()
    n_rows = len(labels)
    step_offsets = row_step_offsets(out_len, cfg.step_stride)
    tok_offsets = np.concatenate([[0], np.cumsum(prompt_len + out_len)])

    def mm(name: str, shape: tuple, dtype) -> np.memmap:
        return np.lib.format.open_memmap(out_dir / name, mode="w+", dtype=dtype, shape=shape)

    static = {(r, p): mm(static_file(r, p), (n_rows, hidden), np.float16)
              for r in cfg.roles for p in cfg.poolings}
    steps = {(r, p): mm(step_file(r, p), (int(step_offsets[-1]), hidden), np.float16)
             for r in cfg.step_roles for p in cfg.step_poolings}
    scored = step_index(out_len, cfg.step_stride)  # (row, t), as a run without states has it
    index = mm("steps_index.npy", scored.shape, np.int32)
    index[:] = scored
    entropy_all = mm("entropy.npy", (int(tok_offsets[-1]),), np.float32)
    np.save(out_dir / "entropy_offsets.npy", tok_offsets)
    np.save(out_dir / "steps_offsets.npy", step_offsets)

    batches = length_batches(prompt_len + out_len, cfg.batch_tokens)
    used_roles = set(cfg.roles) | set(cfg.step_roles)
    # Only these hidden states are kept by the forward; hs[L] (the final, normed state) is always
    # among them, as the output head reads it for the entropy.
    keep = sorted({layers[r] for r in used_roles} | {n_layers})
    head = model.get_output_embeddings()
    softcap = getattr(model.config.get_text_config(), "final_logit_softcapping", None)
    no_logits = torch.empty(0, dtype=torch.long, device=device)  # logits_to_keep: none
    log.info("features: %d rows, %d tokens in %d batches of <= %d tokens", n_rows,
             tok_offsets[-1], len(batches), cfg.batch_tokens)
    plog = ProgressLog(log, "features", n_rows, unit="rows", every_s=60.0,
                       total_tokens=int(tok_offsets[-1]))  # long rows first: time by tokens

    with Progress(TextColumn("[bold]features"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), disable=not progress) as bar, torch.inference_mode():
        task = bar.add_task("features", total=n_rows)
        for batch in batches:
            rows = np.asarray(batch)
            n_np, L_np = prompt_len[rows], out_len[rows]
            ids, mask = pad_right([np.concatenate((np.asarray(prompt_ids[i], dtype=np.int64),
                                                   np.asarray(output_ids[i], dtype=np.int64)))
                                   for i in batch])
            ids, mask = ids.to(device), mask.to(device)
            out = model(input_ids=ids, attention_mask=mask, output_hidden_states=keep,
                        logits_to_keep=no_logits, use_cache=False)
            hs = {r: out.hidden_states[layers[r]] for r in used_roles}
            real = mask.bool()
            ent = torch.zeros(real.shape, dtype=torch.float32, device=device)
            ent[real] = next_token_entropy(out.hidden_states[n_layers][real], head, softcap)
            del out

            ent_np = ent.cpu().numpy()
            for b, i in enumerate(batch):
                entropy_all[tok_offsets[i]: tok_offsets[i + 1]] = ent_np[b, : n_np[b] + L_np[b]]

            if cfg.roles and cfg.poolings:
                weights = prompt_pool_weights(ent, torch.as_tensor(n_np, device=device),
                                              cfg.poolings)
                for r in cfg.roles:
                    pooled = torch.bmm(weights, hs[r].float()).cpu().numpy()  # [B, P, H]
                    for k, p in enumerate(cfg.poolings):
                        static[(r, p)][rows] = pooled[:, k]

            # step t of row b reads position n_b - 1 + t; its stored rows are contiguous per row
            dest = np.concatenate([np.arange(step_offsets[i], step_offsets[i + 1]) for i in batch])
            at_b = np.repeat(np.arange(len(batch)), np.diff(step_offsets)[rows])
            at_t = scored[dest, 1]
            at = torch.as_tensor(np.stack([at_b, n_np[at_b] - 1 + at_t], 1), device=device)
            for (r, p), arr in steps.items():
                if p == "last":
                    arr[dest] = hs[r][at[:, 0], at[:, 1]].float().cpu().numpy()
                else:
                    arr[dest] = running_entropy_pool(hs[r], ent, at).cpu().numpy()

            bar.advance(task, len(batch))
            plog.advance(len(batch), tokens=int((n_np + L_np).sum()))
    for arr in (*static.values(), *steps.values(), index, entropy_all):
        arr.flush()
    meta = {"roles": list(cfg.roles), "poolings": list(cfg.poolings),
            "step_roles": list(cfg.step_roles), "step_stride": cfg.step_stride,
            "step_poolings": list(cfg.step_poolings),
            "layers": layers, "num_hidden_layers": n_layers, "hidden_size": hidden,
            "n_rows": n_rows, "n_steps": int(step_offsets[-1])}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


def features_config(fc: FeaturesConfig, needs: list) -> FeaturesConfig:
    """The configured features plus whatever the predictors declare (a superset, so the usual
    suite keeps one cached features stage and an unusual need adds its own)."""
    roles, poolings = list(fc.roles), list(fc.poolings)
    step_roles, step_poolings = list(fc.step_roles), list(fc.step_poolings)

    def add(names: list[str], more) -> None:
        names += [v for v in more if v not in names]

    for need in needs:
        add(roles, need.hidden)
        add(poolings, need.pooling)
        if need.steps:
            add(step_roles, need.hidden)
            add(step_poolings, need.step_pooling)
    return replace(fc, roles=roles, poolings=poolings, step_roles=step_roles,
                   step_poolings=step_poolings)
