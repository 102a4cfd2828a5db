"""The features stage: one teacher-forced forward of the target over prompt + its own response.

Predictors that read the target's internals (probes, classifiers, EGTP) all take their inputs from
here, computed once and cached as fp16 memory-mapped arrays:
- static states: per layer role, the prompt pooled by last token, mean, or entropy weights;
- step states: per layer role, the state at prompt position n-1+t for response steps t (stride);
- per-token entropy of the next-token distribution over the whole sequence.
Layer roles follow EAGLE-3: low/mid/high = hs[2], hs[L//2], hs[L-3]; last = hs[L] (HF
`hidden_states`, where hs[0] is the embedding output).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from lenbench.batching import length_batches, pad_right
from lenbench.predictor import POOLINGS, ROLES, STEP_POOLINGS, check_names


def role_layers(num_layers: int) -> dict[str, int]:
    """Index into HF `hidden_states` for each role (EAGLE-3 convention, DESIGN §4)."""
    layers = {"low": 2, "mid": num_layers // 2, "high": num_layers - 3, "last": num_layers}
    if len({layers[r] for r in ("low", "mid", "high")}) < 3:
        raise ValueError(f"a model with {num_layers} layers has no three distinct EAGLE-3 layers "
                         "(need at least 7)")
    return layers


def entropy_weights(entropy: np.ndarray) -> np.ndarray:
    """EGTP weights: softmax of per-token entropies (no temperature)."""
    z = np.exp(entropy - entropy.max())
    return z / z.sum()


def running_entropy_pool(h: np.ndarray, entropy: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Entropy-weighted pools of h[0..e] for each e in `ends`, from running sums.

    Subtracting the sequence's maximum entropy before exponentiating keeps the sums finite; the
    shared shift cancels in the ratio, so each pool equals softmax(H[0..e]) @ h[0..e].
    """
    w = np.exp(entropy.astype(np.float64) - entropy.max())
    num = np.cumsum(w[:, None] * h.astype(np.float64), axis=0)
    den = np.cumsum(w)
    return (num[ends] / den[ends, None]).astype(np.float32)


def step_file(role: str, pooling: str) -> str:
    return f"steps_{role}.npy" if pooling == "last" else f"steps_{role}_{pooling}.npy"


@dataclass(frozen=True)
class FeatureConfig:
    roles: tuple[str, ...] = ROLES
    poolings: tuple[str, ...] = POOLINGS
    step_roles: tuple[str, ...] = ("mid",)
    step_stride: int = 1
    batch_tokens: int = 8192
    # "last": the state at position n-1+t; "entropy": the entropy-weighted pool over positions
    # 0..n-1+t (prompt plus the t tokens generated so far), the input of progressive (PLP) heads
    step_poolings: tuple[str, ...] = ("last",)


def extract_features(
    labels: pd.DataFrame, model, out_dir: Path, cfg: FeatureConfig, progress: bool = True
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
    n_rows = len(labels)
    steps_per_row = -(-out_len // cfg.step_stride)  # ceil
    step_offsets = np.concatenate([[0], np.cumsum(steps_per_row)])
    tok_offsets = np.concatenate([[0], np.cumsum(prompt_len + out_len)])

    def mm(name: str, shape: tuple, dtype) -> np.memmap:
        return np.lib.format.open_memmap(out_dir / name, mode="w+", dtype=dtype, shape=shape)

    static = {(r, p): mm(f"static_{r}_{p}.npy", (n_rows, hidden), np.float16)
              for r in cfg.roles for p in cfg.poolings}
    steps = {(r, p): mm(step_file(r, p), (int(step_offsets[-1]), hidden), np.float16)
             for r in cfg.step_roles for p in cfg.step_poolings}
    step_index = mm("steps_index.npy", (int(step_offsets[-1]), 2), np.int32)
    entropy_all = mm("entropy.npy", (int(tok_offsets[-1]),), np.float32)
    np.save(out_dir / "entropy_offsets.npy", tok_offsets)
    np.save(out_dir / "steps_offsets.npy", step_offsets)

    batches = length_batches(prompt_len + out_len, cfg.batch_tokens)

    with Progress(TextColumn("[bold]features"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), disable=not progress) as bar, torch.inference_mode():
        task = bar.add_task("features", total=n_rows)
        for batch in batches:
            seqs = [list(labels.at[i, "prompt_token_ids"]) + list(labels.at[i, "output_token_ids"])
                    for i in batch]
            ids, mask = pad_right(seqs)
            out = model(input_ids=ids.to(device), attention_mask=mask.to(device),
                        output_hidden_states=True, use_cache=False)
            logp = torch.log_softmax(out.logits.float(), dim=-1)
            ent = -(logp.exp() * logp).sum(-1).cpu().numpy()  # [B, T]
            hs = {r: out.hidden_states[layers[r]].float().cpu().numpy()
                  for r in set(cfg.roles) | set(cfg.step_roles)}
            for b, i in enumerate(batch):
                n, L = int(prompt_len[i]), int(out_len[i])
                entropy_all[tok_offsets[i]: tok_offsets[i + 1]] = ent[b, : n + L]
                w = entropy_weights(ent[b, :n].astype(np.float64))
                for r in cfg.roles:
                    h = hs[r][b, :n]
                    pooled = {"last": h[-1], "mean": h.mean(0), "entropy": w @ h}
                    for p in cfg.poolings:
                        static[(r, p)][i] = pooled[p]
                ts = np.arange(0, L, cfg.step_stride)
                lo, hi = step_offsets[i], step_offsets[i + 1]
                step_index[lo:hi, 0] = i
                step_index[lo:hi, 1] = ts
                for (r, p), arr in steps.items():
                    if p == "last":
                        arr[lo:hi] = hs[r][b, n - 1 + ts]
                    else:
                        arr[lo:hi] = running_entropy_pool(hs[r][b, : n + L], ent[b, : n + L],
                                                          n - 1 + ts)
            bar.advance(task, len(batch))
    for arr in (*static.values(), *steps.values(), step_index, entropy_all):
        arr.flush()
    meta = {"roles": list(cfg.roles), "poolings": list(cfg.poolings),
            "step_roles": list(cfg.step_roles), "step_stride": cfg.step_stride,
            "step_poolings": list(cfg.step_poolings),
            "layers": layers, "num_hidden_layers": n_layers, "hidden_size": hidden,
            "n_rows": n_rows, "n_steps": int(step_offsets[-1])}
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=2))
    return meta


class FeatureStore:
    """Read-only access to a features folder (memory-mapped; nothing loaded until asked)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / "meta.json").read_text())
        self.step_offsets = np.load(self.folder / "steps_offsets.npy")
        self.token_offsets = np.load(self.folder / "entropy_offsets.npy")

    def static(self, role: str, pooling: str) -> np.ndarray:
        path = self.folder / f"static_{role}_{pooling}.npy"
        if not path.exists():
            raise KeyError(f"features for role={role!r} pooling={pooling!r} were not extracted; "
                           f"add them to features.roles/features.poolings (have "
                           f"{self.meta['roles']} x {self.meta['poolings']})")
        return np.load(path, mmap_mode="r")

    def steps(self, role: str, pooling: str = "last") -> np.ndarray:
        path = self.folder / step_file(role, pooling)
        if not path.exists():
            raise KeyError(f"step features for role={role!r} pooling={pooling!r} were not "
                           f"extracted; add them to features.step_roles/features.step_poolings "
                           f"(have {self.meta['step_roles']} x "
                           f"{self.meta.get('step_poolings', ['last'])})")
        return np.load(path, mmap_mode="r")

    def step_index(self) -> np.ndarray:
        return np.load(self.folder / "steps_index.npy", mmap_mode="r")

    def entropy(self, row: int) -> np.ndarray:
        ent = np.load(self.folder / "entropy.npy", mmap_mode="r")
        return np.asarray(ent[self.token_offsets[row]: self.token_offsets[row + 1]])
