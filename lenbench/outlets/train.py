"""Training the draft backbone and its length head from the frozen target.

The draft learns from the target's teacher-forced pass over prompt + response: the fused features
(hs[2], hs[L//2], hs[L-3]) and the drafting teacher (the target's distribution over the draft
vocabulary). Two ways to get them (`train.target_cache`):
- online: every batch of every epoch runs the target again (nothing per-token on disk);
- cached: the target runs once, its features and teacher go to memory-mapped .npy files (16-bit,
  about 6H + 2 V_d bytes per token; shared between fits in the harness's cache folder, else
  temporary), and every epoch reads them back a batch at a time, so an epoch costs only the
  draft. `auto` caches when the estimated size is within `target_cache_max_bytes` (the cache:
  `target_cache`; batching: `batches`).
AdamW with warmup then linear
decay, gradient clipping, and bf16 autocast on devices that support it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from contextlib import closing, nullcontext

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lenbench.outlets.batches import (
    Batch,
    Sequence,
    TrainConfig,
    autocast,
    collate,
    make_batches,
    target_forward,
)
from lenbench.outlets.checkpoint import TrainCheckpoint
from lenbench.outlets.losses import (
    Teacher,
    acceptance_sums,
    l2_penalty,
    length_loss,
    make_teacher,
    sd_loss,
)
from lenbench.outlets.modeling import DraftModel, shift_left
from lenbench.outlets.target_cache import CacheHome, TargetCache, open_target_cache
from lenbench.runtime.progress import ProgressLog

log = logging.getLogger(__name__)


def uses_sd(draft: DraftModel, cfg: TrainConfig) -> bool:
    return cfg.sd_weight > 0 and draft.layer is not None


def batch_loss(draft: DraftModel, target_model, batch: Batch, cfg: TrainConfig,
               train_backbone: bool = True,
               inputs: tuple[torch.Tensor, Teacher | None] | None = None
               ) -> tuple[torch.Tensor, dict]:
    """The OUTLETS objective on one batch, and its parts for logging. `inputs`: the target's
    fused features and teacher for this batch from a TargetCache; without it the target runs."""
    use_sd = uses_sd(draft, cfg)
    if inputs is None:
        fused, logits = target_forward(target_model, batch, with_head=use_sd)
        teacher = make_teacher(logits, draft.t2d) if use_sd else None
        del logits  # the full-vocabulary logits are the largest tensor of the step
    else:
        fused, teacher = inputs
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


@torch.no_grad()
def validation_loss(draft: DraftModel, target_model, seqs: list[Sequence], cfg: TrainConfig,
                    train_backbone: bool = True, cache: TargetCache | None = None) -> float:
    """The training objective on held-out rows, token-weighted over batches: what early stopping
    watches (`TrainConfig.patience`)."""
    device = next(target_model.parameters()).device
    use_sd = uses_sd(draft, cfg)
    was_training = draft.training
    draft.eval()
    total = weight = 0.0
    for index in make_batches(seqs, cfg.batch_tokens, cfg.max_len):
        batch = collate(seqs, index, cfg.max_len, device)
        inputs = cache.inputs(index, batch, use_sd) if cache is not None else None
        with autocast(device, cfg.amp):
            loss, _ = batch_loss(draft, target_model, batch, cfg, train_backbone, inputs)
        tokens = float(batch.valid.sum())
        total, weight = total + float(loss) * tokens, weight + tokens
    draft.train(was_training)
    return total / max(weight, 1.0)


class _EarlyStop:
    """Keeps the weights of the epoch with the lowest validation loss and says when `patience`
    epochs have passed without a better one."""

    def __init__(self, draft: DraftModel, patience: int):
        self.draft, self.patience = draft, patience
        self.best_loss, self.best_epoch, self.best = math.inf, -1, None

    def update(self, epoch: int, loss: float) -> bool:
        """Record an epoch's validation loss; True when training should stop."""
        if loss < self.best_loss:
            self.best_loss, self.best_epoch = loss, epoch
            self.best = {n: p.detach().clone() for n, p in self.draft.named_parameters()
                         if p.requires_grad}
        return epoch - self.best_epoch >= self.patience

    def restore(self) -> None:
        if self.best is not None:
            params = dict(self.draft.named_parameters())
            with torch.no_grad():
                for name, value in self.best.items():
                    params[name].copy_(value)


def train_draft(draft: DraftModel, target_model, seqs: list[Sequence], cfg: TrainConfig,
                seed: int = 0, train_backbone: bool = True, description: str = "outlets",
                progress: bool = True, cache: TargetCache | None = None,
                home: CacheHome | None = None, val_seqs: list[Sequence] | None = None,
                val_cache: TargetCache | None = None) -> dict:
    """Fit the draft (or only its length head when train_backbone is False); return history.
    `cache`: a TargetCache over seqs to train from (shared between phases; the caller closes
    it); without one that serves this run, cfg.target_cache decides (shared under `home` when
    given) and this call owns it. With `cfg.patience` and `val_seqs` (and their `val_cache`,
    else the target runs on them each epoch), training stops once the validation objective has
    not improved for `patience` epochs and keeps the best epoch's weights. Under a `home` the
    fit keeps its state after every epoch and resumes or reuses an earlier run of the same fit
    (`checkpoint`)."""
    device = next(target_model.parameters()).device
    use_sd = uses_sd(draft, cfg)
    own = cache is None or not cache.serves(len(seqs), cfg.max_len, use_sd)
    if own:
        cache, cache_record = open_target_cache(target_model, seqs, cfg, draft.t2d, use_sd,
                                                home)
    else:
        cache_record = {"setting": cfg.target_cache, **cache.describe(), "shared": True}
    draft.to(device)
    watching = cfg.patience > 0 and bool(val_seqs)
    ckpt = None if home is None else TrainCheckpoint.for_fit(
        home, draft=draft, seqs=seqs, cfg=cfg, seed=seed, train_backbone=train_backbone,
        cache_record=cache_record, val_seqs=val_seqs if watching else None,
        val_cached=val_cache is not None)
    # one process trains a fit at a time; another with the same key waits, then loads it
    with closing(cache) if own and cache is not None else nullcontext(), \
            ckpt.stage.lock() if ckpt is not None else nullcontext():
        if ckpt is not None and ckpt.done:
            out = ckpt.load_final(draft)
            draft.eval()
            log.info("%s: the same fit finished earlier (%d epochs, %s): its weights are "
                     "loaded from %s", description, out["epochs_run"], out["stopped"],
                     ckpt.stage.path)
            return out | {"target_cache": cache_record,
                          "checkpoint": {**out["checkpoint"], "reused": True}}
        out = _fit(draft, target_model, seqs, cfg, seed, train_backbone, description, progress,
                   cache, val_seqs if watching else None, val_cache, ckpt)
        out["target_cache"] = cache_record
        if ckpt is not None:
            ckpt.finish(draft, out)
    if cfg.patience > 0 and not watching:
        log.warning("%s: train.patience=%d but no validation rows: trained the whole budget",
                    description, cfg.patience)
    return out


def _fit(draft: DraftModel, target_model, seqs: list[Sequence], cfg: TrainConfig, seed: int,
         train_backbone: bool, description: str, progress: bool, cache: TargetCache | None,
         val_seqs: list[Sequence] | None, val_cache: TargetCache | None,
         ckpt: TrainCheckpoint | None) -> dict:
    """The epochs of `train_draft`, from the start or after the last epoch `ckpt` kept."""
    device = next(target_model.parameters()).device
    use_sd = uses_sd(draft, cfg)
    draft.train()
    params = [p for p in draft.parameters() if p.requires_grad] if train_backbone \
        else list(draft.length_head.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=cfg.betas)
    batches = make_batches(seqs, cfg.batch_tokens, cfg.max_len)
    total = cfg.epochs * len(batches)
    if cfg.max_steps is not None:
        total = min(total, cfg.max_steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(min(cfg.warmup_steps, total), total))
    rng = np.random.default_rng(seed)
    history, step, first_epoch, stopped, finished = [], 0, 0, "budget", False
    watch = _EarlyStop(draft, cfg.patience) if val_seqs else None
    saved = ckpt.last_epoch() if ckpt is not None else None
    if saved is not None:
        ckpt.put_back(draft, saved["draft"])
        opt.load_state_dict(saved["optimizer"])
        sched.load_state_dict(saved["schedule"])
        rng.bit_generator.state = saved["rng"]
        torch.set_rng_state(saved["torch_rng"])
        history, step, stopped, finished = (saved["history"], saved["step"], saved["stopped"],
                                            saved["finished"])
        first_epoch = history[-1]["epoch"] + 1
        if watch is not None:
            watch.best_loss, watch.best_epoch, watch.best = saved["watch"]
        log.info("%s: resuming after epoch %d of an interrupted run of the same fit (%s)",
                 description, first_epoch - 1, ckpt.stage.partial)
    elif ckpt is not None:
        log.info("%s: each epoch's state is kept in %s (a rerun of this fit resumes there)",
                 description, ckpt.stage.partial)
    with Progress(TextColumn(f"[bold]{description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
                  disable=not progress) as bar:
        task = bar.add_task(description, total=total, completed=step, info="")
        # without the bar (progress=false, a batch log) a line a minute: an epoch can take 20
        plain = None if progress else ProgressLog(log, description, total, unit="steps",
                                                  every_s=60.0, start=step)
        for epoch in range(first_epoch, cfg.epochs):
            if finished or step >= total:
                break
            sums: dict[str, float] = {}
            epoch_steps, started = 0, time.perf_counter()
            for b in rng.permutation(len(batches)):
                if step >= total:
                    break
                batch = collate(seqs, batches[b], cfg.max_len, device)
                inputs = cache.inputs(batches[b], batch, use_sd) if cache is not None else None
                with autocast(device, cfg.amp):
                    loss, parts = batch_loss(draft, target_model, batch, cfg, train_backbone,
                                             inputs)
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
                if plain is not None:
                    plain.advance(1, tokens=int(batch.valid.sum()))
            history.append({"epoch": epoch, "steps": epoch_steps,
                            "seconds": round(time.perf_counter() - started, 3),
                            **{k: v / max(epoch_steps, 1) for k, v in sums.items()}})
            if watch is not None:
                started = time.perf_counter()
                history[-1]["val_loss"] = validation_loss(draft, target_model, val_seqs, cfg,
                                                          train_backbone, val_cache)
                history[-1]["val_seconds"] = round(time.perf_counter() - started, 3)
            log.info("%s epoch %d: %s", description, epoch, ", ".join(
                f"{k} {v:.4f}" for k, v in history[-1].items()
                if k not in ("epoch", "steps", "seconds", "val_seconds")))
            if watch is not None and watch.update(epoch, history[-1]["val_loss"]):
                stopped, finished = "converged", True
            finished = finished or step >= total
            if ckpt is not None:
                ckpt.save_epoch({
                    "draft": draft.trained_state(), "optimizer": opt.state_dict(),
                    "schedule": sched.state_dict(), "rng": rng.bit_generator.state,
                    "torch_rng": torch.get_rng_state(), "history": history, "step": step,
                    "stopped": stopped, "finished": finished,
                    "watch": None if watch is None else (watch.best_loss, watch.best_epoch,
                                                         watch.best)})
        if watch is not None:
            watch.restore()
    draft.eval()
    out = {"steps": step, "batches_per_epoch": len(batches), "history": history,
           "epochs_run": len(history),
           "budget": {"epochs": cfg.epochs, "max_steps": cfg.max_steps,
                      "steps": total}, "stopped": stopped}
    if ckpt is not None:
        out["checkpoint"] = {"key": ckpt.key, "reused": False,
                             "resumed_after_epoch": None if saved is None else first_epoch - 1}
    if watch is not None:
        out["validation"] = {"patience": cfg.patience, "rows": len(val_seqs),
                             "best_epoch": watch.best_epoch, "best_loss": watch.best_loss}
        log.info("%s: %s after %d epochs; best validation loss %.4f at epoch %d", description,
                 stopped, len(history), watch.best_loss, watch.best_epoch)
    return out


@torch.no_grad()
def draft_states(draft: DraftModel, target_model, seqs: list[Sequence],
                 positions: list[np.ndarray], batch_tokens: int = 16384,
                 name: str = "outlets predict", cache: TargetCache | None = None,
                 store: Callable[[list[int], torch.Tensor], None] | None = None
                 ) -> list[np.ndarray]:
    """Predicted log1p(remaining) at the given positions of each sequence (TTT step 0); a
    progress line under `name` every tenth of the rows or 30 s. With a prediction cache of
    these rows (lenbench/outlets/prediction_cache.py) the target's features are read, not run;
    `store(index, fused)`, when given, keeps those of an online pass.

    Always in float32, whatever `train.amp` trained with: under bf16 a row's value moves by
    the shape of the batch it lands in (8 mantissa bits), far beyond the causality audit's
    1e-3 tokens when it re-predicts a few rows in smaller batches: an honest draft would fail."""
    device = next(target_model.parameters()).device
    draft.to(device).eval()
    out: list[np.ndarray | None] = [None] * len(seqs)
    max_len = max((len(s.ids) for s in seqs), default=1)
    # long rows come first: the time left is counted in tokens, not rows
    plain = ProgressLog(log, name, len(seqs), unit="rows",
                        total_tokens=sum(len(s.ids) for s in seqs))
    for index in make_batches(seqs, batch_tokens, max_len):
        batch = collate(seqs, index, max_len, device)
        if cache is not None:
            fused, _ = cache.inputs(index, batch, teacher=False)
        else:
            fused, _ = target_forward(target_model, batch, with_head=False)
            if store is not None:
                store(index, fused)
        state = draft.first_step(fused, shift_left(batch.ids, 1), batch.valid,
                                 logits=False).state
        z = draft.length(state).float().cpu().numpy()
        for b, i in enumerate(index):
            out[i] = z[b, positions[i]]
        plain.advance(len(index), tokens=int(batch.valid.sum()))
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
