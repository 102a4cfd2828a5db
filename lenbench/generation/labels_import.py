"""Label import: turn prompts with known output lengths into a LengthSet without a model.

Users with length traces of their own (a `jsonl` source whose rows carry `length` or
`output_tokens`) can score text-only predictors on them. The rows have the columns of the label
table the generate stage writes (lenbench/contract/labels.py), so everything downstream reads
them unchanged; what cannot be known is left empty and said in the card: output token ids are [],
and a length is counted the way the trace counted it.

No target model is loaded. Prompt token ids come from a tokenizer only when the user names one
(`dataset.tokenizer`); otherwise each word or punctuation mark counts as one token (`word_pieces`),
so prompt-length predictors see a count of the right order, and the card says which was used.
A row flagged as cut off by the trace's cap is kept and marked censored (scored as a lower bound).
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.models.chat import render_prompt

LENGTH_KEY = "length"  # where the jsonl source keeps a known length in a prompt's meta
CENSORED_KEY = "censored"  # ... and its censoring flag(s), when the trace gave one
_PIECE = re.compile(r"\w+|[^\w\s]")


@dataclass
class KnownLengths:
    """What a source knew about its prompts' lengths: per prompt_id, the lengths and their
    censoring flags; `unlabelled` lists the prompts the source gave no length for."""

    lengths: dict[str, list[int]]
    censored: dict[str, list[bool]] = field(default_factory=dict)
    unlabelled: list[str] = field(default_factory=list)

    @property
    def largest(self) -> int:
        return max(max(v) for v in self.lengths.values())


def known_lengths(prompts: pd.DataFrame) -> KnownLengths | None:
    """The lengths the source gave, or None when no prompt has one (then labels are generated).

    Prompts without a length in a file that has them are listed in `unlabelled`: the pipeline
    counts and drops them rather than refusing the whole file.
    """
    known = KnownLengths({})
    for pid, meta in zip(prompts["prompt_id"], prompts["meta"]):
        info = json.loads(meta or "{}")
        value = info.get(LENGTH_KEY)
        if value is None:
            known.unlabelled.append(pid)
            continue
        known.lengths[pid] = [int(v) for v in value] if isinstance(value, list) else [int(value)]
        flag = info.get(CENSORED_KEY)
        if flag is not None:
            known.censored[pid] = [bool(f) for f in flag] if isinstance(flag, list) \
                else [bool(flag)] * len(known.lengths[pid])
    return known if known.lengths else None


def word_pieces(text: str) -> list[int]:
    """The fallback prompt "tokens" when no tokenizer is named: one per word or punctuation mark,
    each a stable hash of the piece (not a vocabulary id). Real tokenizers give roughly 1.3 tokens
    per English word, so counts are comparable between prompts, not with a model's counts."""
    return [zlib.crc32(p.encode("utf-8", "surrogatepass")) & 0x7FFFFFFF
            for p in _PIECE.findall(text)]


def _as_length(value: object, pid: str) -> int:
    ok = isinstance(value, int | float | np.integer | np.floating) and \
        not isinstance(value, bool) and float(value).is_integer() and value >= 1
    if not ok:
        raise ValueError(f"import_labels: prompt {pid} has length {value!r}; lengths must be "
                         "positive integers (a response has at least one token)")
    return int(value)


def import_labels(prompts: pd.DataFrame,
                  raw_lengths: Mapping[str, int | Sequence[int]] | None = None,
                  tokenizer=None, template_kwargs: dict | None = None,
                  censored: Mapping[str, Sequence[bool]] | None = None,
                  ) -> tuple[pd.DataFrame, dict]:
    """Labels (LABEL_COLUMNS) from known lengths: one row per (prompt, given length).

    `raw_lengths` maps prompt_id to a length or a list of lengths (several samples, numbered
    0..k-1); None reads them (and their censoring flags) from the prompts' meta, and then every
    prompt must have one. `censored` maps prompt_id to one flag per length. With a `tokenizer`,
    prompt_token_ids are the prompt rendered through its chat template, as the generate stage
    would; without one they are `word_pieces`. `template_kwargs` are the chat template's
    variables (model.chat_template_kwargs).
    """
    if raw_lengths is None:
        known = known_lengths(prompts) or KnownLengths({})
        raw_lengths, censored = known.lengths, known.censored
    censored = censored or {}
    absent = [pid for pid in prompts["prompt_id"] if pid not in raw_lengths]
    if absent:
        raise ValueError(f"import_labels: {len(absent)} of {len(prompts)} prompts have no known "
                         f"length (first prompt_id {absent[0]})")
    rows = []
    for p in prompts.itertuples(index=False):
        given = raw_lengths[p.prompt_id]
        samples = list(given) if isinstance(given, Sequence | np.ndarray) else [given]
        if not samples:
            raise ValueError(f"import_labels: prompt {p.prompt_id} has an empty list of lengths")
        flags = list(censored.get(p.prompt_id) or [False] * len(samples))
        ids = render_prompt(tokenizer, p.text, template_kwargs) if tokenizer is not None \
            else word_pieces(p.text)
        for s, length in enumerate(samples):
            cut = bool(flags[s]) if s < len(flags) else False
            rows.append({"prompt_id": p.prompt_id, "sample_idx": s, "split": p.split,
                         "family": getattr(p, "family", "") or "", "text": p.text,
                         "prompt_token_ids": list(ids), "output_token_ids": [],
                         "L": _as_length(length, p.prompt_id),
                         "finish_reason": "length" if cut else "stop", "censored": cut})
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    labels["L"] = labels["L"].astype("int64")
    labels["sample_idx"] = labels["sample_idx"].astype("int64")
    labels["censored"] = labels["censored"].astype(bool)
    per_prompt = labels.groupby("prompt_id").size() if len(labels) else pd.Series(dtype=int)
    n_censored = int(labels["censored"].sum())
    card = {
        "label_source": "imported",
        "n_prompts": len(prompts), "n_rows": len(labels),
        "n_samples": int(per_prompt.max()) if len(per_prompt) else 0,
        "n_samples_min": int(per_prompt.min()) if len(per_prompt) else 0,
        "n_censored": n_censored,
        "censored_rows": "kept, scored as right-censored (flagged by the trace)" if n_censored
        else "none flagged by the trace",
        "length_convention": "as given by the source (lenbench's own labels count the EOS "
                             "token)",
        "output_token_ids": "empty: the response tokens are not known",
        "prompt_token_ids": "chat template of the tokenizer" if tokenizer is not None
        else "no tokenizer named: one per word or punctuation mark (hashed, not vocabulary ids)",
        "tokenizer": type(tokenizer).__name__ if tokenizer is not None else None,
        "chat_template": getattr(tokenizer, "chat_template", None),
        "sampling": None, "real_token_fraction": None,
        "mean_L": float(labels["L"].mean()) if len(labels) else None,
        "max_L": int(labels["L"].max()) if len(labels) else None,
    }
    return labels, card
