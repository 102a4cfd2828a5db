"""How many samples a world's labels hold, read off its generation card: a dense subset of prompts
answered more times than the rest counts its own samples, so that a censored share is a share of
every sample the model made (the load-time warning and the leaderboard's provenance agree)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def dense_subset(gen: Mapping[str, Any], n_prompts: int) -> tuple[int, int]:
    """(prompts, samples each) of the denser subset the labels have, (0, 0) where none."""
    dense_n = int(gen.get("dense_n_samples") or 0)
    if not dense_n:
        return 0, 0
    if gen.get("dense_prompt_count") is not None:  # recorded: the first and the drawn together
        return min(int(gen["dense_prompt_count"]), n_prompts), dense_n
    return min(int(gen.get("dense_prompts") or 0), n_prompts), dense_n


def label_counts(gen: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
    """(prompts generated for, samples per prompt, samples generated, samples censored) of a
    generation card; None when the labels were not sampled here (imported, or not recorded)."""
    if not gen.get("sampling") or gen.get("n_prompts") is None:
        return None
    n_prompts = int(gen["n_prompts"]) - int(gen.get("n_prompts_too_long") or 0)
    n_samples = int(gen.get("n_samples") or 1)
    dense, dense_n = dense_subset(gen, n_prompts)
    generated = (n_prompts - dense) * n_samples + dense * dense_n
    return n_prompts, n_samples, generated, int(gen.get("n_censored") or 0)
