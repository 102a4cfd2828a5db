"""The draft vocabulary: the most frequent response tokens, mapped to target ids (d2t / t2d).

EAGLE-3 drafts over a smaller vocabulary than the target's. Draft id i is target id
`i + d2t[i]`; `t2d[j]` says whether target id j is in the draft vocabulary (specs §1.5).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

import torch


def build_draft_vocab(responses: Iterable[Iterable[int]], vocab_size: int,
                      draft_vocab_size: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """d2t [V_d] int64 and t2d [V] bool from token frequencies over response tokens.

    With fewer distinct tokens than V_d, the smallest ids not yet chosen fill the rest (as
    SpecForge pads), so V_d is always exact. Ties in frequency go to the smaller id.
    """
    if not 0 < draft_vocab_size <= vocab_size:
        raise ValueError(f"draft_vocab_size must be in [1, {vocab_size}], got {draft_vocab_size}")
    counts = Counter(int(t) for seq in responses for t in seq)
    ranked = sorted(counts, key=lambda tok: (-counts[tok], tok))[:draft_vocab_size]
    chosen = set(ranked)
    filler = (i for i in range(vocab_size) if i not in chosen)
    while len(chosen) < draft_vocab_size:
        chosen.add(next(filler))
    used = torch.tensor(sorted(chosen), dtype=torch.long)
    d2t = used - torch.arange(draft_vocab_size)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[used] = True
    total = sum(counts.values())
    covered = sum(counts[t] for t in chosen)
    card = {"draft_vocab_size": draft_vocab_size, "distinct_response_tokens": len(counts),
            "response_token_coverage": covered / total if total else 1.0}
    return d2t, t2d, card


def draft_to_target(draft_ids: torch.Tensor, d2t: torch.Tensor) -> torch.Tensor:
    return draft_ids + d2t[draft_ids]


def target_to_draft(target_ids: torch.Tensor, t2d: torch.Tensor) -> torch.Tensor:
    """Draft id of each target id in the draft vocabulary (-1 for ids outside it)."""
    index = torch.cumsum(t2d.long(), 0) - 1
    return torch.where(t2d[target_ids], index[target_ids], torch.full_like(target_ids, -1))
