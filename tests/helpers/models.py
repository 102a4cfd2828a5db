"""Tiny models and prompt tables: a random Llama, toyworld prompts, the toy_tiny model config."""

from __future__ import annotations

import torch

from lenbench.configs import preset_config
from lenbench.configs.model import ToyModel


def tiny_llama(n_layers: int = 8, hidden: int = 32, vocab: int = 64, seed: int = 0,
               eos_token_id=None):
    """A random Llama-architecture causal LM in float32 (seconds to build, milliseconds to run)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=512, bos_token_id=None, pad_token_id=0,
                      eos_token_id=eos_token_id)
    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg).eval()


def toy_prompt_table(n: int, seed: int = 123):
    """n distinct toyworld prompts (prompt_id, text, family) with splits in rotation."""
    import pandas as pd

    from lenbench.data.promptset import prompt_id
    from lenbench.data.toyworld import make_corpus

    rows, seen = [], set()
    for ex in make_corpus(4 * n, seed=seed):
        pid = prompt_id(ex.prompt)
        if pid not in seen:
            seen.add(pid)
            rows.append({"prompt_id": pid, "text": ex.prompt, "family": ex.family,
                         "split": ("train", "val", "test")[len(rows) % 3]})
        if len(rows) == n:
            break
    return pd.DataFrame(rows)


def toy_tiny_model_cfg() -> ToyModel:
    """conf/model/toy_tiny.yaml as the pipeline sees it (same config -> same toymodel stage
    key)."""
    return preset_config("model", "toy_tiny")
