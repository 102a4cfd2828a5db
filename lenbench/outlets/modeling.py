"""The OUTLETS backbone: an EAGLE-3 draft model with gated attention and a length head.

Read top to bottom like a `transformers` modeling file (OUTLETS, arXiv 2609.01068; EAGLE-3):

    fused   = cat(hs[2], hs[L//2], hs[L-3])                 target features   [B, T, 3H]
    s0      = fc(fused)                                      3H -> H, no bias
    a       = cat(norm_e(Emb(x_{t+1})), norm_h(s))           attention input   [B, T, 2H]
    s'      = s + o_proj(gate(a) * attention(a))             residual on the hidden stream only
    s_out   = s' + SwiGLU(norm_post(s'))                     the draft state (next step's input)
    logits  = lm_head(norm(s_out))                           over the draft vocabulary
    z_hat   = length_head(s_out)                             log1p(remaining tokens)

With `length_quantiles` the length head ends in one monotone output per QUANTILE_LEVELS level
(quantiles of log1p(remaining), trained with the pinball loss) instead of one point.

Training-time test (TTT) unrolls K steps: step k at position t reads the token x_{t+1+k} and the
state the draft produced at step k-1 at the same position, sits at RoPE position t+k, and attends
to the step-0 keys of positions <= t plus the keys of steps 1..k at position t (the diagonal).
That is exactly what chain drafting sees at inference, where step k's token is the draft's own
guess, so `ttt_attention` serves both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import torch
from torch import nn
from torch.nn import functional as F

from lenbench.contract.distributions import QUANTILE_LEVELS
from lenbench.heads.quantile_loss import MonotoneQuantiles

ATTENTIONS = ("gated", "llama")
GATES = ("elementwise", "headwise")
HEAD_INPUTS = ("prenorm", "postnorm")


def check_choices(attention: str, gate: str, head_input: str) -> None:
    """Reject an unknown attention, gate or head-input name, listing the valid ones."""
    for name, value, allowed in (("attention", attention, ATTENTIONS), ("gate", gate, GATES),
                                 ("head_input", head_input, HEAD_INPUTS)):
        if value not in allowed:
            raise ValueError(f"outlets.{name}={value!r}; use one of {list(allowed)}")


@dataclass(frozen=True)
class DraftConfig:
    """Shapes and choices of one draft backbone; [I] marks a choice the papers leave open."""

    hidden_size: int  # H, the draft's width (= the target's, as in EAGLE-3)
    target_hidden_size: int  # width of each fused target layer
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int  # the target's vocabulary V
    draft_vocab_size: int  # V_d; equal to V means no mapping
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    attention: str = "gated"  # gated (OUTLETS) | llama (EAGLE-3, the ablation)
    gate: str = "elementwise"  # [I] elementwise (Qwen3-Next) | headwise
    head_input: str = "prenorm"  # [I] the length head reads s_out before (or after) the final norm
    decoder: bool = True  # False: fused features -> fc -> length head (outlets_no_decoder)
    length_quantiles: bool = False  # True: the head emits QUANTILE_LEVELS quantiles (pinball)

    def __post_init__(self) -> None:
        check_choices(self.attention, self.gate, self.head_input)
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_heads must be a multiple of num_kv_heads (GQA)")

    @classmethod
    def from_target(cls, target_config, draft_vocab_size: int, shape: dict | None = None,
                    **choices) -> DraftConfig:
        """A draft shaped like one layer of the target, as most SpecForge configs are; `shape`
        overrides num_heads, num_kv_heads, head_dim or intermediate_size (the Qwen3-30B-A3B
        SpecForge draft uses intermediate 12288, twice the target's expert width)."""
        h = target_config.hidden_size
        heads = target_config.num_attention_heads
        shape = dict(shape or {})
        allowed = {"num_heads", "num_kv_heads", "head_dim", "intermediate_size"}
        if set(shape) - allowed:
            raise ValueError(f"outlets.draft: unknown keys {sorted(set(shape) - allowed)}; "
                             f"valid: {sorted(allowed)}")
        base = cls(
            hidden_size=h, target_hidden_size=h, num_heads=heads,
            num_kv_heads=getattr(target_config, "num_key_value_heads", None) or heads,
            head_dim=getattr(target_config, "head_dim", None) or h // heads,
            intermediate_size=target_config.intermediate_size,
            vocab_size=target_config.vocab_size,
            draft_vocab_size=min(draft_vocab_size, target_config.vocab_size),
            rope_theta=float(getattr(target_config, "rope_theta", None)
                             or (getattr(target_config, "rope_parameters", None) or {}).get(
                                 "rope_theta", 10000.0)),
            rms_norm_eps=float(getattr(target_config, "rms_norm_eps", 1e-6)), **choices)
        return replace(base, **shape) if shape else base

    def to_dict(self) -> dict:
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (Llama's default, half-split layout). x [B, h, T, d], positions [B, T]."""
    d = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    freqs = positions.float()[..., None] * inv_freq  # [B, T, d/2]
    angles = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, d]
    return (x.float() * angles.cos() + rotate_half(x.float()) * angles.sin()).to(x.dtype)


def ttt_attention(q: torch.Tensor, k0: torch.Tensor, v0: torch.Tensor, mask0: torch.Tensor,
                  diag_k: list[torch.Tensor], diag_v: list[torch.Tensor]) -> torch.Tensor:
    """Attention of one TTT step, softmaxed jointly in fp32 over two kinds of key.

    q [B, h, T, d]; k0, v0 [B, h, S, d]: the step-0 keys and values (S = T at training, the cache
    length at inference); mask0 [B, 1, T, S] True where a query may see a step-0 key (causal and
    not padding). diag_k/diag_v: keys and values of steps 1..k at each query's own position,
    each [B, h, T, d]. Returns [B, h, T, d].
    """
    with torch.autocast(q.device.type, enabled=False):  # fp32 even under bf16 autocast
        return _ttt_attention_fp32(q, k0, v0, mask0, diag_k, diag_v)


def _ttt_attention_fp32(q, k0, v0, mask0, diag_k, diag_v) -> torch.Tensor:
    scale = q.shape[-1] ** -0.5
    logits = [(q.float() @ k0.float().transpose(-1, -2)).masked_fill(~mask0, float("-inf"))]
    logits += [(q.float() * k.float()).sum(-1, keepdim=True) for k in diag_k]
    probs = torch.softmax(torch.cat(logits, dim=-1) * scale, dim=-1)
    s = k0.shape[-2]
    out = probs[..., :s] @ v0.float()
    for i, v in enumerate(diag_v):
        out = out + probs[..., s + i: s + i + 1] * v.float()
    return out.to(q.dtype)


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


class DraftAttention(nn.Module):
    """Q/K/V from the 2H concat; optional sigmoid output gate (Gated Attention, G1 position).

    The gate has its own projection W_theta: 2H -> n_h*d_h (elementwise) or 2H -> n_h
    (headwise) instead of being fused into q_proj; the two layouts differ only by a permutation
    of weights, which matters when loading checkpoints, not when training from scratch.
    """

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.cfg = cfg
        d_in, h, kv, d = 2 * cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(d_in, h * d, bias=False)
        self.k_proj = nn.Linear(d_in, kv * d, bias=False)
        self.v_proj = nn.Linear(d_in, kv * d, bias=False)
        self.o_proj = nn.Linear(h * d, cfg.hidden_size, bias=False)
        self.gate_proj = None
        if cfg.attention == "gated":
            self.gate_proj = nn.Linear(d_in, h * d if cfg.gate == "elementwise" else h, bias=False)
        self.gate_fn = torch.sigmoid  # tests swap in ones to check the gate reduces to Llama's

    def project_kv(self, a: torch.Tensor, positions: torch.Tensor):
        b, t, _ = a.shape
        c = self.cfg
        k = self.k_proj(a).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(a).view(b, t, c.num_kv_heads, c.head_dim).transpose(1, 2)
        groups = c.num_heads // c.num_kv_heads
        return repeat_kv(apply_rope(k, positions, c.rope_theta), groups), repeat_kv(v, groups)

    def forward(self, a: torch.Tensor, positions: torch.Tensor, mask0: torch.Tensor,
                cache0: tuple[torch.Tensor, torch.Tensor] | None,
                diag: list[tuple[torch.Tensor, torch.Tensor]]):
        """One TTT step. cache0 None: this is step 0 (its own keys are the step-0 keys).
        Returns the output [B, T, H] and this step's (k, v) for later steps to attend to."""
        b, t, _ = a.shape
        c = self.cfg
        q = self.q_proj(a).view(b, t, c.num_heads, c.head_dim).transpose(1, 2)
        q = apply_rope(q, positions, c.rope_theta)
        k, v = self.project_kv(a, positions)
        if cache0 is None:
            k0, v0, dk, dv = k, v, [], []
        else:
            k0, v0 = cache0
            dk, dv = [x[0] for x in diag] + [k], [x[1] for x in diag] + [v]
        out = ttt_attention(q, k0, v0, mask0, dk, dv).transpose(1, 2)  # [B, T, h, d]
        if self.gate_proj is not None:
            gate = self.gate_fn(self.gate_proj(a))
            out = out * gate.view(b, t, c.num_heads, -1)  # -1: d_h (elementwise) or 1 (headwise)
        return self.o_proj(out.reshape(b, t, -1)), (k, v)


class SwiGLU(nn.Module):
    def __init__(self, hidden: int, intermediate: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    """EAGLE-3's single "midlayer": attention over [emb, hidden], residual on hidden, MLP."""

    def __init__(self, cfg: DraftConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)  # token embedding
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)  # hidden stream
        self.self_attn = DraftAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SwiGLU(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, s, emb, positions, mask0, cache0=None, diag=()):
        a = torch.cat((self.input_layernorm(emb), self.hidden_norm(s)), dim=-1)
        attn, kv = self.self_attn(a, positions, mask0, cache0, list(diag))
        s = s + attn
        return s + self.mlp(self.post_attention_layernorm(s)), kv


def length_head(hidden: int, quantiles: bool = False) -> nn.Sequential:
    """[I] H -> H/2 -> H/4 -> 1 with ReLU: 2,623,489 parameters at H=2048, the paper's ~2.6M.
    quantiles: H/4 -> len(QUANTILE_LEVELS), made increasing by a monotone layer."""
    layers = [nn.Linear(hidden, hidden // 2), nn.ReLU(), nn.Linear(hidden // 2, hidden // 4),
              nn.ReLU(), nn.Linear(hidden // 4, len(QUANTILE_LEVELS) if quantiles else 1)]
    return nn.Sequential(*layers, *([MonotoneQuantiles()] if quantiles else []))


def causal_mask(valid: torch.Tensor, query_positions: torch.Tensor | None = None) -> torch.Tensor:
    """mask0 [B, 1, Tq, S]: query i (at sequence index query_positions[i]) sees keys j <= it
    that are not padding. valid [B, S] bool."""
    s = valid.shape[1]
    qpos = torch.arange(s, device=valid.device) if query_positions is None else query_positions
    causal = torch.arange(s, device=valid.device)[None, :] <= qpos[:, None]  # [Tq, S]
    return (causal[None] & valid[:, None, :])[:, None]


@dataclass
class DraftStep:
    """What one TTT step produced for every position."""

    state: torch.Tensor  # s_out [B, T, H], pre-norm (what the next step consumes)
    logits: torch.Tensor | None  # draft-vocab logits [B, T, V_d]
    kv: tuple[torch.Tensor, torch.Tensor] | None


class DraftModel(nn.Module):
    """fc + one draft layer + final norm + draft LM head, and the OUTLETS length head.

    The embedding table is the target's own tensor, shared and frozen (a copy of Llama-8B's
    would cost 2 GB), and it is left out of saved state. d2t/t2d map the draft vocabulary to the
    target's (lenbench/outlets/vocab.py builds them).
    """

    def __init__(self, cfg: DraftConfig, embed_weight: torch.Tensor, d2t: torch.Tensor,
                 t2d: torch.Tensor):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding.from_pretrained(embed_weight.detach(), freeze=True)
        self.fc = nn.Linear(3 * cfg.target_hidden_size, cfg.hidden_size, bias=False)
        self.layer = DraftLayer(cfg) if cfg.decoder else None
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False) \
            if cfg.decoder else None
        self.length_head = length_head(cfg.hidden_size, cfg.length_quantiles)
        self.register_buffer("d2t", d2t.long().clone())
        self.register_buffer("t2d", t2d.bool().clone())

    # --- one step -----------------------------------------------------------------------------

    def step(self, s: torch.Tensor, token_ids: torch.Tensor, positions: torch.Tensor,
             mask0: torch.Tensor, cache0=None, diag=(), logits: bool = True) -> DraftStep:
        """One draft step for the positions in s (step 0 when cache0 is None)."""
        if self.layer is None:
            return DraftStep(s, None, None)
        out, kv = self.layer(s, self.embed_tokens(token_ids), positions, mask0, cache0, diag)
        return DraftStep(out, self.lm_head(self.norm(out)) if logits else None, kv)

    def first_step(self, fused: torch.Tensor, next_ids: torch.Tensor, valid: torch.Tensor,
                   logits: bool = True) -> DraftStep:
        """Step 0 over whole sequences: fused [B, T, 3H], next_ids[t] = x_{t+1}, valid [B, T]."""
        b, t, _ = fused.shape
        positions = torch.arange(t, device=fused.device).expand(b, t)
        return self.step(self.fc(fused), next_ids, positions, causal_mask(valid), logits=logits)

    def unroll(self, fused: torch.Tensor, ids: torch.Tensor, valid: torch.Tensor,
               steps: int) -> list[DraftStep]:
        """Training-time test over K steps with teacher forcing: step k reads x_{t+1+k}."""
        b, t = ids.shape
        positions = torch.arange(t, device=ids.device).expand(b, t)
        mask0 = causal_mask(valid)
        out = [self.first_step(fused, shift_left(ids, 1), valid)]
        cache0, diag = out[0].kv, []
        for k in range(1, steps):
            st = self.step(out[-1].state, shift_left(ids, 1 + k), positions + k, mask0,
                           cache0, diag)
            diag.append(st.kv)
            out.append(st)
        return out

    # --- heads --------------------------------------------------------------------------------

    @property
    def length_levels(self) -> tuple[float, ...] | None:
        """The quantile levels of the length head's outputs (None: one point estimate)."""
        return QUANTILE_LEVELS if self.cfg.length_quantiles else None

    def length(self, state: torch.Tensor) -> torch.Tensor:
        """Predicted log1p(remaining tokens) from draft states [..., H] ([..., Q] quantiles with
        `length_quantiles`), outside autocast, in the head's own dtype (fp32 when trained: a
        bf16 output would quantise predictions by up to 1.6%)."""
        x = self.norm(state) if self.cfg.head_input == "postnorm" and self.layer else state
        with torch.autocast(x.device.type, enabled=False):
            return self.length_head(x.to(self.length_head[0].weight.dtype)).squeeze(-1)

    def to_target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]

    # --- bookkeeping --------------------------------------------------------------------------

    def trained_state(self) -> dict[str, torch.Tensor]:
        """The state to save: everything but the target's embedding table."""
        return {k: v for k, v in self.state_dict().items() if k != "embed_tokens.weight"}

    def load_trained_state(self, state: dict[str, torch.Tensor]) -> None:
        """Put back weights `trained_state` kept; the embedding stays the target's own.
        Weights of another draft (other names or shapes) are refused with a ValueError."""
        try:
            missing, unexpected = self.load_state_dict(state, strict=False)
        except RuntimeError as err:  # torch's size mismatch
            raise ValueError(f"saved draft weights do not fit this draft: {err}") from err
        if unexpected or set(missing) - {"embed_tokens.weight"}:
            raise ValueError(f"saved draft weights do not fit this draft (missing "
                             f"{sorted(missing)}, unexpected {sorted(unexpected)})")

    def backbone_parameters(self) -> list[nn.Parameter]:
        mods = [self.fc, self.norm] + ([self.layer, self.lm_head] if self.layer else [])
        return [p for m in mods for p in m.parameters()]

    def parameter_counts(self) -> dict[str, int]:
        def count(ps):
            return sum(p.numel() for p in ps)

        layer = count(self.layer.parameters()) if self.layer else 0
        return {"backbone": count(self.backbone_parameters()), "fc": count(self.fc.parameters()),
                "decoder_layer": layer,
                "draft_lm_head": count(self.lm_head.parameters()) if self.lm_head else 0,
                "length_head": count(self.length_head.parameters()),
                "frozen_embedding": self.embed_tokens.weight.numel()}


def shift_left(x: torch.Tensor, by: int) -> torch.Tensor:
    """x[:, t] <- x[:, t + by], zero-filled at the end (EAGLE's `padding(..., left=False)`)."""
    if by == 0:
        return x
    pad = torch.zeros_like(x[:, :by])
    return torch.cat((x[:, by:], pad), dim=1)[:, : x.shape[1]]
