"""OUTLETS losses and the offline acceptance proxies, computed from one TTT unroll.

L = L_SD + lambda * L_len + gamma * ||theta_head||^2 (specs/predictors.md §1.4, §3.1):
- L_SD = sum_k 0.8^k L_k, L_k the soft cross-entropy of the draft against the target's
  distribution restricted to the draft vocabulary (forward KL up to a constant), averaged over all
  B*T positions as EAGLE does, with positions whose target argmax is outside the draft vocabulary
  masked out;
- L_len = the masked mean squared error of log1p(remaining tokens) at TTT step 0.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def sd_step_loss(draft_logits: torch.Tensor, target_logits: torch.Tensor, mask: torch.Tensor,
                 t2d: torch.Tensor) -> torch.Tensor:
    """L_k. draft_logits [B, T, V_d]; target_logits [B, T, V] aligned to the same targets;
    mask [B, T] bool (positions whose next token is a response token)."""
    with torch.no_grad():
        p = torch.softmax(target_logits.float()[..., t2d], dim=-1)
        pos_mask = mask & t2d[target_logits.argmax(-1)]
    logq = F.log_softmax(draft_logits.float(), dim=-1)
    per_position = (p * logq).sum(-1) * pos_mask
    return -per_position.mean()


def sd_loss(step_logits: list[torch.Tensor], target_logits: list[torch.Tensor],
            masks: list[torch.Tensor], t2d: torch.Tensor, decay: float = 0.8) -> torch.Tensor:
    """L_SD = sum_k decay^k L_k over the unrolled steps."""
    return sum(decay ** k * sd_step_loss(d, t, m, t2d)
               for k, (d, t, m) in enumerate(zip(step_logits, target_logits, masks)))


def length_loss(pred_log: torch.Tensor, target_log: torch.Tensor, mask: torch.Tensor):
    """Masked mean of (z_hat - log1p(remaining))^2."""
    err = (pred_log.float() - target_log) ** 2 * mask
    return err.sum() / mask.sum().clamp_min(1)


def l2_penalty(module: torch.nn.Module) -> torch.Tensor:
    """gamma's term: the sum of squares of every weight and bias of the length head."""
    return sum(p.pow(2).sum() for p in module.parameters())


@torch.no_grad()
def acceptance_sums(draft_logits: torch.Tensor, target_logits: torch.Tensor,
                    mask: torch.Tensor, d2t: torch.Tensor, t2d: torch.Tensor) -> dict[str, float]:
    """Counts behind two offline proxies of one depth (specs §1.6), summed over positions:
    top-1 agreement of the draft (mapped to target ids) with the target's argmax, and the
    expected acceptance sum_v min(p_target(v), q_draft(v)) over the draft vocabulary."""
    target_top = target_logits.argmax(-1)
    draft_top = draft_logits.argmax(-1)
    agree = ((draft_top + d2t[draft_top]) == target_top) & mask
    p_on_draft = torch.exp(target_logits.float()[..., t2d]
                           - torch.logsumexp(target_logits.float(), dim=-1, keepdim=True))
    q = torch.softmax(draft_logits.float(), dim=-1)
    overlap = torch.minimum(p_on_draft, q).sum(-1) * mask
    return {"agree": float(agree.sum()), "overlap": float(overlap.sum()),
            "count": float(mask.sum())}
