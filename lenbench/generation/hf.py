"""Hugging Face generation backend: sampling with finished slots refilled at once.

Plain `model.generate` pads every batch to its longest response, so on heavy-tailed lengths most
decoded slots are padding. Here a batch of at most `batch_size` rows decodes one token per step;
when a row emits EOS (or hits `max_new_tokens`) it leaves and a waiting request takes its slot
after a prefill of its own. Keys and values live in a preallocated buffer with one row per slot
and one column per position: every live row writes its next token in the same column, a
newcomer's prompt is written right-aligned just before it, and the columns left of a row's start
are masked, so rows come and go without copying the cache. Each request samples from its own
seeded random stream, so a request's tokens do not depend on which other requests shared its
batch.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from lenbench.generation.protocol import (
    Generated,
    Generator,
    GenRequest,
    GenResult,
    GenStats,
    OnDone,
    SamplingConfig,
)


def sample_token(logits: torch.Tensor, uniform: float, cfg: SamplingConfig,
                 seen: torch.Tensor | None = None) -> int:
    """Inverse-CDF sampling with temperature and nucleus (top-p) filtering; greedy at T=0.
    `seen` (a bool mask over the vocabulary) marks the tokens the repetition penalty lowers."""
    return sample_tokens(logits[None], [uniform], cfg,
                         None if seen is None else seen[None])[0]


def penalize_repeats(logits: torch.Tensor, seen: torch.Tensor, penalty: float) -> torch.Tensor:
    """The repetition penalty on each row's seen tokens: a positive logit divided by it, a
    negative one multiplied, so a seen token always loses probability."""
    lowered = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, lowered, logits)


# candidate-set sizes tried before sorting the whole vocabulary
_CANDIDATES = (64, 2048)


def sample_tokens(logits: torch.Tensor, uniforms: Sequence[float],
                  cfg: SamplingConfig, seen: torch.Tensor | None = None) -> list[int]:
    """`sample_token` for every row of a batch at once; row i uses uniforms[i].

    The token is defined by a stable descending sort of the float64 probabilities
    (`_sample_sorted`). Sorting the whole vocabulary is the expensive part, so rows are first
    tried on their most probable tokens only (`_sample_candidates`), which is accepted only where
    it provably gives the same token; the remaining rows fall back to the full sort. Every step
    works along each row on its own, so a row samples the same token whatever else is in the batch.
    `seen` [B, V] marks each row's prompt and answer tokens, for `cfg.repetition_penalty`.
    """
    if cfg.repetition_penalty != 1:
        if seen is None:
            raise ValueError("a repetition penalty needs each row's seen tokens")
        logits = penalize_repeats(logits, seen, cfg.repetition_penalty)
    if cfg.temperature <= 0:
        return torch.argmax(logits, dim=-1).tolist()
    scaled = logits.double()
    if cfg.temperature != 1:  # x / 1.0 == x: skip a pass over the vocabulary
        scaled = scaled / cfg.temperature
    probs = torch.softmax(scaled, dim=-1)
    u = torch.tensor(uniforms, dtype=probs.dtype, device=probs.device)[:, None]
    tokens = torch.zeros(probs.shape[0], dtype=torch.long, device=probs.device)
    todo = torch.arange(probs.shape[0], device=probs.device)
    # the shortcut relies on cumsum adding left to right, as the CPU kernel does
    for k in _CANDIDATES if probs.device.type == "cpu" else ():
        if k >= probs.shape[1] or not len(todo):
            break
        rows = probs if len(todo) == len(probs) else probs[todo]
        found, picked = _sample_candidates(rows, u[todo], cfg.top_p, k)
        tokens[todo[found]] = picked[found]
        todo = todo[~found]
    if len(todo):
        tokens[todo] = _sample_sorted(probs[todo], u[todo], cfg.top_p)
    return tokens.tolist()


def _sample_sorted(probs: torch.Tensor, u: torch.Tensor, top_p: float) -> torch.Tensor:
    """The reference rule: inverse CDF over the stably sorted probabilities, cut at top_p."""
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    cum = torch.cumsum(sorted_p, dim=-1)
    keep = (torch.searchsorted(cum, torch.full_like(u, top_p)) + 1).clamp(1, cum.shape[1])
    total = torch.gather(cum, 1, keep - 1)
    # rows are searched up to their own `keep`: beyond it cum only grows, so clamp suffices
    idx = torch.minimum(torch.searchsorted(cum, u * total), keep - 1)
    return torch.gather(order, 1, idx).squeeze(1)


def _sample_candidates(probs: torch.Tensor, u: torch.Tensor, top_p: float,
                       k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`_sample_sorted` from the k most probable tokens: (found, token) per row.

    The k largest values, ordered as the full stable sort orders them, are the full sort's first
    k values, so their cumulative sums are bit for bit the full ones (cumsum adds left to right);
    only tokens tied with the k-th value may differ, so a pick must land strictly above it. If
    the nucleus ends beyond the candidates, its mass (`total`) is not known exactly, only bounds:
    at least the candidates' mass and min(top_p, full sum), at most the full sum and top_p plus
    the k-th value (sums allowing for their worst-case rounding error); the pick is accepted only
    if both bounds give it.
    """
    vals, ids = torch.topk(probs, k, dim=-1)
    ids, by_id = ids.sort(dim=-1)  # ties in token order, as the stable sort leaves them
    vals, order = torch.sort(vals.gather(1, by_id), dim=-1, descending=True, stable=True)
    ids = ids.gather(1, order)
    cum = torch.cumsum(vals, dim=-1)
    exact = (vals > vals[:, -1:]).sum(dim=1, keepdim=True)  # leading tokens known to match
    top_p = torch.full_like(u, top_p)
    cut = torch.searchsorted(cum, top_p)  # k: the nucleus ends beyond the candidates
    inside = cut < k
    total = cum.gather(1, cut.clamp(max=k - 1))
    pick = torch.minimum(torch.searchsorted(cum, u * total), cut)
    full = probs.sum(dim=1, keepdim=True)
    rounding = 4 * probs.shape[1] * 2.0 ** -53
    low = torch.maximum(cum[:, -1:], torch.minimum(top_p, full * (1 - rounding)))
    high = torch.minimum(full * (1 + rounding), top_p + vals[:, -1:])
    pick_low = torch.searchsorted(cum, u * low)
    pick_high = torch.searchsorted(cum, u * high)
    pick = torch.where(inside, pick, pick_high)
    found = (pick < exact) & (inside | (pick_low == pick_high))
    return found.squeeze(1), ids.gather(1, pick.clamp(max=k - 1)).squeeze(1)


ROW_ATTENTION = "lenbench_rows"


def _row_attention(module, query, key, value, attention_mask, row_starts=None, row_window=None,
                   **kwargs):
    """Decode-step attention one row at a time, over that row's own columns only.

    The rows of a decode step share one key/value slice from the oldest row's first column, so
    a young row's attention would otherwise run over hundreds of masked columns (with a long cap
    most of the work); and the masked width depended on which rows shared the batch, which could
    change a row's rounding. Here each row attends over exactly [its start, now]: no mask, no
    wasted columns, and a row's result does not depend on its neighbours. Prefills (several
    query positions) and calls without `row_starts` take the usual SDPA path.
    """
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if row_starts is None or query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    # the generator's own decision (sliding layers declared), on the layers that slide
    window = row_window if getattr(module, "sliding_window", None) else None
    width = key.shape[2]
    outs = []
    for i, lo in enumerate(row_starts):
        if window:  # a sliding-window layer sees only the last `window` positions
            lo = max(lo, width - window)
        out, _ = sdpa_attention_forward(module, query[i:i + 1], key[i:i + 1, :, lo:],
                                        value[i:i + 1, :, lo:], None, **kwargs)
        outs.append(out)
    return torch.cat(outs, 0), None


def _register_row_attention() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ROW_ATTENTION, _row_attention)


def cache_kwarg(model: torch.nn.Module) -> str:
    """transformers >= 5.2x names the cache argument `cache`; earlier releases `past_key_values`."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


class _SlotCache(DynamicCache):
    """Preallocated keys and values: one row per batch slot, one column per position.

    A decode step writes one column (`col`) of the first `n` slots and attends over columns
    [`start`, `col`]; a prefill (`rows` set) writes its prompt, right-aligned to end before `col`,
    into the given slots. Nothing is concatenated or rebuilt when rows come and go; only when
    `col` reaches the right end are the used columns shifted left (`shift`).
    """

    def __init__(self, slots: int, width: int):
        super().__init__()
        self.slots, self.width = slots, width
        self.buffers: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.col = self.start = 0
        self.rows: torch.Tensor | None = None  # prefill: the slots that get this prompt

    def update(self, keys, values, layer_idx, *args, **kwargs):
        if layer_idx not in self.buffers:  # zeros: masked columns must not hold NaN
            shape = (self.slots, keys.shape[1], self.width, keys.shape[3])
            self.buffers[layer_idx] = (keys.new_zeros(shape), values.new_zeros(shape))
        k_buf, v_buf = self.buffers[layer_idx]
        if self.rows is not None:
            cols = slice(self.col - keys.shape[2], self.col)
            k_buf[:, :, cols].index_copy_(0, self.rows, keys.expand(len(self.rows), -1, -1, -1))
            v_buf[:, :, cols].index_copy_(0, self.rows, values.expand(len(self.rows), -1, -1, -1))
            return keys, values
        n = keys.shape[0]
        k_buf[:n, :, self.col:self.col + 1] = keys
        v_buf[:n, :, self.col:self.col + 1] = values
        return k_buf[:n, :, self.start:self.col + 1], v_buf[:n, :, self.start:self.col + 1]

    def _all(self) -> list[torch.Tensor]:
        return [buf for pair in self.buffers.values() for buf in pair]

    def move(self, dst: list[int], src: list[int], lo: int) -> None:
        """Copy slots src[i] to dst[i] (columns lo .. col-1)."""
        for buf in self._all():
            view = buf[:, :, lo:self.col]
            view.index_copy_(0, torch.tensor(dst, device=buf.device),
                             view.index_select(0, torch.tensor(src, device=buf.device)))

    def shift(self, n: int, lo: int, by: int) -> None:
        """Move columns lo .. col-1 of the first n slots `by` columns to the left."""
        for buf in self._all():
            buf[:n, :, lo - by:self.col - by] = buf[:n, :, lo:self.col].clone()
        self.col -= by


class _Prefill:
    """A prompt's prefilled keys and values (every layer) and last logits, kept for its samples
    still waiting for a slot: copying them in gives those samples what a prefill of their own
    would (positions count from a row's start, so where the prompt lands does not matter)."""

    def __init__(self, kv: dict[int, tuple[torch.Tensor, torch.Tensor]], logits: torch.Tensor):
        self.kv, self.logits = kv, logits

    @classmethod
    def keep(cls, cache: _SlotCache, slot: int, n: int, logits: torch.Tensor) -> _Prefill:
        cols = slice(cache.col - n, cache.col)
        return cls({layer: (k[slot, :, cols].clone(), v[slot, :, cols].clone())
                    for layer, (k, v) in cache.buffers.items()}, logits)

    def copy_into(self, cache: _SlotCache, slots: list[int]) -> torch.Tensor:
        for layer, (k, v) in self.kv.items():
            k_buf, v_buf = cache.buffers[layer]
            cols = slice(cache.col - k.shape[1], cache.col)
            for j in slots:
                k_buf[j, :, cols] = k
                v_buf[j, :, cols] = v
        return self.logits


class _Row:
    """A live request in the batch."""

    def __init__(self, index: int, request: GenRequest):
        self.index = index
        self.rng = np.random.default_rng(list(request.seed))
        self.prompt_ids = request.prompt_ids
        self.output: list[int] = []
        self.start = 0  # cache column of its first prompt token
        self.seen: torch.Tensor | None = None  # prompt and answer tokens (repetition penalty)


class HFGenerator(Generator):
    """Generates a list of requests with continuous (slot-refilling) batching.

    `spare_columns` is how far the cache may run before its columns are shifted left.
    """

    def __init__(self, model: torch.nn.Module, eos_ids: Sequence[int], batch_size: int = 32,
                 spare_columns: int = 64):
        self.model = model.eval()
        self.eos_ids = {int(e) for e in eos_ids}
        self.batch_size = batch_size
        self.spare_columns = spare_columns
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self._cache_arg = cache_kwarg(model)
        self.live_stats = GenStats()  # the current (or last) call's decoder work so far
        _register_row_attention()
        self._attention_configs = list({id(m.config): m.config for m in model.modules()
                                        if hasattr(m, "layer_idx") and hasattr(m, "config")
                                        and hasattr(m.config, "_attn_implementation_internal")
                                        }.values())
        layer_types = getattr(model.config, "layer_types", None) or []
        # sliding-window layers (Gemma 3) need their own mask: a 4-D mask is used as given
        self.window = getattr(model.config, "sliding_window", None) \
            if "sliding_attention" in layer_types else None

    def _mask(self, allowed: torch.Tensor) -> torch.Tensor:
        mask = torch.zeros(allowed.shape, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~allowed, torch.finfo(self.dtype).min)[:, None]

    def _forward(self, ids, allowed, positions, cache, distance, row_starts=None):
        """Logits of each row's last position; `allowed` [B, Q, K] says what each query sees,
        `distance` [Q, K] how many columns each key lies before each query. A decode step
        passes `row_starts` (each row's first column in the key slice): its attention then runs
        row by row over each row's own columns (`_row_attention`)."""
        mask = self._mask(allowed)
        if self.window is not None:
            mask = {"full_attention": mask,
                    "sliding_attention": self._mask(allowed & (distance < self.window)[None])}
        kwargs = {self._cache_arg: cache}
        # only the attention layers' own configs switch, and each gets back exactly its value
        configs = self._attention_configs if row_starts is not None else []
        usual = [c._attn_implementation_internal for c in configs]
        if configs and all(u == "sdpa" for u in usual):
            kwargs.update(row_starts=row_starts, row_window=self.window)
            for c in configs:
                c._attn_implementation_internal = ROW_ATTENTION
        try:
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                             use_cache=True, logits_to_keep=1, **kwargs)
        finally:
            for c, u in zip(configs, usual):
                c._attn_implementation_internal = u
        return out.logits[:, -1, :].float()

    def _prefill(self, cache: _SlotCache, prompt_ids: tuple[int, ...], slots: list[int]):
        """Run one prompt into the given slots, ending before `cache.col`; return its last logits.

        One prompt per forward, unpadded: a prompt's prefill is then the same computation
        whichever requests it shares a batch with (padding it into a batch shifts its positions
        and changes rounding enough to flip sampled tokens now and then).
        """
        ids = torch.tensor([prompt_ids], device=self.device)
        cols = torch.arange(len(prompt_ids), device=self.device)
        cache.rows = torch.tensor(slots, device=self.device)
        try:
            return self._forward(ids, (cols[None, :] <= cols[:, None])[None], cols[None], cache,
                                 cols[:, None] - cols[None, :])[0]
        finally:
            cache.rows = None

    @torch.inference_mode()
    def generate(self, requests: Sequence[GenRequest], cfg: SamplingConfig,
                 on_done: OnDone | None = None) -> Generated:
        """Generate every request; `on_done(i, result)` is called as request i finishes.

        `live_stats` counts the decoder's work so far during the call (the runner attributes
        it to the shards as they finish)."""
        results: list[GenResult | None] = [None] * len(requests)
        stats = self.live_stats = GenStats()
        if not requests:
            return [], stats
        longest = max(len(r.prompt_ids) for r in requests)
        cache = _SlotCache(min(self.batch_size, len(requests)),
                           longest + cfg.max_new_tokens + self.spare_columns)
        cache.col = longest  # room for any prompt to the left of the write column
        slots: list[_Row | None] = [None] * cache.slots  # live rows are packed to the front
        pending = list(range(len(requests)))[::-1]  # pop() from the end = FIFO
        # a prompt's samples may be admitted at different steps (one slot frees at a time):
        # its prefill is kept until its last queued sample has a slot, then copied, not redone
        queued = Counter(r.prompt_ids for r in requests)
        penalized = cfg.repetition_penalty != 1
        prefilled: dict[tuple[int, ...], _Prefill] = {}

        def take(row: _Row, token: int) -> bool:
            """Append a sampled token; return True when the row is finished."""
            row.output.append(token)
            if row.seen is not None:
                row.seen[token] = True
            reason = "stop" if token in self.eos_ids else \
                "length" if len(row.output) >= cfg.max_new_tokens else None
            if reason is None:
                return False
            results[row.index] = GenResult(row.output, reason)
            if on_done is not None:
                on_done(row.index, results[row.index])
            return True

        while pending or any(slots):
            # 1. refill free slots: prefill each distinct prompt once; its first token may end it
            while pending and None in slots:
                free = [j for j, row in enumerate(slots) if row is None]
                newcomers = [_Row(i, requests[i])
                             for i in [pending.pop() for _ in range(min(len(free), len(pending)))]]
                groups: dict[tuple[int, ...], list[int]] = {}
                for j, row in zip(free, newcomers):
                    groups.setdefault(row.prompt_ids, []).append(j)
                logits = {}
                for p, js in groups.items():
                    if p in prefilled:
                        logits[p] = prefilled[p].copy_into(cache, js)
                    else:
                        logits[p] = self._prefill(cache, p, js)
                    queued[p] -= len(js)
                    if queued[p] and p not in prefilled:
                        prefilled[p] = _Prefill.keep(cache, js[0], len(p), logits[p])
                    elif not queued[p]:
                        prefilled.pop(p, None)
                for j, row in zip(free, newcomers):
                    row.start = cache.col - len(row.prompt_ids)
                    if penalized:
                        row.seen = torch.zeros(logits[row.prompt_ids].shape[-1],
                                               dtype=torch.bool, device=self.device)
                        row.seen[list(row.prompt_ids)] = True
                    token = sample_token(logits[row.prompt_ids], float(row.rng.random()), cfg,
                                         row.seen)
                    if not take(row, token):
                        slots[j] = row
            # 2. keep the live rows in the first slots: rows at the end move into the holes
            live = [j for j, row in enumerate(slots) if row is not None]
            n = len(live)
            if not n:
                continue
            holes = [j for j in range(n) if slots[j] is None]
            if holes:
                movers = [j for j in live if j >= n]
                cache.move(holes, movers, min(slots[j].start for j in movers))
                for h, j in zip(holes, movers):
                    slots[h], slots[j] = slots[j], None
            rows: list[_Row] = slots[:n]  # type: ignore[assignment]
            starts = torch.tensor([row.start for row in rows], device=self.device)
            lo = int(starts.min())
            if cache.col == cache.width:  # out of columns: shift left, keeping room for prompts
                by = min(lo, cache.col - longest)
                cache.shift(n, lo, by)
                starts -= by
                lo -= by
                for row in rows:
                    row.start -= by
            # 3. one decode step for every live row, over the columns they use
            cache.start = lo
            cols = torch.arange(lo, cache.col + 1, device=self.device)
            allowed = (cols[None, :] >= starts[:, None])[:, None]
            ids = torch.tensor([row.output[-1] for row in rows], device=self.device)[:, None]
            logits = self._forward(ids, allowed, (cache.col - starts)[:, None], cache,
                                   (cache.col - cols)[None], row_starts=(starts - lo).tolist())
            cache.col += 1
            stats.decode_steps += 1
            stats.decoded_slots += n
            stats.real_tokens += n
            stats.kv_columns += n * len(cols)
            stats.kv_real += int((cache.col - starts).sum())
            # 4. sample, free the slots of finished rows
            uniforms = [float(row.rng.random()) for row in rows]
            seen = torch.stack([row.seen for row in rows]) if penalized else None
            for j, (row, token) in enumerate(zip(rows, sample_tokens(logits, uniforms, cfg,
                                                                     seen))):
                if take(row, token):
                    slots[j] = None
        assert all(r is not None for r in results)
        return results, stats  # type: ignore[return-value]
