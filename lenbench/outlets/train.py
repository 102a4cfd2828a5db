"""Training the draft backbone and its length head on the fly from the frozen target.

Nothing per-token is stored on disk: every batch runs one teacher-forced target forward over
prompt + response for the fused features (hs[2], hs[L//2], hs[L-3]) and the logits, then the TTT
unroll of the draft. Batches group sequences of similar length under a token budget. AdamW with
warmup then linear decay, gradient clipping, and bf16 autocast on devices that support it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lenbench.batching import length_batches, pad_right
from lenbench.features.extract import role_layers
from lenbench.outlets.losses import (
    acceptance_sums,
    l2_penalty,
    length_loss,
    make_teacher,
    sd_loss,
)
from lenbench.outlets.modeling import DraftModel, shift_left

log = logging.getLogger("lenbench")


@dataclass(frozen=True)
class Sequence:
    """One training or evaluation row: prompt + response token ids, prompt length n, L."""

    ids: np.ndarray
    n: int
    L: int


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 10
    lr: float = 1e-5
    weight_decay: float = 0.02
    betas: tuple[float, float] = (0.9, 0.95)
    warmup_steps: int = 2000
    clip: float = 1.0
    max_len: int = 2048  # sequences are truncated to this many tokens
    batch_tokens: int = 16384  # padded tokens per batch
    ttt_length: int = 7  # K, unrolled steps of the SD loss
    decay: float = 0.8  # step weight decay^k
    sd_weight: float = 1.0  # 0: no SD loss (lp_only, no_decoder)
    length_weight: float = 0.1  # lambda; 0: no length loss (sd_only's backbone phase)
    head_l2: float = 1e-5  # gamma
    sd_mask: str = "predicted"  # predicted: the predicted token is a response token; eagle:
    # EAGLE's loss_mask[t+k] (the token two places before the predicted one is a response token)
    amp: str = "auto"  # auto: bf16 autocast on CUDA with bf16 support; off: fp32
    max_steps: int | None = None  # stop early (quick runs)

    def __post_init__(self) -> None:
        if self.sd_mask not in ("predicted", "eagle"):
            raise ValueError(f"outlets.train.sd_mask={self.sd_mask!r}; use 'predicted' or 'eagle'")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Batch:
    ids: torch.Tensor  # [B, T], right padded with 0
    valid: torch.Tensor  # [B, T] bool
    n: torch.Tensor  # [B] prompt lengths
    L: torch.Tensor  # [B] response lengths (the label, even where truncated)

    def response_mask(self, offset: int) -> torch.Tensor:
        """Positions t whose logits at t + offset predict a response token that exists:
        n - 1 <= t + offset <= min(n + L, T_i) - 2."""
        t = torch.arange(self.ids.shape[1], device=self.ids.device)[None] + offset
        last = torch.minimum(self.n + self.L, self.valid.sum(1)) - 2
        return (t >= self.n[:, None] - 1) & (t <= last[:, None])

    def sd_mask(self, k: int, mode: str = "predicted") -> torch.Tensor:
        """Positions t whose TTT step-k drafting loss counts (its target: the logits at t+1+k)."""
        if mode == "predicted":
            return self.response_mask(1 + k)
        if mode != "eagle":
            raise ValueError(f"outlets.train.sd_mask={mode!r}; use 'predicted' or 'eagle'")
        t = torch.arange(self.ids.shape[1], device=self.ids.device)[None]
        j = t + k
        inside = t + 1 + k <= self.valid.sum(1)[:, None] - 1
        return (j >= self.n[:, None]) & (j <= (self.n + self.L)[:, None] - 1) & inside

    def remaining_log(self) -> torch.Tensor:
        """log1p(L - t) at position n - 1 + t (meaningful where response_mask(0))."""
        pos = torch.arange(self.ids.shape[1], device=self.ids.device)[None]
        remaining = (self.n + self.L)[:, None] - 1 - pos
        return torch.log1p(remaining.clamp_min(0).float())


def make_batches(seqs: list[Sequence], batch_tokens: int, max_len: int) -> list[list[int]]:
    """Indices of seqs grouped by (truncated) length under a padded-token budget."""
    return length_batches([min(len(s.ids), max_len) for s in seqs], batch_tokens)


def collate(seqs: list[Sequence], index: list[int], max_len: int, device) -> Batch:
    ids, mask = pad_right([seqs[i].ids[:max_len] for i in index])
    n = torch.tensor([seqs[i].n for i in index])
    L = torch.tensor([seqs[i].L for i in index])
    return Batch(ids.to(device), mask.bool().to(device), n.to(device), L.to(device))


@torch.no_grad()
def target_forward(model, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused EAGLE-3 features [B, T, 3H] (fp32) and logits [B, T, V] (the target's dtype)."""
    out = model(input_ids=batch.ids, attention_mask=batch.valid.long(),
                output_hidden_states=True, use_cache=False)
    layers = role_layers(model.config.num_hidden_layers)
    fused = torch.cat([out.hidden_states[layers[r]] for r in ("low", "mid", "high")], dim=-1)
    return fused.float(), out.logits


def autocast(device: str, amp: str):
    use = amp == "bf16" or (amp == "auto" and str(device).startswith("cuda")
                            and torch.cuda.is_bf16_supported())
    return torch.autocast("cuda" if str(device).startswith("cuda") else "cpu",
                          dtype=torch.bfloat16, enabled=use)


def batch_loss(draft: DraftModel, target_model, batch: Batch, cfg: TrainConfig,
               train_backbone: bool = True) -> tuple[torch.Tensor, dict]:
    """The OUTLETS objective on one batch, and its parts for logging."""
    fused, logits = target_forward(target_model, batch)
    use_sd = cfg.sd_weight > 0 and draft.layer is not None
    teacher = make_teacher(logits, draft.t2d) if use_sd else None
    del logits  # the full-vocabulary logits are the largest tensor of the step
    with torch.set_grad_enabled(train_backbone and torch.is_grad_enabled()):
        if use_sd:
            steps = draft.unroll(fused, batch.ids, batch.valid, cfg.ttt_length)
        else:
            steps = [draft.first_step(fused, shift_left(batch.ids, 1), batch.valid,
                                      logits=False)]
    parts, loss = {}, torch.zeros((), device=fused.device)
    if use_sd:
        masks = [batch.sd_mask(k, cfg.sd_mask) for k in range(len(steps))]
        sd = sd_loss([s.logits for s in steps], teacher, masks, cfg.decay)
        loss = loss + cfg.sd_weight * sd
        parts["sd"] = float(sd.detach())
    if cfg.length_weight > 0:
        state = steps[0].state if train_backbone else steps[0].state.detach()
        ln = length_loss(draft.length(state), batch.remaining_log(), batch.response_mask(0))
        loss = loss + cfg.length_weight * ln + cfg.head_l2 * l2_penalty(draft.length_head)
        parts["len_mse"] = float(ln.detach())
    return loss, parts


def lr_lambda(warmup: int, total: int):
    """Linear warmup to the peak, then linear decay to zero at the last step."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return f


def train_draft(draft: DraftModel, target_model, seqs: list[Sequence], cfg: TrainConfig,
                seed: int = 0, train_backbone: bool = True, description: str = "outlets",
                progress: bool = True) -> dict:
    """Fit the draft (or only its length head when train_backbone is False); return history."""
    device = next(target_model.parameters()).device
    draft.to(device).train()
    params = [p for p in draft.parameters() if p.requires_grad] if train_backbone \
        else list(draft.length_head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    batches = make_batches(seqs, cfg.batch_tokens, cfg.max_len)
    total = cfg.epochs * len(batches)
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(min(cfg.warmup_steps, total), total))
    rng = np.random.default_rng(seed)
    history, step = [], 0
    with Progress(TextColumn(f"[bold]{description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                  disable=not progress) as bar:
        task = bar.add_task(description, total=total, info="")
        for epoch in range(cfg.epochs):
            sums: dict[str, float] = {}
            epoch_steps = 0
            for b in rng.permutation(len(batches)):
                if step >= total:
                    break
                batch = collate(seqs, batches[b], cfg.max_len, device)
                with autocast(device, cfg.amp):
                    loss, parts = batch_loss(draft, target_model, batch, cfg, train_backbone)
                if not math.isfinite(float(loss.detach())):
                    raise FloatingPointError(f"{description}: loss became {float(loss)} at step "
                                             f"{step}; lower the learning rate")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, cfg.clip)
                opt.step()
                sched.step()
                step += 1
                epoch_steps += 1
                for k, v in {"loss": float(loss.detach()), **parts}.items():
                    sums[k] = sums.get(k, 0.0) + v
                bar.update(task, advance=1, info=f"epoch {epoch} loss {float(loss.detach()):.4f}")
            history.append({"epoch": epoch, "steps": epoch_steps,
                            **{k: v / max(epoch_steps, 1) for k, v in sums.items()}})
            log.info("%s epoch %d: %s", description, epoch, ", ".join(
                f"{k} {v:.4f}" for k, v in history[-1].items() if k not in ("epoch", "steps")))
            if step >= total:
                break
    draft.eval()
    return {"steps": step, "batches_per_epoch": len(batches), "history": history}


@torch.no_grad()
def draft_states(draft: DraftModel, target_model, seqs: list[Sequence],
                 positions: list[np.ndarray], batch_tokens: int = 16384,
                 amp: str = "auto") -> list[np.ndarray]:
    """Predicted log1p(remaining) at the given positions of each sequence (TTT step 0)."""
    device = next(target_model.parameters()).device
    draft.to(device).eval()
    out: list[np.ndarray | None] = [None] * len(seqs)
    max_len = max((len(s.ids) for s in seqs), default=1)
    for index in make_batches(seqs, batch_tokens, max_len):
        batch = collate(seqs, index, max_len, device)
        with autocast(device, amp):
            fused, _ = target_forward(target_model, batch)
            state = draft.first_step(fused, shift_left(batch.ids, 1), batch.valid,
                                     logits=False).state
            z = draft.length(state).float().cpu().numpy()
        for b, i in enumerate(index):
            out[i] = z[b, positions[i]]
    return out


@torch.no_grad()
def offline_acceptance(draft: DraftModel, target_model, seqs: list[Sequence], depth: int,
                       batch_tokens: int = 16384) -> dict[str, list[float]]:
    """Per-depth top-1 agreement acc_k and expected acceptance E_k on teacher-forced
    sequences (response positions only)."""
    device = next(target_model.parameters()).device
    draft.to(device).eval()
    sums = [{"agree": 0.0, "overlap": 0.0, "count": 0.0} for _ in range(depth)]
    max_len = max((len(s.ids) for s in seqs), default=1)
    for index in make_batches(seqs, batch_tokens, max_len):
        batch = collate(seqs, index, max_len, device)
        fused, logits = target_forward(target_model, batch)
        steps = draft.unroll(fused, batch.ids, batch.valid, depth)
        teacher = make_teacher(logits, draft.t2d, full=True)
        for k, st in enumerate(steps):
            width = st.logits.shape[1] - 1 - k
            if width <= 0:
                break
            s = acceptance_sums(st.logits[:, :width], teacher.shifted(1 + k),
                                batch.response_mask(1 + k)[:, :width], draft.d2t)
            for key in s:
                sums[k][key] += s[key]
    return {"acc": [s["agree"] / max(s["count"], 1) for s in sums],
            "expected_acceptance": [s["overlap"] / max(s["count"], 1) for s in sums]}
