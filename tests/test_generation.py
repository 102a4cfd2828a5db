"""Generation: the continuous-batching HF backend and the sharded, resumable generate stage.

HFGenerator must produce exactly what a plain per-request decode produces (greedy: what
`model.generate(do_sample=False)` gives; sampled: what a naive no-cache loop with the request's
own random stream gives), whatever the batch size, with the L / finish_reason conventions of
docs/protocol.md. generate_labels must give n_samples rows per prompt, apply the censoring policy,
count over-long prompts, and end with identical labels after a SIGKILL and a rerun.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.cli import FIXTURES
from helpers.models import tiny_llama, toy_prompt_table

from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.generation.hf import (
    HFGenerator,
    _sample_candidates,
    _sample_sorted,
    penalize_repeats,
    sample_token,
    sample_tokens,
)
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.generation.runner import generate_labels
from lenbench.models.chat import render_prompt

VOCAB = 64
MAX_NEW = 24
PROMPT_LENGTHS = (3, 9, 5, 17, 1, 12, 7, 4, 10, 6, 14, 2)


@pytest.fixture(scope="module")
def model():
    return tiny_llama(n_layers=8, hidden=32, vocab=VOCAB, seed=0)


@pytest.fixture(scope="module")
def prompts() -> list[tuple[int, ...]]:
    g = torch.Generator().manual_seed(1)
    out = [tuple(torch.randint(2, VOCAB, (n,), generator=g).tolist()) for n in PROMPT_LENGTHS]
    return out + [out[1]]  # a repeated prompt (the generator shares its prefill)


def _hf_greedy(model, prompt, eos: list[int] | None, max_new: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt),
                                                                           dtype=torch.long),
                         do_sample=False, max_new_tokens=max_new, eos_token_id=eos,
                         pad_token_id=0)
    return out[0, len(prompt):].tolist()


def _first_hits(outputs: list[list[int]], eos: tuple[int, ...], max_new: int) -> list[int | None]:
    """Per output: the length up to and including the first EOS token, or None (no EOS)."""
    hits = []
    for out in outputs:
        pos = [i for i, tok in enumerate(out[:max_new]) if tok in eos]
        hits.append(pos[0] + 1 if pos else None)
    return hits


@pytest.fixture(scope="module")
def eos_ids(model, prompts) -> tuple[int, ...]:
    """Three EOS ids chosen so the batch mixes every ending: EOS as the very first token, EOS
    mid-way, EOS as exactly the max_new_tokens-th token, and several rows that hit the limit."""
    free = [_hf_greedy(model, p, None, MAX_NEW) for p in prompts]
    for eos in itertools.combinations(range(2, VOCAB), 3):
        hits = _first_hits(free, eos, MAX_NEW)
        if (1 in hits and MAX_NEW in hits and any(h and 1 < h < MAX_NEW for h in hits)
                and sum(h is None for h in hits) >= 3):
            return eos
    pytest.fail("no EOS set gives the mix of endings this test needs; change the seeds")


@pytest.mark.parametrize("batch_size", [1, 3, 16])
def test_greedy_equals_hf_generate(model, prompts, eos_ids, batch_size):
    want = [_hf_greedy(model, p, list(eos_ids), MAX_NEW) for p in prompts]
    gen = HFGenerator(model, eos_ids, batch_size=batch_size)
    got, stats = gen.generate([GenRequest(p, (0, i)) for i, p in enumerate(prompts)],
                              SamplingConfig(temperature=0.0, max_new_tokens=MAX_NEW))
    assert [r.output_ids for r in got] == want
    # the fixture guarantees every kind of ending is in this comparison
    lengths = [len(w) for w in want]
    assert 1 in lengths and MAX_NEW in lengths and any(1 < n < MAX_NEW for n in lengths)
    # continuous batching decodes only live rows: every decoded slot is a real token
    assert stats.real_tokens == sum(n - 1 for n in lengths)  # the first token comes from prefill
    assert stats.real_token_fraction == 1.0
    assert 0 < stats.kv_fill <= 1


def test_cache_shifts_change_nothing(model, prompts, eos_ids):
    """No spare cache columns: the used columns are shifted left nearly every step."""
    want = [_hf_greedy(model, p, list(eos_ids), MAX_NEW) for p in prompts]
    reqs = [GenRequest(p, (0, i)) for i, p in enumerate(prompts)]
    greedy = SamplingConfig(temperature=0.0, max_new_tokens=MAX_NEW)
    cramped = HFGenerator(model, eos_ids, batch_size=5, spare_columns=0)
    got, stats = cramped.generate(reqs, greedy)
    assert [r.output_ids for r in got] == want
    assert stats.kv_fill <= 1
    sampled = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=MAX_NEW)
    assert [r.output_ids for r in cramped.generate(reqs, sampled)[0]] == \
        [r.output_ids for r in HFGenerator(model, eos_ids, batch_size=5).generate(reqs, sampled)[0]]


def test_finish_reason_and_length_conventions(model, prompts, eos_ids):
    gen = HFGenerator(model, eos_ids, batch_size=4)
    got, _ = gen.generate([GenRequest(p, (0, i)) for i, p in enumerate(prompts)],
                          SamplingConfig(temperature=0.0, max_new_tokens=MAX_NEW))
    reasons = {r.finish_reason for r in got}
    assert reasons == {"stop", "length"}
    for r in got:
        L = len(r.output_ids)
        assert 1 <= L <= MAX_NEW
        eos_at = [i for i, t in enumerate(r.output_ids) if t in eos_ids]
        if r.finish_reason == "stop":
            assert eos_at == [L - 1]  # L counts the EOS token, which is the last and only one
        else:
            assert L == MAX_NEW and eos_at == []  # censored: limit reached without EOS
    # EOS exactly at the limit is a 'stop', not a censored 'length'
    assert any(r.finish_reason == "stop" and len(r.output_ids) == MAX_NEW for r in got)
    # EOS as the first (prefill) token: L == 1
    assert any(r.finish_reason == "stop" and len(r.output_ids) == 1 for r in got)


def test_max_new_tokens_one(model, prompts, eos_ids):
    gen = HFGenerator(model, eos_ids, batch_size=5)
    got, stats = gen.generate([GenRequest(p, (0, i)) for i, p in enumerate(prompts)],
                              SamplingConfig(temperature=0.0, max_new_tokens=1))
    assert all(len(r.output_ids) == 1 for r in got)
    for r in got:
        assert r.finish_reason == ("stop" if r.output_ids[0] in eos_ids else "length")
    assert stats.decode_steps == 0  # everything came from the prefills


def _naive_sample(model, prompt, seed, eos, cfg: SamplingConfig) -> list[int]:
    """Reference sampler: full forward each step, no cache, no batch, the request's own stream."""
    rng = np.random.default_rng(list(seed))
    ids = list(prompt)
    out: list[int] = []
    with torch.no_grad():
        while True:
            logits = model(torch.tensor([ids])).logits[0, -1].float()
            seen = torch.zeros(logits.shape[-1], dtype=torch.bool)
            seen[ids] = True
            tok = sample_token(logits, float(rng.random()), cfg, seen)
            out.append(tok)
            ids.append(tok)
            if tok in eos or len(out) >= cfg.max_new_tokens:
                return out


def test_sampling_is_per_request_and_batch_independent(model, prompts, eos_ids):
    cfg = SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=MAX_NEW)
    # every prompt twice, with different sample seeds
    reqs = [GenRequest(p, (7, i, s)) for s in range(2) for i, p in enumerate(prompts)]
    runs = {}
    for bs in (1, 3, 8):
        got, _ = HFGenerator(model, eos_ids, batch_size=bs).generate(reqs, cfg)
        runs[bs] = [(r.output_ids, r.finish_reason) for r in got]
    assert runs[1] == runs[3] == runs[8]
    outputs = [o for o, _ in runs[1]]
    # sampling really samples: the two seeds of a prompt usually differ, and it's not greedy
    n = len(prompts)
    assert sum(outputs[i] != outputs[n + i] for i in range(n)) >= n // 2
    greedy, _ = HFGenerator(model, eos_ids, batch_size=8).generate(
        reqs[:n], SamplingConfig(temperature=0.0, max_new_tokens=MAX_NEW))
    assert [g.output_ids for g in greedy] != outputs[:n]
    # and each request's tokens are those of a plain one-request loop with its own stream
    for req, out in list(zip(reqs, outputs))[:: 3]:
        assert out == _naive_sample(model, req.prompt_ids, req.seed, set(eos_ids), cfg)


def test_repetition_penalty_is_hugging_faces(model, prompts, eos_ids):
    """The penalty lowers exactly the tokens of the prompt and the answer so far, as
    transformers' RepetitionPenaltyLogitsProcessor does, and batched generation with it is still
    each request's own one-request loop."""
    from transformers import RepetitionPenaltyLogitsProcessor

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, VOCAB, generator=g) * 3
    ids = torch.randint(0, VOCAB, (4, 20), generator=g)
    seen = torch.zeros(4, VOCAB, dtype=torch.bool).scatter_(1, ids, True)
    want = RepetitionPenaltyLogitsProcessor(1.3)(ids, logits.clone())
    assert torch.equal(penalize_repeats(logits, seen, 1.3), want)
    assert not torch.equal(want, logits)

    cfg = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=MAX_NEW,
                         repetition_penalty=1.3)
    reqs = [GenRequest(p, (5, i)) for i, p in enumerate(prompts)]
    got, _ = HFGenerator(model, eos_ids, batch_size=4).generate(reqs, cfg)
    plain, _ = HFGenerator(model, eos_ids, batch_size=4).generate(
        reqs, SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=MAX_NEW))
    assert [r.output_ids for r in got] != [r.output_ids for r in plain]  # it does something
    for req, r in list(zip(reqs, got))[::2]:
        assert r.output_ids == _naive_sample(model, req.prompt_ids, req.seed, set(eos_ids), cfg)
    with pytest.raises(ValueError, match="seen tokens"):
        sample_tokens(logits, [0.5] * 4, cfg)


def test_decode_attention_reads_only_each_rows_own_columns(model):
    """A decode step's attention runs row by row over [row start, now]: a row's logits do not
    change, bit for bit, when an older neighbour widens the key slice all rows share, and equal
    (to rounding) attention over the whole slice with each row's older columns masked."""
    from lenbench.generation.hf import _SlotCache

    gen = HFGenerator(model, [0], batch_size=3)
    width = 200
    torch.manual_seed(0)
    cache = _SlotCache(3, width + 4)
    cache.col = width
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    shape = (3, model.config.num_key_value_heads, width + 4, head_dim)
    for layer in range(model.config.num_hidden_layers):  # a cache full of real values
        cache.buffers[layer] = (torch.randn(shape), torch.randn(shape))
    ids = torch.randint(3, model.config.vocab_size, (3, 1))

    def step(starts, per_row=True):
        lo = int(starts.min())
        cache.start = lo
        cols = torch.arange(lo, cache.col + 1)
        allowed = (cols[None, :] >= starts[:, None])[:, None]
        with torch.inference_mode():
            return gen._forward(ids, allowed, (cache.col - starts)[:, None], cache,
                                (cache.col - cols)[None],
                                row_starts=(starts - lo).tolist() if per_row else None)

    old_neighbour = step(torch.tensor([0, 90, 170]))
    young_neighbour = step(torch.tensor([150, 90, 170]))  # the shared slice starts at 90 now
    assert torch.equal(old_neighbour[1:], young_neighbour[1:])
    masked = step(torch.tensor([0, 90, 170]), per_row=False)
    assert torch.allclose(old_neighbour, masked, atol=1e-4)
    assert not torch.equal(old_neighbour[0], young_neighbour[0])  # the first row did change


def test_sample_token_rules():
    torch.manual_seed(0)
    for _ in range(20):
        logits = torch.randn(50) * 3
        top = int(torch.argmax(logits))
        for u in (0.0, 0.37, 0.999999):
            assert sample_token(logits, u, SamplingConfig(temperature=0.0)) == top
            assert sample_token(logits, u, SamplingConfig(temperature=1.0, top_p=1e-9)) == top
            assert sample_token(logits, u, SamplingConfig(temperature=0.7, top_p=1e-9)) == top
    # inverse CDF over tokens sorted by probability: p = 0.5 (id 2), 0.3 (id 0), 0.2 (id 1)
    logits = torch.log(torch.tensor([0.3, 0.2, 0.5]))
    full = SamplingConfig(temperature=1.0, top_p=1.0)
    assert [sample_token(logits, u, full) for u in (0.1, 0.49, 0.55, 0.79, 0.81, 0.99)] == \
        [2, 2, 0, 0, 1, 1]
    # top_p = 0.6 keeps the smallest prefix with mass >= 0.6 ({2, 0}, mass 0.8), renormalised
    nucleus = SamplingConfig(temperature=1.0, top_p=0.6)
    assert [sample_token(logits, u, nucleus) for u in (0.1, 0.6, 0.7, 0.99)] == [2, 2, 0, 0]
    # top_p exactly at a prefix's mass keeps just that prefix
    assert {sample_token(logits, u, SamplingConfig(top_p=0.5)) for u in (0.0, 0.5, 0.99)} == {2}


def test_candidate_sampling_equals_the_full_sort():
    """Large vocabularies are sampled from their top candidates first: the tokens must be exactly
    those of the full sort, for peaked and flat rows, ties, any top_p and u close to 0 or 1."""
    g = torch.Generator().manual_seed(0)
    accepted = []
    for scale in (0.5, 3.0, 10.0):
        for temperature in (1.0, 0.7):
            for top_p in (1.0, 0.95, 0.5, 1e-9, 1.5):
                logits = torch.randn(12, 3000, generator=g) * scale
                logits[:4] = logits[:4].round()  # many ties
                logits[4, :10] = logits[4].max()  # a tie at the top
                u = torch.rand(12, generator=g, dtype=torch.float64)
                u[:3] = torch.tensor([0.0, 0.5, 1 - 1e-12])
                cfg = SamplingConfig(temperature, top_p)
                probs = torch.softmax(logits.double() / temperature, dim=-1)
                want = _sample_sorted(probs, u[:, None], top_p).tolist()
                assert sample_tokens(logits, u.tolist(), cfg) == want
                found, tokens = _sample_candidates(probs, u[:, None], top_p, 64)
                assert tokens[found].tolist() == [w for w, f in zip(want, found) if f]
                accepted += found.tolist()
    # both the shortcut and the fallback were exercised
    assert 0.3 < np.mean(accepted) < 1


# ------------------------------------------------------------------------------------------------
# generate_labels on the toy_tiny model (a trained tiny Llama whose tokenizer has a chat template)

N_PROMPTS = 12
GEN_MAX_NEW = 32


def _prompt_table(n: int = N_PROMPTS) -> pd.DataFrame:
    return toy_prompt_table(n, seed=123)


@pytest.fixture(scope="module")
def prompt_table() -> pd.DataFrame:
    return _prompt_table()


def _gen(toy, prompts, out_dir, **kw):
    args = {"sampling": SamplingConfig(1.0, 1.0, GEN_MAX_NEW), "n_samples": 2, "seed": 0,
            "batch_size": 8, "shard_prompts": 3, "keep_censored": True, "progress": False, **kw}
    return generate_labels(prompts, toy.model, toy.tokenizer, out_dir, **args)


@pytest.fixture(scope="module")
def kept_run(toy_tiny, prompt_table, tmp_path_factory):
    return _gen(toy_tiny, prompt_table, tmp_path_factory.mktemp("gen_kept"))


def test_labels_rows_and_conventions(toy_tiny, prompt_table, kept_run):
    labels, card = kept_run
    assert list(labels.columns) == LABEL_COLUMNS
    assert len(labels) == 2 * N_PROMPTS and card["n_rows"] == 2 * N_PROMPTS
    assert not labels.duplicated(["prompt_id", "sample_idx"]).any()
    assert labels.groupby("prompt_id")["sample_idx"].apply(lambda s: sorted(s) == [0, 1]).all()
    assert set(labels["prompt_id"]) == set(prompt_table["prompt_id"])
    # split and family travel with the prompt
    meta = prompt_table.set_index("prompt_id")
    assert (labels["split"].to_numpy() == meta.loc[labels["prompt_id"], "split"].to_numpy()).all()
    eos = set(card["eos_token_ids"])
    for _, row in labels.iterrows():
        out = list(row["output_token_ids"])
        assert row["L"] == len(out)
        assert list(row["prompt_token_ids"]) == render_prompt(toy_tiny.tokenizer, row["text"])
        if row["finish_reason"] == "stop":
            assert out[-1] in eos and not row["censored"]
        else:
            assert row["finish_reason"] == "length" and row["censored"]
            assert row["L"] == GEN_MAX_NEW and not eos & set(out)
    # the toy model really ends some answers and runs past the limit on others
    assert 0 < card["n_censored"] < len(labels)
    assert card["n_censored"] == int(labels["censored"].sum())
    assert card["censored_rows"] == "kept (flagged)"
    assert card["rows_resumed"] == 0
    assert 0 < card["real_token_fraction"] <= 1.0
    # the chat template was applied: the rendered prompt is not the bare text's encoding
    assert card["chat_template"]
    assert list(labels["prompt_token_ids"].iloc[0]) != \
        toy_tiny.tokenizer(labels["text"].iloc[0])["input_ids"]


def test_censored_rows_dropped_by_default_and_prompts_too_long_counted(
        toy_tiny, prompt_table, kept_run, tmp_path):
    kept, _ = kept_run
    lengths = prompt_table["text"].map(lambda t: len(render_prompt(toy_tiny.tokenizer, t)))
    limit = int(np.sort(lengths.to_numpy())[-3]) - 1  # the 3 longest prompts are over the limit
    too_long = set(prompt_table.loc[lengths > limit, "prompt_id"])
    assert len(too_long) >= 3
    labels, card = _gen(toy_tiny, prompt_table, tmp_path / "drop", keep_censored=False,
                        max_prompt_tokens=limit)
    assert card["n_prompts"] == N_PROMPTS
    assert card["n_prompts_too_long"] == len(too_long)
    assert card["censored_rows"] == "dropped"
    assert not set(labels["prompt_id"]) & too_long
    assert not labels["censored"].any() and (labels["finish_reason"] == "stop").all()
    # the same requests give the same samples: dropping is exactly the kept run minus the
    # censored rows and the over-long prompts (seeds depend on prompt and sample index only)
    want = kept[~kept["censored"] & ~kept["prompt_id"].isin(too_long)].reset_index(drop=True)
    pd.testing.assert_frame_equal(labels, want)
    assert card["n_censored"] == int(kept[~kept["prompt_id"].isin(too_long)]["censored"].sum())


def test_labels_do_not_depend_on_batch_or_shard_size(toy_tiny, prompt_table, kept_run, tmp_path):
    labels, _ = _gen(toy_tiny, prompt_table, tmp_path / "other", batch_size=3, shard_prompts=5)
    pd.testing.assert_frame_equal(labels, kept_run[0])


def test_sigkill_then_resume_equals_uninterrupted(toy_tiny, toy_tiny_path, prompt_table,
                                                  kept_run, tmp_path):
    """Kill generation with SIGKILL after the first shard, rerun, compare with a clean run."""
    prompts_file = tmp_path / "prompts.parquet"
    prompt_table.to_parquet(prompts_file)
    out = tmp_path / "shards"
    cmd = [sys.executable, str(FIXTURES / "generate_job.py"), toy_tiny_path, str(prompts_file),
           str(out), str(GEN_MAX_NEW), str(torch.get_num_threads())]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = out / "shard-00000.parquet"
    deadline = time.monotonic() + 240
    try:
        while not first.exists():
            if proc.poll() is not None:
                pytest.fail(f"generation job exited early ({proc.returncode}): "
                            f"{proc.stderr.read().decode()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail("generation job wrote no shard in time")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    n_shards = -(-N_PROMPTS // 3)
    finished = sorted(out.glob("shard-*.parquet"))
    assert 1 <= len(finished) < n_shards, "the job was not killed in the middle"
    before = {p.name: p.stat().st_mtime_ns for p in finished}

    labels, card = _gen(toy_tiny, prompt_table, out)  # same arguments as the job

    # finished shards were read back, not regenerated
    assert card["rows_resumed"] == len(finished) * 3 * 2
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("shard-*.parquet")
            if p.name in before} == before
    assert len(list(out.glob("shard-*.parquet"))) == n_shards
    assert not labels.duplicated(["prompt_id", "sample_idx"]).any()
    pd.testing.assert_frame_equal(labels, kept_run[0])


def test_greedy_equals_hf_generate_with_sliding_window_layers():
    """Gemma 3 mixes sliding-window and full layers: each kind must get its own mask."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                           num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                           head_dim=16, sliding_window=6, max_position_embeddings=256,
                           layer_types=["sliding_attention"] * 3 + ["full_attention"],
                           pad_token_id=0, eos_token_id=1, bos_token_id=2)
    model = Gemma3ForCausalLM(cfg).eval()
    prompts = [tuple(torch.randint(3, 128, (n,)).tolist()) for n in (3, 9, 14, 5, 20)]
    results, _ = HFGenerator(model, [1], batch_size=3).generate(
        [GenRequest(p, (0, i)) for i, p in enumerate(prompts)], SamplingConfig(0.0, 1.0, 12))
    for p, r in zip(prompts, results):
        ref = model.generate(torch.tensor([p]), max_new_tokens=12, do_sample=False,
                             eos_token_id=1, pad_token_id=0)[0, len(p):].tolist()
        ref = ref[:ref.index(1) + 1] if 1 in ref else ref
        assert r.output_ids == ref
