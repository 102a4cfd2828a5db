"""Real chain speculative decoding with the draft and the target: acceptance length and rates.

Greedy, batch 1, EAGLE-3's chain drafting: after each target verification the draft's step 0 runs
over the accepted sequence with the target's fused features, then `depth - 1` further steps at the
last position feed the draft its own state and guess (the TTT pattern of modeling.py). The target
verifies all guesses in one forward; the longest matching prefix m is accepted plus one token
from the target. Greedy verification is lossless, so the output equals the target's own greedy
decoding; the tests check that.

For clarity over speed, every cycle recomputes the target and the draft's step 0 over the whole
sequence (no KV cache). The figures (tau, alpha_k) do not depend on caching.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from lenbench.outlets.batches import Batch, target_forward
from lenbench.outlets.modeling import DraftModel


@dataclass
class SpecStats:
    """EAGLE's counters: tau = new tokens / cycles; alpha_k = P(accept depth k | depths < k);
    mean_accept_ratio = m/K pooled over every cycle of every request (OUTLETS Fig. 6's alpha)."""

    depth: int
    cycles: int = 0
    new_tokens: int = 0
    accepted: list[int] = field(default_factory=list)  # m per cycle

    def to_dict(self) -> dict:
        reached = [sum(1 for m in self.accepted if k <= m) for k in range(self.depth)]
        hits = [sum(1 for m in self.accepted if k < m) for k in range(self.depth)]
        return {
            "depth": self.depth, "cycles": self.cycles, "new_tokens": self.new_tokens,
            "tau": self.new_tokens / self.cycles if self.cycles else None,
            "alpha": [h / r if r else None for h, r in zip(hits, reached)],
            "mean_accept_ratio": float(np.mean(self.accepted)) / self.depth
            if self.accepted else None,
        }


def _forward(target_model, ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    device = next(target_model.parameters()).device
    t = torch.tensor([ids], device=device)
    ones = torch.ones_like(t, dtype=torch.bool)
    n = torch.tensor([len(ids)], device=device)
    return target_forward(target_model, Batch(t, ones, n, torch.zeros_like(n)))


@torch.no_grad()
def draft_chain(draft: DraftModel, fused: torch.Tensor, seq: list[int], depth: int) -> list[int]:
    """`depth` greedy guesses (target ids) continuing seq; fused covers positions 0..len(seq)-2."""
    device = fused.device
    t = len(seq) - 1
    next_ids = torch.tensor([seq[1:]], device=device)
    first = draft.first_step(fused[:, :t], next_ids, torch.ones_like(next_ids, dtype=torch.bool))
    guess = draft.to_target_ids(first.logits[:, -1].argmax(-1))
    guesses = [int(guess)]
    state, cache0, diag = first.state[:, -1:], first.kv, []
    see_all = torch.ones((1, 1, 1, t), dtype=torch.bool, device=device)
    for k in range(1, depth):
        pos = torch.tensor([[t - 1 + k]], device=device)
        st = draft.step(state, guess.view(1, 1), pos, see_all, cache0, diag)
        diag.append(st.kv)
        state = st.state
        guess = draft.to_target_ids(st.logits[:, -1].argmax(-1))
        guesses.append(int(guess))
    return guesses


@torch.no_grad()
def speculative_generate(draft: DraftModel, target_model, prompt: list[int], depth: int,
                         max_new_tokens: int, eos_ids: set[int],
                         stats: SpecStats | None = None) -> list[int]:
    """Greedy speculative decoding of one prompt; returns the response tokens."""
    fused, logits = _forward(target_model, list(prompt))
    seq = list(prompt) + [int(logits[0, -1].argmax())]  # the prefill's own token
    response = seq[len(prompt):]
    while response[-1] not in eos_ids and len(response) < max_new_tokens:
        guesses = draft_chain(draft, fused, seq, depth)
        fused, logits = _forward(target_model, seq + guesses)
        top = logits[0, len(seq) - 1:].argmax(-1).tolist()  # target's choice after each prefix
        m = 0
        while m < depth and guesses[m] == top[m]:
            m += 1
        new = guesses[:m] + [top[m]]
        for i, tok in enumerate(new):  # stop at EOS or the budget, as plain decoding would
            if tok in eos_ids or len(response) + i + 1 >= max_new_tokens:
                new = new[: i + 1]
                break
        if stats is not None:
            stats.cycles += 1
            stats.new_tokens += len(new)
            stats.accepted.append(min(m, len(new)))  # guesses cut at EOS/budget don't count
        seq += new
        response += new
    return response


def acceptance_report(draft: DraftModel, target_model, prompts: list[list[int]], depth: int,
                      max_new_tokens: int, eos_ids: set[int]) -> dict:
    stats = SpecStats(depth)
    for prompt in prompts:
        speculative_generate(draft, target_model, prompt, depth, max_new_tokens, eos_ids, stats)
    return {**stats.to_dict(), "n_prompts": len(prompts), "max_new_tokens": max_new_tokens}
