"""The toy target model: a byte-level BPE tokenizer and a tiny Llama trained on toyworld.

lenbench needs a real causal LM whose sampled lengths depend on the prompt, without any model hub.
This module trains one on the toyworld corpus in about two CPU minutes and saves it with
``save_pretrained``, so the rest of lenbench loads it exactly as it would load a hub model
(``AutoTokenizer`` / ``AutoModelForCausalLM.from_pretrained``) and samples its own ground truth.

Chat format (the same string is used for training and by ``apply_chat_template``)::

    <|user|>List 7 animals.<|assistant|>1. cat\\n2. dog ...<|eos|>
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lenbench.configs.model import ToyModelConfig  # re-exported: the toy model's own config
from lenbench.data.toyworld import make_corpus
from lenbench.runtime.progress import ProgressLog

log = logging.getLogger(__name__)

USER_TOKEN = "<|user|>"
ASSISTANT_TOKEN = "<|assistant|>"
SYSTEM_TOKEN = "<|system|>"
EOS_TOKEN = "<|eos|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, USER_TOKEN, ASSISTANT_TOKEN, SYSTEM_TOKEN)

# Each turn is "<|role|>content"; an assistant turn ends with EOS, which is what the model learns
# to emit. Unknown roles are rendered as user turns so that any conversation still formats.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|assistant|>' + message['content'] + '<|eos|>' }}"
    "{% elif message['role'] == 'system' %}"
    "{{ '<|system|>' + message['content'] }}"
    "{% else %}"
    "{{ '<|user|>' + message['content'] }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


# The training corpus is drawn from its own seed stream, so benchmark prompts drawn from toyworld
# with small seeds are fresh prompts for the model rather than its training examples.
TRAIN_CORPUS_SEED_BASE = 1_000_000_007


def chat_prompt_text(prompt: str) -> str:
    """The exact string ``apply_chat_template(add_generation_prompt=True)`` renders for a prompt."""
    return f"{USER_TOKEN}{prompt}{ASSISTANT_TOKEN}"


# GPT-2's split, except that a number never takes the space before it: "List 7" and "7." then
# share the token "7", which makes "stop after item N" a match of equal tokens for a tiny model.
_PRE_TOKEN_PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)


def train_tokenizer(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE, so any text (including real data sets later) encodes without unknowns."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_PRE_TOKEN_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[USER_TOKEN, ASSISTANT_TOKEN, SYSTEM_TOKEN],
        padding_side="left",  # decoder-only generation pads on the left
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _encode(tok: PreTrainedTokenizerFast, prompts: list[str], responses: list[str],
            max_seq_len: int) -> list[tuple[list[int], int]]:
    """(ids, n_prompt_tokens) per example; the response ends with EOS. Overlong rows are dropped."""
    p_ids = tok([chat_prompt_text(p) for p in prompts], add_special_tokens=False)["input_ids"]
    r_ids = tok(responses, add_special_tokens=False)["input_ids"]
    out = []
    for p, r in zip(p_ids, r_ids, strict=True):
        ids = p + r + [tok.eos_token_id]
        if len(ids) <= max_seq_len:
            out.append((ids, len(p)))
    return out


def _batches(rows: list[tuple[list[int], int]], batch_size: int,
             rng: np.random.Generator) -> Iterator[list[tuple[list[int], int]]]:
    """Endless batches of similar length (little padding), in a seeded random order."""
    while True:
        order = rng.permutation(len(rows))
        pool = batch_size * 32
        batches = []
        for start in range(0, len(order), pool):
            chunk = sorted(order[start:start + pool], key=lambda i: len(rows[i][0]))
            batches += [chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size)]
        for b in rng.permutation(len(batches)):
            yield [rows[i] for i in batches[b]]


def _collate(batch: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-pad for training; labels are the response tokens (and EOS) only.

    No attention mask: with right padding a causal model never lets a real token see a pad, and
    the unmasked causal path is several times faster on CPU than a padded mask.
    """
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    for i, (ids, n_prompt) in enumerate(batch):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, n_prompt: len(ids)] = torch.tensor(ids[n_prompt:])
    return {"input_ids": input_ids, "labels": labels}


def _response_loss(model: LlamaForCausalLM, input_ids: torch.Tensor,
                   labels: torch.Tensor) -> torch.Tensor:
    """Next-token loss on response positions only, projecting only those onto the vocabulary.

    Same value as ``model(input_ids, labels=labels).loss``, but the LM head and softmax skip the
    prompt and padding positions, which is a real saving at this size.
    """
    hidden = model.model(input_ids=input_ids).last_hidden_state  # (B, T, H)
    targets = labels[:, 1:]  # position t predicts token t+1
    keep = targets != -100
    logits = model.lm_head(hidden[:, :-1][keep])  # (N_response_tokens, V)
    return torch.nn.functional.cross_entropy(logits, targets[keep])


def _lr_at(step: int, cfg: ToyModelConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_lr_ratio`` of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.train_steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]toy model[/bold] {task.description}"), BarColumn(),
        MofNCompleteColumn(), TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn(),
        TimeRemainingColumn(), disable=not enabled, transient=False,
    )


def build_toy_model(out_dir: str | Path, cfg: ToyModelConfig, progress: bool = True) -> dict:
    """Train tokenizer and model on toyworld and save both to ``out_dir``; return a summary.

    Thread count is the caller's business: fix it (``torch.set_num_threads``) for bit-identical
    rebuilds, since float reductions depend on it.
    """
    if cfg.n_layers < 8:
        raise ValueError(f"ToyModelConfig.n_layers={cfg.n_layers}: use >= 8 so that the "
                         "EAGLE-3 layers hs[2], hs[L//2], hs[L-3] are distinct")
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    _seed_everything(cfg.seed)
    log.info("toy model: training a tokenizer and a %d-layer Llama on %d toyworld examples "
             "(%d steps of %d)", cfg.n_layers, cfg.n_train_examples, cfg.train_steps,
             cfg.batch_size)

    corpus = make_corpus(cfg.n_train_examples, seed=TRAIN_CORPUS_SEED_BASE + cfg.seed)
    tok_texts = [chat_prompt_text(ex.prompt) + ex.response
                 for ex in corpus[: cfg.n_tokenizer_examples]]
    tok = train_tokenizer(tok_texts, cfg.vocab_size)
    rows = _encode(tok, [ex.prompt for ex in corpus], [ex.response for ex in corpus],
                   cfg.max_seq_len)

    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.max_seq_len * 2,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(cfg.seed)
    model = LlamaForCausalLM(config)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())

    # Decay the matrices, not the norms' gains.
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    optim = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8, fused=True,
    )
    batches = _batches(rows, cfg.batch_size, np.random.default_rng(cfg.seed))
    losses: list[float] = []
    plain = ProgressLog(log, "toy model training", cfg.train_steps, unit="steps", every_s=30.0)
    with _progress(progress) as bar:
        task = bar.add_task("training", total=cfg.train_steps, loss=float("nan"))
        for step in range(cfg.train_steps):
            for group in optim.param_groups:
                group["lr"] = _lr_at(step, cfg)
            loss = _response_loss(model, **_collate(next(batches), tok.pad_token_id))
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            optim.step()
            losses.append(loss.item())
            bar.update(task, advance=1, loss=float(np.mean(losses[-20:])))
            plain.advance(1)

    model.eval()
    # max_new_tokens is set because transformers' fallback (max_length=20) would cut responses.
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=None,
        max_new_tokens=cfg.max_seq_len,
    )
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    summary = {
        "initial_train_loss": losses[0] if losses else float("nan"),
        "final_train_loss": float(np.mean(losses[-20:])) if losses else float("nan"),
        "n_params": int(n_params),
        "n_train_rows": len(rows),
        "n_dropped_overlong": len(corpus) - len(rows),
        "vocab_size": len(tok),
        "seconds": round(time.perf_counter() - started, 2),
        "config": cfg.to_dict(),
    }
    (out_dir / "toy_build.json").write_text(json.dumps(summary, indent=2) + "\n")
    log.info("toy model: trained in %.0f s, train loss %.3f -> %.3f, %d parameters",
             summary["seconds"], summary["initial_train_loss"], summary["final_train_loss"],
             n_params)
    return summary
