"""The prediction cache: the frozen target's float32 features for the rows drafts are scored on.

Every OUTLETS variant and seed scored on the same rows reads the same target pass; only the
one-layer draft on top differs. Without this cache each of them runs the whole target again
over the test rows (on SmolLM2 v1, 9 of the 11 minutes a variant spends predicting). The pass is
stored as `TargetCache` stores a training pass, but in float32 and batched exactly as prediction
batches it, so a draft reads the very tensors an online pass would hand it: predictions are the
same bit for bit. It is a stage, `cache_dir/outlets_predict/<key>/`, keyed by the target and the
rows (token ids, order, batching); rows that differ (the causality audit's edited copies) get
their own. `state_cache_max_bytes` (0: never) bounds what one build may write.
"""

from __future__ import annotations

import logging

import torch

from lenbench.outlets.batches import Sequence, TrainConfig
from lenbench.outlets.target_cache import CacheHome, TargetCache, cache_config
from lenbench.stages import Stage

log = logging.getLogger(__name__)
STAGE = "outlets_predict"


def prediction_bytes(seqs: list[Sequence], target_hidden: int) -> int:
    """Size of a prediction cache: 3H float32 features for every token of every row."""
    return sum(len(s.ids) for s in seqs) * 3 * target_hidden * 4


def prediction_config(target_model, home: CacheHome, seqs: list[Sequence],
                      batch_tokens: int) -> dict:
    """What the cached bytes depend on: the training cache's description of the target and the
    rows, untruncated, batched by `batch_tokens`, without autocast or teacher, stored in float32."""
    max_len = max((len(s.ids) for s in seqs), default=1)
    cfg = TrainConfig(max_len=max_len, batch_tokens=batch_tokens, amp="off")
    return cache_config(target_model, home, seqs, cfg, None) | {"stored": "float32"}


def open_prediction_cache(target_model, seqs: list[Sequence], batch_tokens: int,
                          home: CacheHome | None, max_bytes: int) -> TargetCache | None:
    """The shared cache of these rows' target pass, built on first use; None (predict online)
    without a harness cache folder, for no rows, or when it would exceed max_bytes."""
    if home is None or not seqs:
        return None
    size = prediction_bytes(seqs, target_model.config.hidden_size)
    if size > max_bytes:
        if max_bytes > 0:
            log.info("outlets prediction cache: %.1f GB is over state_cache_max_bytes (%.1f GB);"
                     " predicting online", size / 1e9, max_bytes / 1e9)
        return None
    stage = Stage(home.cache_dir, STAGE, prediction_config(target_model, home, seqs, batch_tokens))
    max_len = max(len(s.ids) for s in seqs)
    if not stage.done:
        with stage.lock():
            if not stage.done:  # another process may have built it while this one waited
                with stage.building() as folder:
                    TargetCache.write(folder, target_model, seqs, max_len, None, False,
                                      batch_tokens, amp="off", dtype=torch.float32,
                                      name="outlets prediction cache")
                log.info("outlets prediction cache: %d rows, %.1f MB in %s", len(seqs),
                         size / 1e6, stage.path)
                return TargetCache.open(stage, seqs, max_len, reused=False)
    log.info("outlets prediction cache: reused %s (%d rows)", stage.path, len(seqs))
    return TargetCache.open(stage, seqs, max_len, reused=True)
