"""The target cache: the frozen target's per-token training inputs, computed once.

Split from `train` so training reads the cache without the cache depending on training. The
target runs once over the training sequences (as training batches them), its fused features and
drafting teacher go to memory-mapped .npy files in a temporary folder (16-bit, about 6H + 2 V_d
bytes per token), and every epoch reads them back a batch at a time, so an epoch costs only the
draft. `open_target_cache` applies `train.target_cache` (on / off / auto: on when the estimated
size is within `target_cache_max_bytes`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from lenbench.outlets.batches import (
    Batch,
    Sequence,
    TrainConfig,
    autocast,
    collate,
    make_batches,
    target_forward,
)
from lenbench.outlets.losses import Teacher, make_teacher

log = logging.getLogger(__name__)


def storage_dtype(target_model) -> torch.dtype:
    """bf16 features for a bf16 target (lossless), fp16 otherwise (3 more mantissa bits)."""
    dtype = next(target_model.parameters()).dtype
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float16


def cache_bytes(seqs: list[Sequence], max_len: int, target_hidden: int, draft_vocab: int,
                teacher: bool) -> int:
    """Size of a TargetCache: per token 3H 16-bit features, and with the teacher V_d fp16
    probabilities, the in-draft flag and the target's argmax (int32)."""
    tokens = sum(min(len(s.ids), max_len) for s in seqs)
    return tokens * (3 * target_hidden * 2 + ((2 * draft_vocab + 1 + 4) if teacher else 0))


def row_layout(seqs: list[Sequence], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """First cache row and row count of each sequence (its tokens up to max_len)."""
    lengths = np.array([min(len(s.ids), max_len) for s in seqs], dtype=np.int64)
    return np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64), lengths


class TargetCache:
    """The frozen target's per-token training inputs, computed once and read back per batch.

    Rows of every sequence (truncated to max_len) lie back to back in .npy memory maps in a
    temporary folder: `fused` [N, 3H] (16-bit), and with the teacher `p` [N, V_d] (fp16),
    `in_draft` [N] and `top` [N]. Only one batch's rows are ever in memory at a time.
    """

    def __init__(self, folder: tempfile.TemporaryDirectory, seqs: list[Sequence], max_len: int,
                 dtype: torch.dtype, teacher: bool, build_seconds: float):
        self._folder, self.max_len, self.dtype = folder, max_len, dtype
        self.starts, self.lengths = row_layout(seqs, max_len)
        self.has_teacher, self.build_seconds = teacher, build_seconds
        names = ("fused", "p", "in_draft", "top") if teacher else ("fused",)
        self.arrays = {k: np.load(self.path / f"{k}.npy", mmap_mode="r") for k in names}

    @property
    def path(self) -> Path:
        return Path(self._folder.name)

    @property
    def nbytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir())

    @classmethod
    @torch.no_grad()
    def build(cls, target_model, seqs: list[Sequence], max_len: int, t2d: torch.Tensor,
              teacher: bool, batch_tokens: int, amp: str = "auto") -> TargetCache:
        """Run the target once over seqs (as training batches them) and write the cache."""
        started = time.perf_counter()
        device = next(target_model.parameters()).device
        dtype = storage_dtype(target_model)
        folder = tempfile.TemporaryDirectory(prefix="outlets-target-cache-")
        starts, lengths = row_layout(seqs, max_len)
        n = int(lengths.sum())

        def create(name, dt, *shape):
            return np.lib.format.open_memmap(Path(folder.name) / f"{name}.npy", mode="w+",
                                             dtype=dt, shape=(n, *shape))

        out = {"fused": create("fused", np.int16, 3 * target_model.config.hidden_size)}
        if teacher:
            out |= {"p": create("p", np.float16, int(t2d.sum())),
                    "in_draft": create("in_draft", np.bool_),
                    "top": create("top", np.int32)}
        for index in make_batches(seqs, batch_tokens, max_len):
            batch = collate(seqs, index, max_len, device)
            with autocast(device, amp):
                fused, logits = target_forward(target_model, batch)
            stored = fused.to(dtype)
            if not torch.isfinite(stored).all():
                raise FloatingPointError(
                    f"target features overflow {dtype} in the target cache; "
                    "set outlets train.target_cache=off")
            rows = {"fused": stored.view(torch.int16)}
            if teacher:
                t = make_teacher(logits, t2d)
                rows |= {"p": t.p.half(), "in_draft": t.in_draft, "top": t.top.int()}
            del logits
            rows = {k: v.cpu().numpy() for k, v in rows.items()}
            for b, i in enumerate(index):
                span = slice(starts[i], starts[i] + lengths[i])
                for k, v in rows.items():
                    out[k][span] = v[b, : lengths[i]]
        for array in out.values():
            array.flush()
        del out
        return cls(folder, seqs, max_len, dtype, teacher, time.perf_counter() - started)

    def serves(self, n_seqs: int, max_len: int, teacher: bool) -> bool:
        """Whether this cache holds every row a run over n_seqs sequences at max_len reads."""
        return (n_seqs == len(self.lengths) and (self.has_teacher or not teacher)
                and (max_len <= self.max_len or self.lengths.max(initial=0) < self.max_len))

    def inputs(self, index: list[int], batch: Batch, teacher: bool
               ) -> tuple[torch.Tensor, Teacher | None]:
        """Fused features [B, T, 3H] (fp32) and the teacher for the sequences `index` as
        `batch` lays them out; padding is zero (no loss or real position reads it)."""
        rows, width = batch.ids.shape
        valid = batch.valid.sum(1).tolist()
        names = ("fused", "p", "in_draft", "top") if teacher else ("fused",)
        bufs = {k: np.zeros((rows, width, *self.arrays[k].shape[1:]), self.arrays[k].dtype)
                for k in names}
        for b, (i, n) in enumerate(zip(index, valid)):
            if n > self.lengths[i]:
                raise ValueError(f"the target cache holds {self.lengths[i]} tokens of sequence "
                                 f"{i}, the batch needs {n}")
            for k in names:
                bufs[k][b, :n] = self.arrays[k][self.starts[i]: self.starts[i] + n]
        device = batch.ids.device
        fused = torch.from_numpy(bufs["fused"]).view(self.dtype).to(device).float()
        if not teacher:
            return fused, None
        return fused, Teacher(torch.from_numpy(bufs["p"]).to(device).float(),
                              torch.from_numpy(bufs["in_draft"]).to(device),
                              torch.from_numpy(bufs["top"]).to(device).long())

    def describe(self) -> dict:
        return {"mode": "cached", "bytes": self.nbytes, "tokens": int(self.lengths.sum()),
                "dtype": str(self.dtype).removeprefix("torch."), "teacher": self.has_teacher,
                "build_seconds": round(self.build_seconds, 3)}

    def close(self) -> None:
        """Remove the files (also done when the cache is garbage collected)."""
        self.arrays = {}
        self._folder.cleanup()


def open_target_cache(target_model, seqs: list[Sequence], cfg: TrainConfig, t2d: torch.Tensor,
                      teacher: bool) -> tuple[TargetCache | None, dict]:
    """The cache when cfg.target_cache asks for one (None: train online), and a record of the
    decision for the report."""
    estimate = cache_bytes(seqs, cfg.max_len, target_model.config.hidden_size, int(t2d.sum()),
                           teacher)
    record = {"setting": cfg.target_cache, "estimated_bytes": estimate,
              "max_bytes": cfg.target_cache_max_bytes}
    if cfg.target_cache == "off" or (cfg.target_cache == "auto"
                                     and estimate > cfg.target_cache_max_bytes):
        return None, record | {"mode": "online"}
    cache = TargetCache.build(target_model, seqs, cfg.max_len, t2d, teacher, cfg.batch_tokens,
                              cfg.amp)
    log.info("outlets target cache: %d tokens, %.1f MB, built in %.1f s",
             cache.lengths.sum(), cache.nbytes / 1e6, cache.build_seconds)
    return cache, record | cache.describe()
