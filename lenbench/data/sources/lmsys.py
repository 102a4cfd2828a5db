"""LMSYS-Chat-1M (lmsys/lmsys-chat-1m, gated): rows of {conversation_id, model, conversation:
[{role, content}], turn, language, openai_moderation: [{flagged, ...}], redacted}.

The prompt is the first user turn (or every answered one with `turns: all`). `language` keeps
only conversations in those languages; `drop_flagged` removes conversations in which any turn
was flagged by the OpenAI moderation API. Both are filters, counted but never errors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lenbench.data.sources.chat import chat_prompts
from lenbench.data.sources.reading import MISSING, BadRow, SourceStream, convert, open_records
from lenbench.data.sources.rows import RawPrompt, Rejected

HUB_ID = "lmsys/lmsys-chat-1m"


def _flagged(moderation: Any) -> bool:
    if moderation is MISSING:
        raise BadRow("missing_field", "missing field 'openai_moderation' (needed by "
                                      "dataset.drop_flagged)")
    if moderation is None:
        raise BadRow("null_field", "field 'openai_moderation' is null (needed by "
                                   "dataset.drop_flagged)")
    if not isinstance(moderation, list) or not all(isinstance(m, dict) for m in moderation):
        raise BadRow("wrong_type", "'openai_moderation' must be a list of objects")
    return any(bool(m.get("flagged")) for m in moderation)


def lmsys_source(path: str | None = None, hub_id: str | None = HUB_ID,
                 data_files: Any = None, hf_split: str = "train",
                 config_name: str | None = None, revision: str | None = None,
                 reader: str = "auto", streaming: bool = False,
                 hf_cache_dir: str | None = None, turns: str = "first",
                 language: str | Sequence[str] | None = None, drop_flagged: bool = False,
                 strict: bool = False) -> SourceStream:
    """Prompts of LMSYS-Chat-1M conversations, from the hub or a local file or folder."""
    languages = None if language is None else \
        {language} if isinstance(language, str) else set(language)
    info: dict = {"format": "lmsys", "turns": turns, "language": sorted(languages or []) or None,
                  "drop_flagged": drop_flagged}
    records = open_records("lmsys", path=path, hub_id=hub_id, data_files=data_files,
                           hf_split=hf_split, config_name=config_name, revision=revision,
                           reader=reader, streaming=streaming, hf_cache_dir=hf_cache_dir,
                           info=info)

    def to_prompts(row: dict) -> Iterable[RawPrompt | Rejected]:
        if languages is not None:
            lang = row.get("language", MISSING)
            if lang is MISSING:
                raise BadRow("missing_field", "missing field 'language' (needed by "
                                              "dataset.language)")
            if lang is None:
                raise BadRow("null_field", "field 'language' is null (needed by dataset.language)")
            if not isinstance(lang, str):
                raise BadRow("wrong_type", f"'language' must be text, not {type(lang).__name__}")
            if lang not in languages:
                return [Rejected("language", "", f"language {lang!r} not in "
                                                 f"{sorted(languages)}", bad=False)]
        if drop_flagged and _flagged(row.get("openai_moderation", MISSING)):
            return [Rejected("moderation", "", "flagged by openai_moderation", bad=False)]
        meta = {k: row[k] for k in ("conversation_id", "model", "language", "redacted")
                if isinstance(row.get(k), str | bool)}
        return chat_prompts(row.get("conversation", MISSING), field="conversation", role_key="role",
                            text_key="content", turns=turns, meta=meta)

    return SourceStream(convert(records, to_prompts, strict), info)
