"""The toy model must load like a hub model and behave like a chat model with an EOS.

Offline mode (HF_HUB_OFFLINE=1) is set by tests/conftest.py before transformers is imported.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from lenbench.data.toyworld import make_corpus
from lenbench.models.toy import (
    ASSISTANT_TOKEN,
    EOS_TOKEN,
    ToyModelConfig,
    build_toy_model,
    chat_prompt_text,
    train_tokenizer,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("toy_tiny")
    summary = build_toy_model(out, ToyModelConfig.tiny(seed=0), progress=False)
    return out, summary


def test_saved_folder_loads_as_a_llama_with_enough_layers(tiny: tuple[Path, dict]) -> None:
    out, summary = tiny
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.model_type == "llama"
    assert model.config.num_hidden_layers >= 8
    assert model.config.vocab_size == len(tok)
    assert summary["n_params"] == sum(p.numel() for p in model.parameters())
    # Even the tiny build learns: its loss starts near the uniform guess ln(V) and drops by a lot.
    assert summary["initial_train_loss"] > 0.9 * math.log(len(tok))
    assert summary["final_train_loss"] < summary["initial_train_loss"] - 1.0
    # EAGLE-3's low/mid/high layers are distinct hidden states.
    n = model.config.num_hidden_layers
    assert len({2, n // 2, n - 3}) == 3
    ids = tok("List 3 animals.", return_tensors="pt").input_ids
    with torch.no_grad():
        out_h = model(ids, output_hidden_states=True)
    assert len(out_h.hidden_states) == n + 1


def test_chat_template_and_eos_are_wired(tiny: tuple[Path, dict]) -> None:
    out, _ = tiny
    tok = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    msgs = [{"role": "user", "content": "List 4 colors."}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == chat_prompt_text("List 4 colors.") == "<|user|>List 4 colors.<|assistant|>"
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True,
                                  return_dict=False)
    assert ids == tok(text, add_special_tokens=False).input_ids
    assert ids[-1] == tok.convert_tokens_to_ids(ASSISTANT_TOKEN)
    # An assistant turn ends with EOS: that is the stop the model was trained to emit.
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "1. red"}],
                                   tokenize=False)
    assert full.endswith("1. red" + EOS_TOKEN)
    eos = tok.eos_token_id
    assert eos is not None and tok.pad_token_id is not None and tok.pad_token_id != eos
    assert model.generation_config.eos_token_id == eos == model.config.eos_token_id
    assert model.generation_config.pad_token_id == tok.pad_token_id
    gen = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert gen.shape[1] <= len(ids) + 8
    assert int(gen.max()) < len(tok)


def test_tokenizer_round_trips_text(tiny: tuple[Path, dict]) -> None:
    tok = AutoTokenizer.from_pretrained(tiny[0])
    texts = [ex.prompt for ex in make_corpus(20, seed=3)] + [
        ex.response for ex in make_corpus(20, seed=3)
    ] + ["Unseen: naïve café, 東京, emoji 🙂, tabs\tand\nnewlines  double  spaces."]
    for text in texts:
        ids = tok(text, add_special_tokens=False).input_ids
        assert tok.decode(ids) == text


def test_default_tokenizer_keeps_words_whole_and_numbers_shared() -> None:
    cfg = ToyModelConfig()
    corpus = make_corpus(cfg.n_tokenizer_examples, seed=11)
    tok = train_tokenizer([chat_prompt_text(ex.prompt) + ex.response for ex in corpus],
                          cfg.vocab_size)
    # Every corpus word is one token, so lengths in tokens track the structure.
    pieces = tok.convert_ids_to_tokens(tok("1. cat\n2. dog\n3. horse").input_ids)
    assert pieces == ["1", ".", "Ġcat", "Ċ", "2", ".", "Ġdog", "Ċ", "3", ".", "Ġhorse"]
    # "List 7" and the item "7." use the same token for 7, as do "has 7 parts" and "Part 7 of".
    prompt_ids = tok(chat_prompt_text("List 7 animals.")).input_ids
    item_ids = tok("7. cat").input_ids
    assert item_ids[0] in prompt_ids
    assert tok("This report has 7 parts.").input_ids[4] == tok("Part 7 of 7").input_ids[2]


def test_same_config_builds_identical_weights(tmp_path: Path) -> None:
    cfg = ToyModelConfig.tiny(seed=1, n_train_examples=200, train_steps=3,
                              n_tokenizer_examples=200)
    build_toy_model(tmp_path / "a", cfg, progress=False)
    build_toy_model(tmp_path / "b", cfg, progress=False)
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "a").state_dict()
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "b").state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a" / "tokenizer.json").read_text() == (
        tmp_path / "b" / "tokenizer.json").read_text()
    other = ToyModelConfig.tiny(seed=2, n_train_examples=200, train_steps=3,
                                n_tokenizer_examples=200)
    build_toy_model(tmp_path / "c", other, progress=False)
    c = AutoModelForCausalLM.from_pretrained(tmp_path / "c").state_dict()
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(a[name], c[name])


def test_too_few_layers_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="n_layers"):
        build_toy_model(tmp_path, ToyModelConfig.tiny(n_layers=4), progress=False)
