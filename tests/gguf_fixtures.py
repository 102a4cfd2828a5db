"""Tiny GGUF checkpoints written the way llama.cpp's converter writes them, for tests/test_gguf.py.

Each checkpoint starts from a random transformers model (the reference) and is written with the
`gguf` package: names from gguf's tensor map, 2-D weights optionally quantised, and the two value
or layout transforms llama.cpp applies and transformers' GGUF loader has to undo:

- llama: q/k projection rows are permuted (`llama_cpp_permute`, as convert_hf_to_gguf.py does) so
  llama.cpp's rope can rotate adjacent pairs;
- gemma3: every norm weight `w` is stored as `1 + w` (transformers' Gemma3RMSNorm scales by `1 + w`,
  llama.cpp's norm by the stored weight; transformers' Gemma2TensorProcessor subtracts the 1).

A model whose logits match its reference therefore proves both the layout and the values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM = 32, 64, 4, 2, 8  # 32/64: whole Q8_0 blocks
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def llama_cpp_permute(w: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """llama.cpp's `LlamaModel.permute` (convert_hf_to_gguf.py), applied to q and k weights."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def quantised_round_trip(w: np.ndarray, qtype) -> np.ndarray:
    """What a reader gets back from `w` stored as `qtype` (Q8_0 rounds each block of 32)."""
    import gguf

    return gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype).reshape(w.shape)


# --- vocabularies ---------------------------------------------------------------------------------

def byte_level_vocab() -> dict:
    """A GPT-2 style byte-level BPE vocabulary (tokenizer.ggml.model='gpt2', as SmolLM2's GGUF).

    Three ChatML control tokens, the 256 byte symbols, then a few merges, some of whose tokens
    contain a blank line ("\\n\\n" is "ĊĊ" in the byte alphabet).
    """
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    byte_symbols = [bytes_to_unicode()[b] for b in range(256)]
    merges = ["Ġ t", "h e", "Ġt he", "Ċ Ċ", "ĊĊ Ċ", ". ĊĊ", "o x"]
    merged = [m.replace(" ", "") for m in merges]
    tokens = specials + byte_symbols + merged
    types = [3] * len(specials) + [1] * (len(tokens) - len(specials))
    return {"tokens": tokens, "types": types, "merges": merges,
            "bos": 1, "eos": 2, "pad": 0}


def byte_level_text(token: str) -> str:
    """The text a byte-level token stands for (the inverse of GPT-2's byte alphabet)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    back = {c: b for b, c in bytes_to_unicode().items()}
    if not set(token) <= set(back):
        return token  # a special token, spelled as is
    return bytes(back[c] for c in token).decode("utf-8", errors="replace")


def sentencepiece_vocab() -> dict:
    """A Gemma-style sentencepiece vocabulary (tokenizer.ggml.model='llama'): no merges in the file.

    Control tokens first (as Gemma: pad, eos, bos, unk, mask, turn markers), 256 byte-fallback
    tokens, then pieces; "\\n\\n" is a piece of its own, as in Gemma's vocabulary.
    """
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    pieces = (["\n", "\n\n", "\n\n\n", ".\n\n", "▁", "▁t", "he", "▁the", "ox", "."]
              + list("abcdefghijklmnopqrstuvwxyzTQ"))
    tokens = specials + byte_tokens + pieces
    types = ([3, 3, 3, 2, 3, 3, 3] + [6] * len(byte_tokens) + [1] * len(pieces))
    scores = [0.0] * (len(specials) + len(byte_tokens)) + [-float(i) for i in range(len(pieces))]
    return {"tokens": tokens, "types": types, "scores": scores,
            "bos": 2, "eos": 1, "unk": 3, "pad": 0}


# --- reference models -----------------------------------------------------------------------------

def _randomise(model, seed: int, norm_offset: float) -> None:
    """Weights large enough that a layout or offset error moves the logits visibly."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(norm_offset + 0.2 * noise if p.ndim == 1 else 0.3 * noise)


def tiny_llama_reference(vocab_size: int, n_layers: int = 2, seed: int = 0):
    """A random LlamaForCausalLM with grouped-query attention (4 query / 2 KV heads), untied
    head."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                      num_hidden_layers=n_layers, num_attention_heads=HEADS,
                      num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=128,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    _randomise(model, seed, norm_offset=1.0)
    return model


def tiny_gemma3_reference(vocab_size: int, n_layers: int = 6, seed: int = 0):
    """A random Gemma3ForCausalLM (text only, tied head); 6 layers = 5 sliding + 1 global.

    Only what a GGUF records is set; everything else keeps Gemma3TextConfig's defaults, which
    are what transformers assumes when it loads a gemma3 GGUF (query_pre_attn_scalar, the local
    rope base, the layer pattern, softcapping).
    """
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    cfg = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=HIDDEN,
                           intermediate_size=INTERMEDIATE, num_hidden_layers=n_layers,
                           num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                           head_dim=HEAD_DIM, max_position_embeddings=128, rms_norm_eps=1e-6,
                           sliding_window=16, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    model = Gemma3ForCausalLM(cfg).eval()
    # Gemma norms scale by (1 + w): random w around 0 keeps the scale near 1
    _randomise(model, seed, norm_offset=0.0)
    return model


def with_weights(model, transform) -> None:
    """Apply `transform(name, array) -> array` to every 2-D weight in place."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                p.copy_(torch.from_numpy(transform(name, p.detach().numpy().copy())))


# --- writers --------------------------------------------------------------------------------------

def _gguf_name(name_map, hf_name: str) -> str:
    base, suffix = hf_name.rsplit(".", 1)
    gguf_name = name_map.get_name(base)
    assert gguf_name is not None, hf_name
    return f"{gguf_name}.{suffix}"


def _add_tensors(writer, model, arch, qtype, value_fn) -> None:
    """Write the model's tensors under GGUF names: 2-D weights as `qtype`, 1-D ones as F32."""
    import gguf

    name_map = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
    state = model.state_dict()
    tied = getattr(model.config, "tie_word_embeddings", False)
    for hf_name, tensor in state.items():
        if tied and hf_name == "lm_head.weight":
            continue  # a tied head is not stored (and its absence is what says "tied")
        name = _gguf_name(name_map, hf_name)
        data = value_fn(name, tensor.detach().float().numpy().copy())
        if data.ndim == 2 and qtype != gguf.GGMLQuantizationType.F32:
            writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, data.astype(np.float32))


def _finish(writer) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_llama_gguf(model, path: Path, vocab: dict, qtype=None, chat_template: str | None = CHATML,
                     permute: bool = True) -> Path:
    """`model` as a llama GGUF with a byte-level BPE tokenizer (the shape of SmolLM2's file).

    `permute=False` writes q/k as transformers holds them: a file llama.cpp would get wrong, used
    to show that the logits comparison notices a layout error.
    """
    import gguf

    qtype = gguf.GGMLQuantizationType.F32 if qtype is None else qtype
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_file_type(int(qtype))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_merges(vocab["merges"])
    w.add_bos_token_id(vocab["bos"])
    w.add_eos_token_id(vocab["eos"])
    w.add_pad_token_id(vocab["pad"])
    w.add_add_bos_token(False)
    if chat_template is not None:
        w.add_chat_template(chat_template)

    def value(name, data):
        if permute and name.endswith("attn_q.weight"):
            return llama_cpp_permute(data, cfg.num_attention_heads, cfg.num_attention_heads)
        if permute and name.endswith("attn_k.weight"):
            return llama_cpp_permute(data, cfg.num_attention_heads, cfg.num_key_value_heads)
        return data

    _add_tensors(w, model, gguf.MODEL_ARCH.LLAMA, qtype, value)
    _finish(w)
    return path


def write_gemma3_gguf(model, path: Path, vocab: dict, qtype=None) -> Path:
    """`model` as a gemma3 GGUF with a sentencepiece tokenizer (the shape of Gemma 3 270M's
    file)."""
    import gguf

    qtype = gguf.GGMLQuantizationType.F32 if qtype is None else qtype
    cfg = model.config
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_name("tiny-gemma3")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(1_000_000.0)  # the global layers' base, as llama.cpp writes it
    w.add_sliding_window(cfg.sliding_window)
    w.add_file_type(int(qtype))
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(vocab["tokens"])
    w.add_token_scores(vocab["scores"])
    w.add_token_types(vocab["types"])
    w.add_bos_token_id(vocab["bos"])
    w.add_eos_token_id(vocab["eos"])
    w.add_unk_token_id(vocab["unk"])
    w.add_pad_token_id(vocab["pad"])
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    def value(name, data):
        return data + 1.0 if name.endswith("norm.weight") else data

    _add_tensors(w, model, gguf.MODEL_ARCH.GEMMA3, qtype, value)
    _finish(w)
    return path
