"""Training the draft backbone and its length head from the frozen target.

The draft learns from the target's teacher-forced pass over prompt + response: the fused features
(hs[2], hs[L//2], hs[L-3]) and the drafting teacher (the target's distribution over the draft
vocabulary). Two ways to get them (`train.target_cache`):
- online: every batch of every epoch runs the target again (nothing per-token on disk);
- cached: the target runs once, its features and teacher go to memory-mapped .npy files in a
  temporary folder (16-bit, about 6H + 2 V_d bytes per token), and every epoch reads them back a
  batch at a time, so an epoch costs only the draft. `auto` caches when the estimated size is
  within `target_cache_max_bytes`.
Batches group sequences of similar length under a token budget. AdamW with warmup then linear
decay, gradient clipping, and bf16 autocast on devices that support it.
"""

from __future__ import annotations

import logging
import math
import tempfile
import time
from contextlib import closing, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from lenbench.batching import length_batches, pad_right
from lenbench.features.extract import role_layers
from lenbench.outlets.losses import (
    Teacher,
    acceptance_sums,
    l2_penalty,
    length_loss,
    make_teacher,
    sd_loss,
)
from lenbench.outlets.modeling import DraftModel, shift_left

log = logging.getLogger(__name__)


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
    target_cache: str = "auto"  # on: run the target once and train every epoch from a disk
    # cache; off: run it on every batch (targets too large to cache); auto: on when the cache's
    # estimated size is within target_cache_max_bytes
    target_cache_max_bytes: int = 4_000_000_000

    def __post_init__(self) -> None:
        if self.sd_mask not in ("predicted", "eagle"):
            raise ValueError(f"outlets.train.sd_mask={self.sd_mask!r}; use 'predicted' or 'eagle'")
        if isinstance(self.target_cache, bool):  # YAML reads a bare on / off as a boolean
            object.__setattr__(self, "target_cache", "on" if self.target_cache else "off")
        if self.target_cache not in ("auto", "on", "off"):
            raise ValueError(f"outlets.train.target_cache={self.target_cache!r}; "
                             "use 'auto', 'on' or 'off'")

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
        fused, logits = target_forward(target_model, batch)
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


# --- the target cache ---------------------------------------------------------------------------

def storage_dtype(target_model) -> torch.dtype:
    """bf16 features for a bf16 target (lossless), fp16 otherwise (3 more mantissa bits)."""
    dtype = next(target_model.parameters()).dtype
    return torch.bfloat16 if dtype == torch.bfloat16 else torch.float16


def cache_bytes(seqs: list[Sequence], max_len: int, target_hidden: int, draft_vocab: int,
                teacher: bool) -> int:
    """Size of a TargetCache: per token 3H 16-bit features, and with the teacher V_d fp16
    probabilities, the in-draft flag and the target's argmax (int32)."""
    tokens = sum(min(len(s.ids), max_len) for s in seqs)
    return tokens * (3 * target_hidden * 2 + ((2 * draft_vocab + 1 + 4) if teacher else 0))


def row_layout(seqs: list[Sequence], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """First cache row and row count of each sequence (its tokens up to max_len)."""
    lengths = np.array([min(len(s.ids), max_len) for s in seqs], dtype=np.int64)
    return np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64), lengths


class TargetCache:
    """The frozen target's per-token training inputs, computed once and read back per batch.

    Rows of every sequence (truncated to max_len) lie back to back in .npy memory maps in a
    temporary folder: `fused` [N, 3H] (16-bit), and with the teacher `p` [N, V_d] (fp16),
    `in_draft` [N] and `top` [N]. Only one batch's rows are ever in memory at a time.
    """

    def __init__(self, folder: tempfile.TemporaryDirectory, seqs: list[Sequence], max_len: int,
                 dtype: torch.dtype, teacher: bool, build_seconds: float):
        self._folder, self.max_len, self.dtype = folder, max_len, dtype
        self.starts, self.lengths = row_layout(seqs, max_len)
        self.has_teacher, self.build_seconds = teacher, build_seconds
        names = ("fused", "p", "in_draft", "top") if teacher else ("fused",)
        self.arrays = {k: np.load(self.path / f"{k}.npy", mmap_mode="r") for k in names}

    @property
    def path(self) -> Path:
        return Path(self._folder.name)

    @property
    def nbytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.iterdir())

    @classmethod
    @torch.no_grad()
    def build(cls, target_model, seqs: list[Sequence], max_len: int, t2d: torch.Tensor,
              teacher: bool, batch_tokens: int, amp: str = "auto") -> TargetCache:
        """Run the target once over seqs (as training batches them) and write the cache."""
        started = time.perf_counter()
        device = next(target_model.parameters()).device
        dtype = storage_dtype(target_model)
        folder = tempfile.TemporaryDirectory(prefix="outlets-target-cache-")
        starts, lengths = row_layout(seqs, max_len)
        n = int(lengths.sum())

        def create(name, dt, *shape):
            return np.lib.format.open_memmap(Path(folder.name) / f"{name}.npy", mode="w+",
                                             dtype=dt, shape=(n, *shape))

        out = {"fused": create("fused", np.int16, 3 * target_model.config.hidden_size)}
        if teacher:
            out |= {"p": create("p", np.float16, int(t2d.sum())),
                    "in_draft": create("in_draft", np.bool_),
                    "top": create("top", np.int32)}
        for index in make_batches(seqs, batch_tokens, max_len):
            batch = collate(seqs, index, max_len, device)
            with autocast(device, amp):
                fused, logits = target_forward(target_model, batch)
            stored = fused.to(dtype)
            if not torch.isfinite(stored).all():
                raise FloatingPointError(
                    f"target features overflow {dtype} in the target cache; "
                    "set outlets train.target_cache=off")
            rows = {"fused": stored.view(torch.int16)}
            if teacher:
                t = make_teacher(logits, t2d)
                rows |= {"p": t.p.half(), "in_draft": t.in_draft, "top": t.top.int()}
            del logits
            rows = {k: v.cpu().numpy() for k, v in rows.items()}
            for b, i in enumerate(index):
                span = slice(starts[i], starts[i] + lengths[i])
                for k, v in rows.items():
                    out[k][span] = v[b, : lengths[i]]
        for array in out.values():
            array.flush()
        del out
        return cls(folder, seqs, max_len, dtype, teacher, time.perf_counter() - started)

    def serves(self, n_seqs: int, max_len: int, teacher: bool) -> bool:
        """Whether this cache holds every row a run over n_seqs sequences at max_len reads."""
        return (n_seqs == len(self.lengths) and (self.has_teacher or not teacher)
                and (max_len <= self.max_len or self.lengths.max(initial=0) < self.max_len))

    def inputs(self, index: list[int], batch: Batch, teacher: bool
               ) -> tuple[torch.Tensor, Teacher | None]:
        """Fused features [B, T, 3H] (fp32) and the teacher for the sequences `index` as
        `batch` lays them out; padding is zero (no loss or real position reads it)."""
        rows, width = batch.ids.shape
        valid = batch.valid.sum(1).tolist()
        names = ("fused", "p", "in_draft", "top") if teacher else ("fused",)
        bufs = {k: np.zeros((rows, width, *self.arrays[k].shape[1:]), self.arrays[k].dtype)
                for k in names}
        for b, (i, n) in enumerate(zip(index, valid)):
            if n > self.lengths[i]:
                raise ValueError(f"the target cache holds {self.lengths[i]} tokens of sequence "
                                 f"{i}, the batch needs {n}")
            for k in names:
                bufs[k][b, :n] = self.arrays[k][self.starts[i]: self.starts[i] + n]
        device = batch.ids.device
        fused = torch.from_numpy(bufs["fused"]).view(self.dtype).to(device).float()
        if not teacher:
            return fused, None
        return fused, Teacher(torch.from_numpy(bufs["p"]).to(device).float(),
                              torch.from_numpy(bufs["in_draft"]).to(device),
                              torch.from_numpy(bufs["top"]).to(device).long())

    def describe(self) -> dict:
        return {"mode": "cached", "bytes": self.nbytes, "tokens": int(self.lengths.sum()),
                "dtype": str(self.dtype).removeprefix("torch."), "teacher": self.has_teacher,
                "build_seconds": round(self.build_seconds, 3)}

    def close(self) -> None:
        """Remove the files (also done when the cache is garbage collected)."""
        self.arrays = {}
        self._folder.cleanup()


def open_target_cache(target_model, seqs: list[Sequence], cfg: TrainConfig, t2d: torch.Tensor,
                      teacher: bool) -> tuple[TargetCache | None, dict]:
    """The cache when cfg.target_cache asks for one (None: train online), and a record of the
    decision for the report."""
    estimate = cache_bytes(seqs, cfg.max_len, target_model.config.hidden_size, int(t2d.sum()),
                           teacher)
    record = {"setting": cfg.target_cache, "estimated_bytes": estimate,
              "max_bytes": cfg.target_cache_max_bytes}
    if cfg.target_cache == "off" or (cfg.target_cache == "auto"
                                     and estimate > cfg.target_cache_max_bytes):
        return None, record | {"mode": "online"}
    cache = TargetCache.build(target_model, seqs, cfg.max_len, t2d, teacher, cfg.batch_tokens,
                              cfg.amp)
    log.info("outlets target cache: %d tokens, %.1f MB, built in %.1f s",
             cache.lengths.sum(), cache.nbytes / 1e6, cache.build_seconds)
    return cache, record | cache.describe()


def lr_lambda(warmup: int, total: int):
    """Linear warmup to the peak, then linear decay to zero at the last step."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return f


def train_draft(draft: DraftModel, target_model, seqs: list[Sequence], cfg: TrainConfig,
                seed: int = 0, train_backbone: bool = True, description: str = "outlets",
                progress: bool = True, cache: TargetCache | None = None) -> dict:
    """Fit the draft (or only its length head when train_backbone is False); return history.
    `cache`: a TargetCache over seqs to train from (shared between phases; the caller closes
    it); without one that serves this run, cfg.target_cache decides and this call owns it."""
    device = next(target_model.parameters()).device
    use_sd = uses_sd(draft, cfg)
    own = cache is None or not cache.serves(len(seqs), cfg.max_len, use_sd)
    if own:
        cache, cache_record = open_target_cache(target_model, seqs, cfg, draft.t2d, use_sd)
    else:
        cache_record = {"setting": cfg.target_cache, **cache.describe(), "shared": True}
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
                  disable=not progress) as bar, \
            closing(cache) if own and cache is not None else nullcontext():
        task = bar.add_task(description, total=total, info="")
        for epoch in range(cfg.epochs):
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
            history.append({"epoch": epoch, "steps": epoch_steps,
                            "seconds": round(time.perf_counter() - started, 3),
                            **{k: v / max(epoch_steps, 1) for k, v in sums.items()}})
            log.info("%s epoch %d: %s", description, epoch, ", ".join(
                f"{k} {v:.4f}" for k, v in history[-1].items()
                if k not in ("epoch", "steps", "seconds")))
            if step >= total:
                break
    draft.eval()
    return {"steps": step, "batches_per_epoch": len(batches), "history": history,
            "target_cache": cache_record}


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
