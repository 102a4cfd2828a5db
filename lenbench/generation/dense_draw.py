"""Prompts drawn by a hash of their id for the dense subset: a draw that neither source order nor
the person building the world can steer.

The first N prompts of a file are not a random sample of it (a data set's early rows can be
shorter, older, or the ones a cap was tuned on), so a noise floor estimated on them describes
those prompts, not the test split. Ranking the eligible prompts by sha256("dense:" + prompt id)
and taking the first N is a fixed pseudo-random draw: the same prompts on every machine and at
every build, and a larger N only adds prompts to a smaller N's draw.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

DRAW_SALT = "dense:"


def draw_rank(prompt_id: str) -> str:
    """The prompt's place in the draw (smaller is drawn first)."""
    return hashlib.sha256(f"{DRAW_SALT}{prompt_id}".encode()).hexdigest()


def drawn_prompts(prompt_ids: Iterable[str], n: int) -> list[str]:
    """The `n` prompt ids (of those given) that the draw takes first, in draw order."""
    if n < 0:
        raise ValueError(f"generation.dense_drawn must be >= 0, got {n}")
    return sorted(set(prompt_ids), key=draw_rank)[:n]
