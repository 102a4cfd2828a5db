"""The prediction cache: the frozen target's float32 features for the rows drafts are scored on.

Every OUTLETS variant and seed scored on the same rows needs the same target pass; only the
one-layer draft on top differs. Without this cache each of them runs the whole target again
over the test rows (on SmolLM2 v1, 9 of the 11 minutes a variant spends predicting). The first
prediction over a row set runs the target online, as always, and stores what it computed on the
way; later ones read it. The files are a `TargetCache`'s, in float32 and laid out as prediction
batches them, so a reader gets the very tensors the online pass had: on the machine and software
that built it, predictions are the same bit for bit. It is a stage,
`cache_dir/outlets_predict/<key>/`, keyed by the target and the rows (every token id, their order,
`batch_tokens`); rows that differ, such as the causality audit's changed copies, never read it.
A pass larger than the predictor's `prediction_cache_max_bytes` (0: never), or than the disk
holds with FREE_MARGIN to spare, runs online without storing anything.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lenbench.outlets.batches import Sequence, TrainConfig
from lenbench.outlets.target_cache import (
    CacheHome,
    TargetCache,
    cache_config,
    room_to_build,
    row_layout,
    store_rows,
    write_meta,
)
from lenbench.stages import Stage

log = logging.getLogger(__name__)
STAGE = "outlets_predict"


def prediction_config(target_model, home: CacheHome, seqs: list[Sequence],
                      batch_tokens: int) -> dict:
    """What the stored bytes depend on: the training cache's description of the target and the
    rows, untruncated, batched by `batch_tokens`, without autocast or teacher, in float32."""
    max_len = max((len(s.ids) for s in seqs), default=1)
    cfg = TrainConfig(max_len=max_len, batch_tokens=batch_tokens, amp="off")
    return cache_config(target_model, home, seqs, cfg, None) | {"stored": "float32"}


class PassWriter:
    """Stores an online prediction pass's fused features [B, T, 3H], batch by batch, as the
    `fused.npy` of a TargetCache (each row's tokens back to back)."""

    def __init__(self, folder: Path, seqs: list[Sequence], max_len: int, hidden: int):
        self.folder, self.started = folder, time.perf_counter()
        self.starts, self.lengths = row_layout(seqs, max_len)
        self.fused = np.lib.format.open_memmap(folder / "fused.npy", mode="w+", dtype=np.float32,
                                               shape=(int(self.lengths.sum()), 3 * hidden))

    def __call__(self, index: list[int], fused: torch.Tensor) -> None:
        store_rows({"fused": self.fused}, {"fused": fused.detach().float().cpu().numpy()}, index,
                   self.starts, self.lengths)

    def finish(self) -> None:
        self.fused.flush()
        self.fused = None
        write_meta(self.folder, torch.float32, False, int(self.lengths.sum()), self.started)


@dataclass
class PredictionPass:
    """How one prediction gets the target's features: `cache` to read them from, else the
    target runs and `store` (when set) keeps them; `record` says which, for the report."""

    cache: TargetCache | None = None
    store: PassWriter | None = None
    record: dict = field(default_factory=dict)


@contextmanager
def prediction_pass(target_model, seqs: list[Sequence], batch_tokens: int,
                    home: CacheHome | None, max_bytes: int) -> Iterator[PredictionPass]:
    """The cache of these rows' target pass when one is built; otherwise the writer that builds
    it from the online pass (a failed pass leaves no folder), or neither: no harness cache
    folder, no rows, over max_bytes or over the free disk."""
    if home is None or not seqs:
        yield PredictionPass(record={"mode": "online", "reason": "no cache folder"})
        return
    tokens = sum(len(s.ids) for s in seqs)
    size = tokens * 3 * target_model.config.hidden_size * 4  # 3H float32 features a token
    record = {"rows": len(seqs), "tokens": tokens, "bytes": size}
    if size > max_bytes:
        yield PredictionPass(record=record | {"mode": "online",
                                              "reason": f"over prediction_cache_max_bytes "
                                                        f"({max_bytes})"})
        return
    stage = Stage(home.cache_dir, STAGE, prediction_config(target_model, home, seqs, batch_tokens))
    max_len = max(len(s.ids) for s in seqs)
    record["key"] = stage.key
    if not stage.done:
        with stage.lock():
            if not stage.done:  # another process may have built it while this one waited
                # under the lock nobody else writes here: a partial folder is a killed pass's
                shutil.rmtree(stage.partial, ignore_errors=True)
                if not room_to_build(stage.path.parent, size, "outlets prediction cache",
                                     "predicting online"):
                    yield PredictionPass(record=record | {"mode": "online",
                                                          "reason": "disk space"})
                    return
                try:
                    with stage.building() as folder:
                        writer = PassWriter(folder, seqs, max_len,
                                            target_model.config.hidden_size)
                        yield PredictionPass(store=writer, record=record | {"mode": "built"})
                        writer.finish()
                except BaseException:  # a pass that failed or was stopped leaves no folder
                    shutil.rmtree(stage.partial, ignore_errors=True)
                    raise
                log.info("outlets prediction cache: stored the pass over %d rows (%.1f MB) in %s",
                         len(seqs), size / 1e6, stage.path)
                return
    cache = TargetCache.open(stage, seqs, max_len, reused=True)
    log.info("outlets prediction cache: read %s (%d rows)", stage.path, len(seqs))
    try:
        yield PredictionPass(cache=cache, record=record | {"mode": "read"})
    finally:
        cache.close()
