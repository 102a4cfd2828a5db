"""The data types and batching shared by training, the target cache and speculative decoding.

Lives apart from `train` so the target cache (which batches sequences and runs the target the
way training does) and training (which reads the cache) import these one way:
batches <- target_cache <- train. Sequences are grouped by similar length under a padded-token
budget; `target_forward` is the frozen target's teacher-forced pass (fused EAGLE-3 features and
logits); `autocast` is bf16 on devices that support it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from lenbench.contract.features import role_layers
from lenbench.runtime.batching import length_batches, pad_right


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
    amp: str = "auto"  # training and the target cache: auto: bf16 autocast on CUDA with bf16
    # support; bf16: always; off: fp32. Prediction is float32 whatever this says (draft_states)
    max_steps: int | None = None  # stop early (quick runs)
    patience: int = 0  # > 0: after each epoch score the objective on the validation rows, stop
    # when it has not improved for this many epochs and keep the best epoch's weights (epochs is
    # then the budget); 0: train all epochs
    target_cache: str = "auto"  # on: run the target once and train every epoch from a disk
    # cache; off: run it on every batch (targets too large to cache); auto: on when the cache's
    # estimated size is within target_cache_max_bytes
    target_cache_max_bytes: int = 4_000_000_000

    def __post_init__(self) -> None:
        if self.sd_mask not in ("predicted", "eagle"):
            raise ValueError(f"outlets.train.sd_mask={self.sd_mask!r}; use 'predicted' or 'eagle'")
        if isinstance(self.target_cache, bool):  # YAML reads a bare on / off as a boolean
            object.__setattr__(self, "target_cache", "on" if self.target_cache else "off")
        if self.patience < 0:
            raise ValueError(f"outlets.train.patience={self.patience}; use 0 (train every "
                             "epoch) or a positive number of epochs")
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
def target_forward(model, batch: Batch, with_head: bool = True
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Fused EAGLE-3 features [B, T, 3H] (fp32) and logits [B, T, V] (the target's dtype).

    `with_head=False` runs the model without its output head and returns None for the logits:
    what needs no SD teacher (prediction, training without the SD loss, a cache of the features
    alone) skips the largest tensor of the pass (16k tokens x 49k vocabulary: 3.2 GB in fp32).
    The features are the same."""
    net = model if with_head else model.base_model
    out = net(input_ids=batch.ids, attention_mask=batch.valid.long(),
              output_hidden_states=True, use_cache=False)
    layers = role_layers(model.config.num_hidden_layers)
    fused = torch.cat([out.hidden_states[layers[r]] for r in ("low", "mid", "high")], dim=-1)
    return fused.float(), (out.logits if with_head else None)


def autocast(device: str, amp: str):
    use = amp == "bf16" or (amp == "auto" and str(device).startswith("cuda")
                            and torch.cuda.is_bf16_supported())
    return torch.autocast("cuda" if str(device).startswith("cuda") else "cpu",
                          dtype=torch.bfloat16, enabled=use)
