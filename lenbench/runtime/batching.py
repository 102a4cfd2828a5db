"""Length-grouped batches under a padded-token budget, and right padding.

Teacher-forced passes over whole sequences (the features stage, OUTLETS training and prediction)
waste least on padding when sequences of similar length share a batch, so they all batch here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def length_batches(lengths: Sequence[int] | np.ndarray, batch_tokens: int) -> list[list[int]]:
    """Indices grouped longest first, each batch's padded width x rows within `batch_tokens`
    (a sequence longer than the budget gets a batch of its own)."""
    lengths = np.asarray(lengths)
    batches, current, width = [], [], 0
    for i in np.argsort(-lengths, kind="stable"):
        seq = int(lengths[i])
        if current and max(width, seq) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, width = [], 0
        current.append(int(i))
        width = max(width, seq)
    if current:
        batches.append(current)
    return batches


def pad_right(seqs: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids [B, T] right-padded with 0, and the mask [B, T] of real tokens (0/1 long)."""
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.as_tensor(np.asarray(s, dtype=np.int64))
        mask[b, : len(s)] = 1
    return ids, mask
