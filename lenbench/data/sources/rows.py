"""The two things a source yields per row: a prompt, or a counted reason it was dropped.

They live with the sources that produce them, so the sources and the PromptSet builder that
consumes them import in one direction only.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RawPrompt:
    """A prompt as a source yields it, before filtering and splitting."""

    text: str
    family: str = ""
    meta: dict = field(default_factory=dict)
    where: str = ""  # "file.jsonl:17": lets the card point at the row behind a drop


@dataclass
class Rejected:
    """A row a source could not or would not turn into a prompt, so the card can count it.

    `bad` rows are broken input (malformed, wrong types); the others are deliberate filters
    (language, moderation). Sources yield these instead of skipping rows silently.
    """

    reason: str
    where: str
    message: str
    bad: bool = True
    excerpt: str = ""  # the start of the row as read, to find it by eye
