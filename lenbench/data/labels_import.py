"""Label import: turn prompts with known output lengths into a LengthSet without generating.

Users with length traces of their own (a `jsonl` source whose rows carry `length` or
`output_tokens`) can score text-only predictors on them. The rows have the generate stage's
columns, so everything downstream reads them unchanged; what cannot be known is left empty and
said in the card: output token ids are [], and a length is taken as a complete response
(finish_reason "stop", not censored), counted the way the trace counted it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lenbench.generation.runner import LABEL_COLUMNS, render_prompt

LENGTH_KEY = "length"  # where the jsonl source keeps a known length in a prompt's meta


def known_lengths(prompts: pd.DataFrame) -> dict[str, list[int]] | None:
    """prompt_id -> the lengths its source gave; None when no prompt has one.

    Raises when only some prompts have lengths: importing would lose the others and generating
    would ignore the given ones, so the user must choose (fix the file or drop the field).
    """
    lengths: dict[str, list[int]] = {}
    missing: list[str] = []
    for pid, meta in zip(prompts["prompt_id"], prompts["meta"]):
        value = json.loads(meta or "{}").get(LENGTH_KEY)
        if value is None:
            missing.append(pid)
        else:
            lengths[pid] = [int(v) for v in value] if isinstance(value, list) else [int(value)]
    if not lengths:
        return None
    if missing:
        texts = prompts.set_index("prompt_id").loc[missing[:3], "text"].str.slice(0, 40).tolist()
        raise ValueError(f"{len(missing)} of {len(prompts)} prompts have no known length "
                         f"(e.g. {texts}); give every row a 'length' to import labels, or "
                         "none to generate them")
    return lengths


def _as_length(value: object, pid: str) -> int:
    ok = isinstance(value, int | float | np.integer | np.floating) and \
        not isinstance(value, bool) and float(value).is_integer() and value >= 0
    if not ok:
        raise ValueError(f"import_labels: prompt {pid} has length {value!r}; lengths must be "
                         "non-negative integers")
    return int(value)


def import_labels(prompts: pd.DataFrame,
                  raw_lengths: Mapping[str, int | Sequence[int]] | None = None,
                  tokenizer=None, template_kwargs: dict | None = None
                  ) -> tuple[pd.DataFrame, dict]:
    """Labels (LABEL_COLUMNS) from known lengths: one row per (prompt, given length).

    `raw_lengths` maps prompt_id to a length or a list of lengths (several samples, numbered
    0..k-1); None reads them from the prompts' meta. With a `tokenizer`, prompt_token_ids are
    the prompt rendered through its chat template, as the generate stage would; without one
    they are [] and prompt-length predictors see 0. `template_kwargs` are the chat template's
    variables (model.chat_template_kwargs).
    """
    if raw_lengths is None:
        raw_lengths = known_lengths(prompts) or {}
    absent = [pid for pid in prompts["prompt_id"] if pid not in raw_lengths]
    if absent:
        raise ValueError(f"import_labels: {len(absent)} of {len(prompts)} prompts have no known "
                         f"length (first prompt_id {absent[0]})")
    rows = []
    for p in prompts.itertuples(index=False):
        given = raw_lengths[p.prompt_id]
        samples = list(given) if isinstance(given, Sequence | np.ndarray) else [given]
        ids = render_prompt(tokenizer, p.text, template_kwargs) if tokenizer is not None else []
        if not samples:
            raise ValueError(f"import_labels: prompt {p.prompt_id} has an empty list of lengths")
        for s, length in enumerate(samples):
            rows.append({"prompt_id": p.prompt_id, "sample_idx": s, "split": p.split,
                         "family": getattr(p, "family", "") or "", "text": p.text,
                         "prompt_token_ids": list(ids), "output_token_ids": [],
                         "L": _as_length(length, p.prompt_id), "finish_reason": "stop", "censored": False})
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    labels["L"] = labels["L"].astype("int64")
    labels["sample_idx"] = labels["sample_idx"].astype("int64")
    labels["censored"] = labels["censored"].astype(bool)
    per_prompt = labels.groupby("prompt_id").size() if len(labels) else pd.Series(dtype=int)
    card = {
        "label_source": "imported",
        "n_prompts": len(prompts), "n_rows": len(labels),
        "n_samples": int(per_prompt.max()) if len(per_prompt) else 0,
        "n_samples_min": int(per_prompt.min()) if len(per_prompt) else 0,
        "n_censored": 0, "censored_rows": "none: imported lengths are taken as complete",
        "length_convention": "as given by the source (lenbench's own labels count the EOS "
                             "token)",
        "output_token_ids": "empty: the response tokens are not known",
        "prompt_token_ids": "chat template of the tokenizer" if tokenizer is not None
        else "empty: no tokenizer given",
        "tokenizer": type(tokenizer).__name__ if tokenizer is not None else None,
        "chat_template": getattr(tokenizer, "chat_template", None),
        "sampling": None, "real_token_fraction": None,
        "mean_L": float(labels["L"].mean()) if len(labels) else None,
        "max_L": int(labels["L"].max()) if len(labels) else None,
    }
    return labels, card
