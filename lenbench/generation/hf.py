"""Hugging Face generation backend: sampling with finished slots refilled at once.

Plain `model.generate` pads every batch to its longest response, so on heavy-tailed lengths most
decoded slots are padding. Here a batch of at most `batch_size` rows decodes one token per step;
when a row emits EOS (or hits `max_new_tokens`) it leaves and a waiting request takes its place
after a prefill of its own. The KV cache stays left-aligned per row: a new row's prompt is written
at the right end of the cache and masked on the left, and columns that no live row uses are
trimmed. Each request samples from its own seeded random stream, so a request's tokens do not
depend on which other requests shared its batch.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters shared by every backend (recorded with the labels)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256


@dataclass(frozen=True)
class GenRequest:
    """One sample to generate: prompt token ids and the seed of its private random stream."""

    prompt_ids: tuple[int, ...]
    seed: tuple[int, ...]


@dataclass
class GenResult:
    output_ids: list[int]
    finish_reason: str  # "stop" (EOS emitted, counted in L) or "length" (right-censored)


@dataclass
class GenStats:
    """Decoder utilisation: how many decoded row-slots carried a real response token."""

    decode_steps: int = 0
    decoded_slots: int = 0
    real_tokens: int = 0
    kv_columns: int = 0  # sum over steps of rows x cache columns (attention work)
    kv_real: int = 0  # of which unmasked (real tokens)

    @property
    def real_token_fraction(self) -> float:
        return self.real_tokens / self.decoded_slots if self.decoded_slots else 1.0

    @property
    def kv_fill(self) -> float:
        return self.kv_real / self.kv_columns if self.kv_columns else 1.0

    def add(self, other: GenStats) -> None:
        for name in ("decode_steps", "decoded_slots", "real_tokens", "kv_columns", "kv_real"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def sample_token(logits: torch.Tensor, uniform: float, cfg: SamplingConfig) -> int:
    """Inverse-CDF sampling with temperature and nucleus (top-p) filtering; greedy at T=0."""
    return sample_tokens(logits[None], [uniform], cfg)[0]


def sample_tokens(logits: torch.Tensor, uniforms: Sequence[float],
                  cfg: SamplingConfig) -> list[int]:
    """`sample_token` for every row of a batch at once; row i uses uniforms[i].

    Each row's softmax, sort and cumulative sum are computed along its own last dimension, so
    a row samples the same token whatever else is in the batch.
    """
    if cfg.temperature <= 0:
        return torch.argmax(logits, dim=-1).tolist()
    probs = torch.softmax(logits.double() / cfg.temperature, dim=-1)
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    top_p = torch.full((cum.shape[0], 1), cfg.top_p, dtype=cum.dtype)
    keep = (torch.searchsorted(cum, top_p) + 1).clamp(1, cum.shape[1])  # [B, 1]
    total = torch.gather(cum, 1, keep - 1)
    u = torch.tensor(uniforms, dtype=cum.dtype)[:, None] * total
    # rows are searched up to their own `keep`: beyond it cum only grows, so clamp suffices
    idx = torch.minimum(torch.searchsorted(cum, u), keep - 1)
    return torch.gather(order, 1, idx).squeeze(1).tolist()


def _cache_kwarg(model: torch.nn.Module) -> str:
    """transformers >= 5.2x names the cache argument `cache`; earlier releases `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _layer_tensors(cache: DynamicCache) -> list[tuple[torch.Tensor, torch.Tensor]]:
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers]
    return list(zip(cache.key_cache, cache.value_cache))  # transformers < 4.56


def _make_cache(tensors: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> DynamicCache:
    cache = DynamicCache()
    for i, (k, v) in enumerate(tensors):
        cache.update(k, v, i)
    return cache


class _Row:
    """A live request in the batch."""

    def __init__(self, index: int, request: GenRequest):
        self.index = index
        self.rng = np.random.default_rng(list(request.seed))
        self.n_prompt = len(request.prompt_ids)
        self.output: list[int] = []


class HFGenerator:
    """Generates a list of requests with continuous (slot-refilling) batching."""

    def __init__(self, model: torch.nn.Module, eos_ids: Sequence[int], batch_size: int = 32):
        self.model = model.eval()
        self.eos_ids = {int(e) for e in eos_ids}
        self.batch_size = batch_size
        self.device = next(model.parameters()).device
        self._cache_arg = _cache_kwarg(model)

    def _forward(self, ids, mask, positions, cache):
        kwargs = {self._cache_arg: cache}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **kwargs)
        return out.logits[:, -1, :].float()

    def _prefill(self, prompt_ids: tuple[int, ...]):
        cache = DynamicCache()
        ids = torch.tensor([prompt_ids], device=self.device)
        mask = torch.ones_like(ids)
        pos = torch.arange(len(prompt_ids), device=self.device)[None]
        logits = self._forward(ids, mask, pos, cache)
        return _layer_tensors(cache), logits[0]

    @torch.inference_mode()
    def generate(
        self,
        requests: Sequence[GenRequest],
        cfg: SamplingConfig,
        on_done: Callable[[int], None] | None = None,
    ) -> tuple[list[GenResult], GenStats]:
        """Generate every request; `on_done(i)` is called as request i finishes (for progress)."""
        results: list[GenResult | None] = [None] * len(requests)
        stats = GenStats()
        pending = list(range(len(requests)))[::-1]  # pop() from the end = FIFO
        rows: list[_Row] = []
        tensors: list[tuple[torch.Tensor, torch.Tensor]] = []
        cache: DynamicCache | None = None  # rebuilt from `tensors` only after rows join or leave
        mask = torch.zeros((0, 0), dtype=torch.long, device=self.device)
        next_tokens: list[int] = []

        def finish(row: _Row, reason: str) -> None:
            results[row.index] = GenResult(row.output, reason)
            if on_done is not None:
                on_done(row.index)

        def take(row: _Row, token: int) -> bool:
            """Append a sampled token; return True when the row is finished."""
            row.output.append(token)
            if token in self.eos_ids:
                finish(row, "stop")
                return True
            if len(row.output) >= cfg.max_new_tokens:
                finish(row, "length")
                return True
            return False

        while pending or rows:
            # 1. refill free slots: prefill each newcomer and splice its cache into the batch
            newcomers: list[tuple[_Row, list, int]] = []
            prefilled: dict[tuple[int, ...], tuple[list, torch.Tensor]] = {}
            while pending and len(rows) + len(newcomers) < self.batch_size:
                i = pending.pop()
                req = requests[i]
                if req.prompt_ids not in prefilled:
                    prefilled[req.prompt_ids] = self._prefill(req.prompt_ids)
                row_tensors, logits = prefilled[req.prompt_ids]
                row = _Row(i, req)
                token = sample_token(logits, float(row.rng.random()), cfg)
                if not take(row, token):
                    newcomers.append((row, row_tensors, token))
            if newcomers:
                if cache is not None:
                    tensors = _layer_tensors(cache)
                tensors, mask = self._splice(tensors, mask, [(r.n_prompt, t) for r, t, _ in newcomers])
                cache = None
                rows.extend(r for r, _, _ in newcomers)
                next_tokens.extend(tok for _, _, tok in newcomers)
            if not rows:
                continue
            # 2. one decode step for every live row
            positions = mask.sum(dim=1, keepdim=True)
            step_mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype,
                                                    device=self.device)], dim=1)
            if cache is None:
                cache = _make_cache(tensors)
            ids = torch.tensor(next_tokens, device=self.device)[:, None]
            logits = self._forward(ids, step_mask, positions, cache)  # appends to `cache`
            mask = step_mask
            stats.decode_steps += 1
            stats.decoded_slots += len(rows)
            stats.real_tokens += len(rows)
            stats.kv_columns += mask.numel()
            stats.kv_real += int(mask.sum())
            # 3. sample, retire finished rows
            keep: list[int] = []
            next_tokens = []
            uniforms = [float(row.rng.random()) for row in rows]
            for j, (row, token) in enumerate(zip(rows, sample_tokens(logits, uniforms, cfg))):
                if not take(row, token):
                    keep.append(j)
                    next_tokens.append(token)
            if len(keep) < len(rows):
                rows = [rows[j] for j in keep]
                tensors, mask = self._select(_layer_tensors(cache), mask, keep)
                cache = None
        assert all(r is not None for r in results)
        return results, stats  # type: ignore[return-value]

    def _select(self, tensors, mask, keep: list[int]):
        """Keep only the given rows, then drop cache columns no remaining row uses."""
        if not keep:
            return [], torch.zeros((0, 0), dtype=torch.long, device=self.device)
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        mask = mask.index_select(0, index)
        tensors = [(k.index_select(0, index), v.index_select(0, index)) for k, v in tensors]
        if mask.numel():
            used = mask.any(dim=0)
            first = int(torch.nonzero(used)[0]) if used.any() else mask.shape[1]
            if first > 0:
                mask = mask[:, first:]
                tensors = [(k[:, :, first:], v[:, :, first:]) for k, v in tensors]
        return tensors, mask

    def _splice(self, tensors, mask, newcomers):
        """Append newcomer rows (prompt length n, per-layer prefill tensors) right-aligned."""
        width = max([mask.shape[1]] + [n for n, _ in newcomers])
        if tensors and width > mask.shape[1]:  # left-pad the existing rows
            pad = width - mask.shape[1]
            mask = torch.nn.functional.pad(mask, (pad, 0))
            tensors = [(torch.nn.functional.pad(k, (0, 0, pad, 0)),
                        torch.nn.functional.pad(v, (0, 0, pad, 0))) for k, v in tensors]
        new_masks, new_layers = [], []
        for n, row_tensors in newcomers:
            new_masks.append(torch.cat([torch.zeros(width - n, dtype=torch.long),
                                        torch.ones(n, dtype=torch.long)]).to(self.device))
            new_layers.append([(torch.nn.functional.pad(k, (0, 0, width - n, 0)),
                                torch.nn.functional.pad(v, (0, 0, width - n, 0)))
                               for k, v in row_tensors])
        mask = torch.cat([mask] + [m[None] for m in new_masks]) if mask.numel() else \
            torch.stack(new_masks)
        merged = []
        for layer in range(len(new_layers[0])):
            ks = ([tensors[layer][0]] if tensors else []) + [nl[layer][0] for nl in new_layers]
            vs = ([tensors[layer][1]] if tensors else []) + [nl[layer][1] for nl in new_layers]
            merged.append((torch.cat(ks), torch.cat(vs)))
        return merged, mask
