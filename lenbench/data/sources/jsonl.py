"""Bring your own prompts: one JSON object per line with `prompt` (text) or `messages`
([{role, content}], the prompt being the last user message), and optionally a known length.

A row may carry `length` or `output_tokens` (an integer, or a list of integers for several
samples of the prompt); when every prompt has one, the pipeline imports those lengths as labels
instead of generating ("label import", see `lenbench.generation.labels_import`). Optional fields:
`id` (kept in meta) and `family` (a grouping label for per-family metrics). A known length may
be flagged as cut off by the trace's cap, `"censored": true` or `"finish_reason": "length"` (one
flag, or a list matching the lengths): imported, such a row is scored as right-censored.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lenbench.data.sources.chat import _text, parse_turns
from lenbench.data.sources.reading import BadRow, SourceStream, convert, open_records
from lenbench.data.sources.rows import RawPrompt, Rejected

LENGTH_FIELDS = ("length", "output_tokens")
MAX_LENGTH = 2**31 - 1  # a token count beyond this is no length (and would overflow int64 labels)


def parse_length(value: Any, field: str) -> int | list[int]:
    """A known output length: a positive integer, or a non-empty list of them (samples). Zero is
    refused: a response has at least one token (lenbench's own lengths count the EOS), and the
    simulator cannot serve an empty one."""

    def one(v: Any) -> int:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and \
            float(v).is_integer() and v >= 1
        if not ok:
            raise BadRow("wrong_type", f"{field!r} must be a positive integer or a list of "
                                       f"them, not {v!r}")
        if v > MAX_LENGTH:
            shown = repr(v) if len(repr(v)) <= 24 else f"a {len(str(int(v)))}-digit number"
            raise BadRow("wrong_type", f"{field!r} is {shown}, more tokens than any output has "
                                       f"(at most {MAX_LENGTH:,})")
        return int(v)

    if isinstance(value, list):
        if not value:
            raise BadRow("wrong_type", f"{field!r} is an empty list")
        return [one(v) for v in value]
    return one(value)


def parse_censoring(row: dict, length: int | list[int]) -> bool | list[bool] | None:
    """The row's censoring flag(s): `censored` (true/false) or `finish_reason` ("length" means
    the cap cut the answer off); a list must have one flag per length. None when neither is set."""
    n = len(length) if isinstance(length, list) else None

    def flags(value: Any, field: str, convert: Any) -> bool | list[bool]:
        if isinstance(value, list):
            if n is None or len(value) != n:
                raise BadRow("wrong_type", f"{field!r} is a list of {len(value)} but the row "
                                           f"has {n if n is not None else 'one'} length(s)")
            return [convert(v) for v in value]
        return convert(value) if n is None else [convert(value)] * n

    def as_bool(v: Any) -> bool:
        if not isinstance(v, bool):
            raise BadRow("wrong_type", f"'censored' must be true or false, not {v!r}")
        return v

    def as_finish(v: Any) -> bool:
        if not isinstance(v, str):
            raise BadRow("wrong_type", f"'finish_reason' must be text, not {v!r}")
        return v == "length"

    if row.get("censored") is not None:
        return flags(row["censored"], "censored", as_bool)
    if row.get("finish_reason") is not None:
        return flags(row["finish_reason"], "finish_reason", as_finish)
    return None


def row_prompt(row: dict) -> tuple[str, list[dict]]:
    """The prompt text and the messages before it."""
    if row.get("prompt") is not None:
        return _text(row["prompt"], "'prompt'"), []
    if row.get("messages") is None:
        if "prompt" in row or "messages" in row:
            raise BadRow("null_field", "field 'prompt' (or 'messages') is null")
        raise BadRow("missing_field", "missing field 'prompt' (or 'messages')")
    turns = parse_turns(row["messages"], "messages", "role", "content")
    users = [i for i, (role, _) in enumerate(turns) if role == "user"]
    if not users:
        raise BadRow("missing_field", "'messages' has no user message")
    last = users[-1]
    context = [{"role": role, "content": _text(c, f"messages[{k}].content")}
               for k, (role, c) in enumerate(turns[:last])]
    return _text(turns[last][1], f"messages[{last}].content"), context


def jsonl_source(path: str | None = None, hub_id: str | None = None,
                 data_files: Any = None, hf_split: str = "train",
                 config_name: str | None = None, revision: str | None = None,
                 reader: str = "auto", streaming: bool = False,
                 hf_cache_dir: str | None = None, length_field: str | None = None,
                 strict: bool = False) -> SourceStream:
    """Prompts (and known lengths, if given) from a JSON Lines file or folder of them."""
    fields = (length_field,) if length_field else LENGTH_FIELDS
    info: dict = {"format": "jsonl", "length_fields": list(fields)}
    records = open_records("jsonl", path=path, hub_id=hub_id, data_files=data_files,
                           hf_split=hf_split, config_name=config_name, revision=revision,
                           reader=reader, streaming=streaming, hf_cache_dir=hf_cache_dir,
                           info=info)

    def to_prompts(row: dict) -> Iterable[RawPrompt | Rejected]:
        text, context = row_prompt(row)
        meta: dict = {}
        if isinstance(row.get("id"), str | int):
            meta["id"] = row["id"]
        if context:
            meta["context"] = context
        for f in fields:
            if row.get(f) is not None:
                meta["length"] = parse_length(row[f], f)
                censored = parse_censoring(row, meta["length"])
                if censored is not None:
                    meta["censored"] = censored
                break
        family = row.get("family")
        if family is not None and not isinstance(family, str):
            raise BadRow("wrong_type", f"'family' must be text, not {type(family).__name__}")
        return [RawPrompt(text, family or "", meta)]

    return SourceStream(convert(records, to_prompts, strict), info)
