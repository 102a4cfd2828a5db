"""Per-decode-step cost of the draft backbone and of the length head, measured.

One serving decode step of OUTLETS runs fc + the draft layer on the new position (attending to a
cache of `context` earlier positions), the draft LM head when drafting, and the length head. Each
part is timed separately, median over repetitions, with CUDA synchronised where present.
"""

from __future__ import annotations

import time

import torch

from lenbench.outlets.modeling import DraftModel


def _median_ms(fn, reps: int, device: str) -> float:
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    for _ in range(max(2, reps // 5)):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    times.sort()
    return 1000 * times[len(times) // 2]


@torch.no_grad()
def decode_step_ms(draft: DraftModel, batch: int, context: int = 512, reps: int = 20,
                   dtype: torch.dtype = torch.float32, amp: bool = False
                   ) -> dict[str, float | str | None]:
    """Milliseconds per decode step for batch rows each with `context` cached positions;
    `amp` times under bf16 autocast (how the draft runs on a GPU)."""
    p = next(draft.parameters())
    with torch.autocast(p.device.type, dtype=torch.bfloat16, enabled=amp):
        out = _decode_step_ms(draft, batch, context, reps, dtype)
    return {**out, "dtype": "bf16 autocast" if amp else str(dtype).removeprefix("torch.")}


def _decode_step_ms(draft, batch, context, reps, dtype):
    draft.eval()
    p = next(draft.parameters())
    device = p.device
    cfg = draft.cfg
    gen = torch.Generator(device="cpu").manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    fused = rand(batch, 1, 3 * cfg.target_hidden_size)
    token = torch.zeros((batch, 1), dtype=torch.long, device=device)
    pos = torch.full((batch, 1), context, device=device)
    cache = (rand(batch, cfg.num_heads, context, cfg.head_dim),
             rand(batch, cfg.num_heads, context, cfg.head_dim))
    see_all = torch.ones((batch, 1, 1, context), dtype=torch.bool, device=device)
    state = draft.fc(fused)

    def backbone():
        s = draft.fc(fused)
        if draft.layer is not None:  # the new position's own key joins the cached ones
            draft.step(s, token, pos, see_all, cache, (), logits=False)

    out = {"batch": batch, "context": context,
           "backbone_ms": _median_ms(backbone, reps, device),
           "length_head_ms": _median_ms(lambda: draft.length(state), reps, device),
           "draft_lm_head_ms": None}
    if draft.lm_head is not None:
        out["draft_lm_head_ms"] = _median_ms(lambda: draft.lm_head(draft.norm(state)), reps, device)
    return out
