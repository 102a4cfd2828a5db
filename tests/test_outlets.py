"""OUTLETS backbone: TTT attention, vocabulary mapping, gate, losses, speculative decoding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from helpers.worlds import H, V, draft_for, tiny_world

from lenbench.outlets.batches import Batch, Sequence, TrainConfig, collate, target_forward
from lenbench.outlets.modeling import DraftConfig, DraftModel, apply_rope, shift_left
from lenbench.outlets.speculative import SpecStats, draft_chain, speculative_generate
from lenbench.outlets.train import batch_loss, train_draft
from lenbench.outlets.vocab import build_draft_vocab, draft_to_target, target_to_draft


def make_draft(attention: str = "gated", gate: str = "elementwise", vocab: int = 48,
               seed: int = 0, decoder: bool = True) -> DraftModel:
    cfg = DraftConfig(hidden_size=H, target_hidden_size=H, num_heads=4, num_kv_heads=2,
                      head_dim=8, intermediate_size=64, vocab_size=V, draft_vocab_size=vocab,
                      attention=attention, gate=gate, decoder=decoder)
    rng = np.random.default_rng(seed)
    d2t, t2d, _ = build_draft_vocab([rng.integers(0, V, 200)], V, vocab)
    torch.manual_seed(seed)
    return DraftModel(cfg, torch.randn(V, H), d2t, t2d).eval()


def naive_unroll(draft: DraftModel, fused: torch.Tensor, ids: torch.Tensor, steps: int):
    """The TTT pattern written out one query at a time: step k at position t sits at RoPE
    position t+k, reads x_{t+1+k} and the step-(k-1) state at t, and attends to the step-0 keys of
    positions 0..t and the keys of steps 1..k at position t."""
    layer, attn, cfg = draft.layer, draft.layer.self_attn, draft.cfg
    T = ids.shape[1]
    groups = cfg.num_heads // cfg.num_kv_heads
    states, keys = {}, {}

    def heads(x, n):  # [2H] -> [n, 1, 1, d] for apply_rope's [B, h, T, d]
        return x.view(n, cfg.head_dim)[:, None, None, :]

    for k in range(steps):
        for t in range(T):
            s = draft.fc(fused[0, t]) if k == 0 else states[(k - 1, t)]
            tok = ids[0, t + 1 + k] if t + 1 + k < T else torch.tensor(0)
            a = torch.cat((layer.input_layernorm(draft.embed_tokens(tok)), layer.hidden_norm(s)))
            pos = torch.tensor([[t + k]])
            q = apply_rope(heads(attn.q_proj(a), cfg.num_heads), pos.expand(cfg.num_heads, 1),
                           cfg.rope_theta)[:, 0, 0]
            kk = apply_rope(heads(attn.k_proj(a), cfg.num_kv_heads),
                            pos.expand(cfg.num_kv_heads, 1), cfg.rope_theta)[:, 0, 0]
            keys[(k, t)] = (kk.repeat_interleave(groups, 0),
                            attn.v_proj(a).view(cfg.num_kv_heads, -1).repeat_interleave(groups, 0))
            visible = [keys[(0, j)] for j in range(t + 1)] + [keys[(i, t)] for i in range(1, k + 1)]
            kmat = torch.stack([x[0] for x in visible], 1)  # [h, n_keys, d]
            vmat = torch.stack([x[1] for x in visible], 1)
            w = torch.softmax((q[:, None, :] * kmat).sum(-1) / cfg.head_dim ** 0.5, dim=-1)
            out = (w[..., None] * vmat).sum(1)  # [h, d]
            if attn.gate_proj is not None:
                out = out * torch.sigmoid(attn.gate_proj(a)).view(cfg.num_heads, -1)
            s_mid = s + attn.o_proj(out.reshape(-1))
            states[(k, t)] = s_mid + layer.mlp(layer.post_attention_layernorm(s_mid))
    return states


@pytest.mark.parametrize("attention,gate", [("gated", "elementwise"), ("gated", "headwise"),
                                            ("llama", "elementwise")])
def test_ttt_attention_equals_a_naive_step_by_step_reference(attention: str, gate: str) -> None:
    draft = make_draft(attention, gate)
    torch.manual_seed(1)
    T, K = 6, 4
    fused, ids = torch.randn(1, T, 3 * H), torch.randint(0, V, (1, T))
    with torch.no_grad():
        fast = draft.unroll(fused, ids, torch.ones(1, T, dtype=torch.bool), K)
        slow = naive_unroll(draft, fused, ids, K)
    for k in range(K):
        for t in range(T):
            torch.testing.assert_close(fast[k].state[0, t], slow[(k, t)], atol=1e-5, rtol=1e-4)


def test_padding_does_not_change_real_positions() -> None:
    draft = make_draft()
    torch.manual_seed(2)
    fused, ids = torch.randn(2, 7, 3 * H), torch.randint(0, V, (2, 7))
    valid = torch.ones(2, 7, dtype=torch.bool)
    valid[1, 4:] = False
    with torch.no_grad():
        both = draft.unroll(fused, ids, valid, 3)
        alone = draft.unroll(fused[1:, :4], ids[1:, :4], valid[1:, :4], 3)
    for k in range(3):  # positions whose step-k token exists in the short row
        torch.testing.assert_close(both[k].state[1, : 4 - 1 - k], alone[k].state[0, : 4 - 1 - k],
                                   atol=1e-5, rtol=1e-4)


def test_chain_drafting_at_inference_matches_the_ttt_unroll() -> None:
    """Steps 1..K-1 at one position with a step-0 cache (the inference path) give the TTT states
    at that position when fed the true tokens."""
    draft = make_draft()
    torch.manual_seed(3)
    T, K, t = 9, 4, 4
    fused, ids = torch.randn(1, T, 3 * H), torch.randint(0, V, (1, T))
    with torch.no_grad():
        unrolled = draft.unroll(fused, ids, torch.ones(1, T, dtype=torch.bool), K)
        prefix = ids[:, 1: t + 2]  # step 0 over positions 0..t reads x_1..x_{t+1}
        first = draft.first_step(fused[:, : t + 1], prefix, torch.ones_like(prefix, dtype=bool))
        torch.testing.assert_close(first.state[0, t], unrolled[0].state[0, t])
        state, diag = first.state[:, -1:], []
        see_all = torch.ones((1, 1, 1, t + 1), dtype=torch.bool)
        for k in range(1, K):
            st = draft.step(state, ids[:, t + 1 + k: t + 2 + k], torch.tensor([[t + k]]), see_all,
                            first.kv, diag)
            diag.append(st.kv)
            state = st.state
            torch.testing.assert_close(state[0, 0], unrolled[k].state[0, t], atol=1e-5, rtol=1e-4)
    guesses = draft_chain(draft, fused, ids[0, : t + 2].tolist(), 1)
    assert guesses == [draft.to_target_ids(unrolled[0].logits[0, t].argmax()).item()]


def test_draft_vocab_round_trips_and_keeps_the_most_frequent_tokens() -> None:
    responses = [[5, 5, 5, 9, 9, 30, 2], [30, 30, 30, 30, 7]]
    d2t, t2d, card = build_draft_vocab(responses, vocab_size=40, draft_vocab_size=4)
    targets = draft_to_target(torch.arange(4), d2t)
    assert targets.tolist() == [2, 5, 9, 30]  # 30, 5, 9 by count; 2 beats 7 on the tie
    assert t2d.sum() == 4 and t2d[targets].all()
    assert target_to_draft(targets, t2d).tolist() == [0, 1, 2, 3]
    assert target_to_draft(torch.tensor([7, 0]), t2d).tolist() == [-1, -1]
    assert card["distinct_response_tokens"] == 5
    # fewer distinct tokens than V_d: the smallest unused ids fill the vocabulary
    d2t, t2d, _ = build_draft_vocab([[10, 10, 3]], vocab_size=40, draft_vocab_size=5)
    assert draft_to_target(torch.arange(5), d2t).tolist() == [0, 1, 2, 3, 10]


def test_a_gate_fixed_at_one_is_plain_llama_attention() -> None:
    gated, plain = make_draft("gated"), make_draft("llama")
    plain.load_state_dict({k: v for k, v in gated.state_dict().items()
                           if "self_attn.gate_proj" not in k})
    gated.layer.self_attn.gate_fn = torch.ones_like
    torch.manual_seed(4)
    fused, ids = torch.randn(2, 5, 3 * H), torch.randint(0, V, (2, 5))
    valid = torch.ones(2, 5, dtype=torch.bool)
    with torch.no_grad():
        a, b = gated.unroll(fused, ids, valid, 3), plain.unroll(fused, ids, valid, 3)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.logits, y.logits)
    gated.layer.self_attn.gate_fn = torch.sigmoid  # a real gate changes the output
    with torch.no_grad():
        c = gated.unroll(fused, ids, valid, 3)
    assert not torch.allclose(c[1].logits, b[1].logits)


def test_batch_masks_cover_exactly_the_response() -> None:
    seqs = [Sequence(np.arange(1, 9), 3, 5), Sequence(np.arange(1, 5), 2, 2)]
    b = collate(seqs, [0, 1], 2048, "cpu")
    # step-0 length positions: n-1 .. n+L-2 (the token input at n-1 is y_1)
    assert b.response_mask(0)[0].nonzero().flatten().tolist() == [2, 3, 4, 5, 6]
    assert b.response_mask(0)[1].nonzero().flatten().tolist() == [1, 2]
    assert torch.expm1(b.remaining_log()[0, 2:7]).round().tolist() == [5, 4, 3, 2, 1]
    # SD step 1 at position t predicts x_{t+3}: t = n-3 .. n+L-4, within the sequence
    assert b.response_mask(2)[0].nonzero().flatten().tolist() == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("variant", ["outlets", "lp_only", "sd_only", "no_decoder"])
def test_loss_falls_on_a_tiny_fixed_batch(variant: str) -> None:
    torch.set_num_threads(1)
    target, seqs = tiny_world()
    draft = draft_for(target, seqs, decoder=variant != "no_decoder")
    cfg = TrainConfig(epochs=1, lr=3e-3, warmup_steps=1, batch_tokens=10_000, ttt_length=3,
                      sd_weight=0.0 if variant in ("lp_only", "no_decoder") else 1.0,
                      length_weight=0.0 if variant == "sd_only" else 0.1)
    batch = collate(seqs, list(range(len(seqs))), 2048, "cpu")
    with torch.no_grad():
        first = float(batch_loss(draft, target, batch, cfg)[0])
    for _ in range(40):
        train_draft(draft, target, seqs, cfg, progress=False)
    with torch.no_grad():
        last = float(batch_loss(draft, target, batch, cfg)[0])
    assert last < 0.7 * first, (first, last)


def test_sd_only_head_phase_leaves_the_backbone_untouched() -> None:
    target, seqs = tiny_world()
    draft = draft_for(target, seqs)
    before = copy.deepcopy(draft.state_dict())
    cfg = TrainConfig(epochs=3, lr=1e-2, warmup_steps=1, sd_weight=0.0)
    train_draft(draft, target, seqs, cfg, train_backbone=False, progress=False)
    after = draft.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith("length_head.") for k in changed)


def test_speculative_decoding_is_lossless_and_counts_acceptance() -> None:
    target, seqs = tiny_world()
    draft = draft_for(target, seqs)
    stats = SpecStats(depth=3)
    prompt = seqs[0].ids[: seqs[0].n].tolist()
    eos = {V - 1}
    out = speculative_generate(draft, target, prompt, 3, 20, eos, stats)
    greedy = target.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                             eos_token_id=V - 1, pad_token_id=0)[0, len(prompt):].tolist()
    assert out == greedy[: len(out)] and (len(out) == 20 or out[-1] in eos)
    assert stats.new_tokens == len(out) - 1  # the prefill's token is not a cycle's
    # a draft that copies the target's own argmax is always accepted
    oracle = SpecStats(depth=3, cycles=2, new_tokens=8, accepted=[3, 3])
    assert oracle.to_dict()["alpha"] == [1.0, 1.0, 1.0] and oracle.to_dict()["tau"] == 4.0
    mixed = SpecStats(depth=3, cycles=3, new_tokens=5, accepted=[0, 1, 3]).to_dict()
    # depth 0 reached 3x, accepted 2x; depth 1 reached by m>=1 (2x), accepted by m>1 (1x)
    assert mixed["alpha"] == [2 / 3, 1 / 2, 1.0]


def test_target_features_fuse_the_eagle3_layers() -> None:
    target, seqs = tiny_world()
    batch = collate(seqs, [0], 2048, "cpu")
    fused, logits = target_forward(target, batch)
    out = target(input_ids=batch.ids, output_hidden_states=True)
    hs = out.hidden_states
    torch.testing.assert_close(fused, torch.cat((hs[2], hs[4], hs[5]), -1))  # L=8
    torch.testing.assert_close(logits, out.logits)
    assert isinstance(batch, Batch)
    # without the output head (prediction, a cache of the features alone): the same features
    headless, none = target_forward(target, collate(seqs, [0, 1], 2048, "cpu"), with_head=False)
    both, _ = target_forward(target, collate(seqs, [0, 1], 2048, "cpu"))
    assert none is None and torch.equal(headless, both)


def test_shift_left_fills_zeros() -> None:
    x = torch.tensor([[1, 2, 3, 4]])
    assert shift_left(x, 1).tolist() == [[2, 3, 4, 0]]
    assert shift_left(x, 6).tolist() == [[0, 0, 0, 0]]


def test_speculative_counts_match_an_oracle_draft_with_one_wrong_guess(monkeypatch) -> None:
    """A drafter that guesses the target's greedy tokens but gets depth 3 wrong: every full
    cycle accepts 2 guesses plus the target's token (tau 3, alpha [1, 1, 0])."""
    import lenbench.outlets.speculative as spec

    target, seqs = tiny_world()
    prompt = seqs[0].ids[: seqs[0].n].tolist()
    greedy = target.generate(torch.tensor([prompt]), max_new_tokens=31, do_sample=False,
                             eos_token_id=None, pad_token_id=0)[0].tolist()

    def oracle(draft, fused, seq, depth):
        assert seq == greedy[: len(seq)]  # the loop only ever extends the true greedy text
        guesses = greedy[len(seq): len(seq) + depth]
        guesses[2] = (guesses[2] + 1) % V
        return guesses

    monkeypatch.setattr(spec, "draft_chain", oracle)
    stats = SpecStats(depth=3)
    out = spec.speculative_generate(None, target, prompt, 3, 31, set(), stats)
    assert out == greedy[len(prompt):]
    assert stats.accepted == [2] * 10 and stats.new_tokens == 30
    d = stats.to_dict()
    assert d["tau"] == 3.0 and d["alpha"] == [1.0, 1.0, 0.0]


def test_sd_training_beats_a_random_draft_offline() -> None:
    from lenbench.outlets.train import offline_acceptance

    target, seqs = tiny_world(n=40)
    trained, random = draft_for(target, seqs), draft_for(target, seqs)
    cfg = TrainConfig(epochs=30, lr=3e-3, warmup_steps=5, ttt_length=3, length_weight=0.0)
    train_draft(trained, target, seqs, cfg, progress=False)
    a, b = (offline_acceptance(d, target, seqs, 3) for d in (trained, random))
    assert a["acc"][0] > b["acc"][0] + 0.2
    assert a["expected_acceptance"][0] > b["expected_acceptance"][0] + 0.1


def test_eagle_sd_mask_is_two_tokens_earlier_than_the_predicted_one() -> None:
    b = collate([Sequence(np.arange(1, 9), 3, 5)], [0], 2048, "cpu")
    # predicted (default): step 0 at t predicts x_{t+2}; response tokens are x_3..x_7
    assert b.sd_mask(0)[0].nonzero().flatten().tolist() == [1, 2, 3, 4, 5]
    # EAGLE: x_t itself is a response token, and the target logits[t+1] exist (t+1 <= 7)
    assert b.sd_mask(0, "eagle")[0].nonzero().flatten().tolist() == [3, 4, 5, 6]
    with pytest.raises(ValueError, match="sd_mask"):
        TrainConfig(sd_mask="both")


def test_draft_shape_overrides_and_bf16_autocast_keep_the_length_head_in_fp32() -> None:
    target, seqs = tiny_world()
    cfg = DraftConfig.from_target(target.config, 48, {"intermediate_size": 96, "head_dim": 4})
    assert (cfg.intermediate_size, cfg.head_dim, cfg.hidden_size) == (96, 4, H)
    with pytest.raises(ValueError, match="unknown keys"):
        DraftConfig.from_target(target.config, 48, {"hidden_size": 8})
    draft = draft_for(target, seqs)
    batch = collate(seqs, [0, 1], 2048, "cpu")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fused, _ = target_forward(target, batch)
        st = draft.first_step(fused, shift_left(batch.ids, 1), batch.valid)
        z = draft.length(st.state)
    assert z.dtype == torch.float32


def test_prediction_is_float32_and_batch_independent_after_bf16_training() -> None:
    """train.amp=bf16 speeds training only: scored values come from a float32 pass, so a row
    predicts the same alone as in a batch (the causality audit re-predicts rows in smaller
    batches and allows 1e-3 tokens)."""
    from types import SimpleNamespace

    from baselines.outlets import Outlets

    torch.set_num_threads(1)
    target, seqs = tiny_world()
    pred = Outlets(draft_vocab_size=48, max_length=64, progress=False,
                   train={"amp": "bf16", "batch_tokens": 10_000})
    pred.draft = draft_for(target, seqs)
    train_draft(pred.draft, target, seqs, pred.train_cfg, progress=False)
    split = SimpleNamespace(target=SimpleNamespace(model=target))
    positions = [np.arange(s.n - 1, len(s.ids) - 1) for s in seqs]
    together = pred._predict_log(split, seqs, positions)
    alone = [pred._predict_log(split, [s], [p])[0] for s, p in zip(seqs, positions, strict=True)]
    batch = collate(seqs, list(range(len(seqs))), 2048, "cpu")
    with torch.no_grad():  # the reference: a plain float32 forward, no autocast anywhere
        fused, _ = target_forward(target, batch)
        state = pred.draft.first_step(
            fused, shift_left(batch.ids, 1), batch.valid, logits=False)
        ref = pred.draft.length(state.state).numpy()
    for i, p in enumerate(positions):
        np.testing.assert_allclose(together[i], ref[i, p], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(alone[i], together[i], rtol=1e-5, atol=1e-6)


def test_training_logs_plain_progress_lines_without_the_bar(caplog) -> None:
    target, seqs = tiny_world()
    draft = draft_for(target, seqs)
    cfg = TrainConfig(epochs=2, lr=1e-3, warmup_steps=1, batch_tokens=64, ttt_length=2)
    with caplog.at_level("INFO", logger="lenbench.outlets.train"):
        record = train_draft(draft, target, seqs, cfg, progress=False, description="lp run")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("lp run: ")]
    assert lines and lines[-1].startswith(f"lp run: {record['steps']}/{record['steps']} steps")
