"""OUTLETS losses and the offline acceptance proxies, computed from one TTT unroll.

L = L_SD + lambda * L_len + gamma * ||theta_head||^2 (OUTLETS, arXiv 2609.01068):
- L_SD = sum_k 0.8^k L_k, L_k the soft cross-entropy of the draft against the target's
  distribution restricted to the draft vocabulary (forward KL up to a constant), averaged over all
  B*T positions as EAGLE does, with positions whose target argmax is outside the draft vocabulary
  masked out;
- L_len = the masked mean squared error of log1p(remaining tokens) at TTT step 0 (for a quantile
  length head, the masked mean pinball loss of its QUANTILE_LEVELS outputs instead).

The target's side is reduced once per batch to a `Teacher` over the draft vocabulary, and step k
compares draft positions t with teacher positions t+1+k by slicing: at Llama-8B scale a full-
vocabulary fp32 copy per step would cost about 8 GB each.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.nn import functional as F

from lenbench.contract.distributions import QUANTILE_LEVELS
from lenbench.heads.quantile_loss import pinball_loss


@dataclass
class Teacher:
    """The target's next-token distribution at each position, over the draft vocabulary."""

    p: torch.Tensor  # [B, T, V_d] softmax of the target logits restricted to the draft vocab
    in_draft: torch.Tensor  # [B, T] bool: the target's argmax is in the draft vocabulary
    top: torch.Tensor  # [B, T] the target's argmax (target ids)
    p_on_draft: torch.Tensor | None = None  # [B, T, V_d] full-vocab probabilities (evaluation)

    def shifted(self, by: int) -> Teacher:
        """Positions by.. (the draft at t is compared with the teacher at t + by)."""
        return Teacher(self.p[:, by:], self.in_draft[:, by:], self.top[:, by:],
                       None if self.p_on_draft is None else self.p_on_draft[:, by:])


@torch.no_grad()
def make_teacher(logits: torch.Tensor, t2d: torch.Tensor, full: bool = False) -> Teacher:
    """Reduce target logits [B, T, V] (any dtype) to a Teacher, one row at a time in fp32."""
    index = t2d.nonzero().squeeze(-1)
    rows = []
    for row in logits:  # bounds the fp32 working set to one sequence of full-vocab logits
        row = row.float()
        sub = row.index_select(-1, index)
        top = row.argmax(-1)
        on_draft = torch.exp(sub - torch.logsumexp(row, -1, keepdim=True)) if full else None
        rows.append((torch.softmax(sub, -1), t2d[top], top, on_draft))
    p, keep, top, on_draft = (list(x) for x in zip(*rows))
    return Teacher(torch.stack(p), torch.stack(keep), torch.stack(top),
                   torch.stack(on_draft) if full else None)


def sd_step_loss(draft_logits: torch.Tensor, teacher: Teacher, mask: torch.Tensor
                 ) -> torch.Tensor:
    """L_k over aligned positions. draft_logits [B, T', V_d]; teacher and mask [B, T'] cover the
    same positions; the mean runs over B * T' (EAGLE divides by all positions, masked included)."""
    logq = F.log_softmax(draft_logits.float(), dim=-1)
    per_position = (teacher.p * logq).sum(-1) * (mask & teacher.in_draft)
    return -per_position.mean()


def sd_loss(step_logits: list[torch.Tensor], teacher: Teacher, masks: list[torch.Tensor],
            decay: float = 0.8) -> torch.Tensor:
    """L_SD = sum_k decay^k L_k; step k's draft at t is scored against the teacher at t+1+k."""
    total = torch.zeros((), device=teacher.p.device)
    for k, (logits, mask) in enumerate(zip(step_logits, masks)):
        width = logits.shape[1] - 1 - k
        if width <= 0:
            break
        total = total + decay ** k * sd_step_loss(logits[:, :width], teacher.shifted(1 + k),
                                                  mask[:, :width])
    return total


def length_loss(pred_log: torch.Tensor, target_log: torch.Tensor, mask: torch.Tensor,
                levels=QUANTILE_LEVELS):
    """Masked mean of (z_hat - log1p(remaining))^2; for quantile outputs (pred_log one axis
    longer than target_log, one entry per level) the masked mean pinball loss at `levels`."""
    if pred_log.dim() == target_log.dim() + 1:
        return pinball_loss(pred_log, target_log, levels, mask)
    err = (pred_log.float() - target_log) ** 2 * mask
    return err.sum() / mask.sum().clamp_min(1)


def l2_penalty(module: torch.nn.Module) -> torch.Tensor:
    """gamma's term: the sum of squares of every weight and bias of the length head."""
    return sum(p.float().pow(2).sum() for p in module.parameters())


@torch.no_grad()
def acceptance_sums(draft_logits: torch.Tensor, teacher: Teacher, mask: torch.Tensor,
                    d2t: torch.Tensor) -> dict[str, float]:
    """Counts behind two offline proxies of one depth (specs §1.6), summed over aligned
    positions: top-1 agreement of the draft (mapped to target ids) with the target's argmax, and
    the expected acceptance sum_v min(p_target(v), q_draft(v)) over the draft vocabulary."""
    draft_top = draft_logits.argmax(-1)
    agree = ((draft_top + d2t[draft_top]) == teacher.top) & mask
    q = torch.softmax(draft_logits.float(), dim=-1)
    overlap = torch.minimum(teacher.p_on_draft, q).sum(-1) * mask
    return {"agree": float(agree.sum()), "overlap": float(overlap.sum()),
            "count": float(mask.sum())}
