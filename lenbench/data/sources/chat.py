"""Prompts out of a conversation: the first user turn (OUTLETS protocol) or every replied turn.

ShareGPT (`from`/`value`), LMSYS-Chat-1M and bring-your-own `messages` (`role`/`content`) differ
only in key names and role spellings, so they share this code.
"""

from __future__ import annotations

from typing import Any

from lenbench.data.sources.reading import MISSING, BadRow
from lenbench.data.sources.rows import RawPrompt, Rejected

TURN_MODES = ("first", "all")
ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
         "chatgpt": "assistant", "bing": "assistant", "bard": "assistant", "model": "assistant",
         "system": "system"}


def parse_turns(conv: Any, field: str, role_key: str, text_key: str) -> list[tuple[str, Any]]:
    """(role, content) per turn, roles mapped to user/assistant/system (others kept as given).

    Content is not checked here: only the turns a prompt uses must be text.
    """
    if conv is MISSING:
        raise BadRow("missing_field", f"missing field {field!r}")
    if conv is None:
        raise BadRow("null_field", f"field {field!r} is null")
    if not isinstance(conv, list):
        raise BadRow("wrong_type", f"{field!r} must be a list of turns, not "
                                   f"{type(conv).__name__}")
    turns = []
    for k, turn in enumerate(conv):
        if not isinstance(turn, dict):
            raise BadRow("wrong_type", f"{field}[{k}] must be an object with {role_key!r} and "
                                       f"{text_key!r}, not {type(turn).__name__}")
        for key in (role_key, text_key):
            if key not in turn:
                raise BadRow("missing_field", f"{field}[{k}] has no {key!r}")
        role = turn[role_key]
        turns.append((ROLES.get(role.lower(), role) if isinstance(role, str) else str(role),
                      turn[text_key]))
    return turns


def _text(content: Any, where: str) -> str:
    if content is None:
        raise BadRow("null_field", f"{where} is null")
    if not isinstance(content, str):
        raise BadRow("non_text", f"{where} is not text ({type(content).__name__})")
    return content


def chat_prompts(conv: Any, *, field: str, role_key: str, text_key: str, turns: str,
                 meta: dict, family: str = "") -> list[RawPrompt | Rejected]:
    """The prompts of one conversation; context before the prompt turn is kept in meta.

    `first`: the first user turn. `all`: for every assistant turn, the last user turn before it
    (so each prompt is one the model actually answered); its preceding messages go to
    meta["context"]. The prompt text is that user message alone, as the generator renders it.
    """
    if turns not in TURN_MODES:
        raise ValueError(f"dataset.turns={turns!r}: use one of {TURN_MODES}")
    parsed = parse_turns(conv, field, role_key, text_key)
    users = [i for i, (role, _) in enumerate(parsed) if role == "user"]
    if turns == "first":
        picked = users[:1]
    else:
        picked = sorted({max((u for u in users if u < j), default=-1)
                         for j, (role, _) in enumerate(parsed) if role == "assistant"} - {-1})
    if not picked:
        what = "no user turn" if turns == "first" or not users else "no answered user turn"
        return [Rejected("no_prompt", "", f"{field!r} has {what}")]
    out: list[RawPrompt | Rejected] = []
    for i in picked:
        text = _text(parsed[i][1], f"{field}[{i}].{text_key}")
        context = [{"role": role, "content": _text(c, f"{field}[{k}].{text_key}")}
                   for k, (role, c) in enumerate(parsed[:i])]
        item_meta = {**meta, "turn": i}
        if context:
            item_meta["context"] = context
        out.append(RawPrompt(text, family, item_meta, f" (turn {i})" if turns == "all" else ""))
    return out
