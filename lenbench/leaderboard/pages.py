"""The markdown leaderboard as several pages, so that the front page stays short enough to read.

README.md leads with the verdict, then gives each world its heading, one line on what it is, its
main table and a link to the world's own page (``world-<stem>.md``, the stem of the site's
``world-<stem>.html``), which holds every table, plot, note and the card. A caption is long and
the same under every world's table, so it is written once, in ``glossary.md``, with a line on each
column; every table links there. The pages read the same blocks as the site: a change of layout
only, never of figures.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lenbench.leaderboard.blocks import (
    Block,
    Caption,
    Heading,
    Items,
    Table,
    Text,
    markdown_lines,
)
from lenbench.leaderboard.glossary import CAPTION_TITLES, column_note
from lenbench.leaderboard.site import PAGE_PREFIX, World
from lenbench.stages import atomic_write_bytes

README, GLOSSARY = "README.md", "glossary.md"
BACK = f"[← The leaderboard]({README}) · [Glossary]({GLOSSARY})"


@dataclass
class Summary:
    """What the front page shows of a world: a line saying what it is, its main table and the
    notes that go with the table (the family of Δ tests)."""

    line: str
    table: Table | None
    notes: list[Block] = field(default_factory=list)


def page_name(world: World) -> str:
    """The world's markdown page, beside its web page (the same stem)."""
    return f"{PAGE_PREFIX}{world.stem}.md"


def anchor(title: str) -> str:
    """The anchor a markdown renderer gives a heading (GitHub's rule: lower case, punctuation
    dropped, spaces as hyphens)."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def caption_title(key: str) -> str:
    return CAPTION_TITLES.get(key, key.replace("_", " ").capitalize())


def caption_link(key: str, prefix: str = "") -> Text:
    """The line under a table that sends the reader to its caption in the glossary."""
    title = caption_title(key)
    return Text(f"{prefix}What the columns mean: [{title}]({GLOSSARY}#{anchor(title)}).")


def linked(blocks: Iterable[Block]) -> list[Block]:
    """`blocks` with each caption replaced by a link to it in the glossary."""
    return [caption_link(b.key) if isinstance(b, Caption) else b for b in blocks]


def world_page(world: World) -> str:
    """A world's page: a way back, then all its blocks, captions linked."""
    return _text(markdown_lines([Text(BACK), *linked(world.blocks)]))


def front_page(intro: Sequence[Block], worlds: Sequence[World],
               summaries: Sequence[Summary], failures: Sequence[Block]) -> str:
    """README.md: the verdict first, then each world's heading, line, main table and a link to
    its page, then the failed runs."""
    blocks: list[Block] = [*linked(intro)]
    for world, summary in zip(worlds, summaries):
        link = f"[Every table, plot and note of {world.title}]({page_name(world)})"
        blocks += [Heading(2, world.title), Text(summary.line)]
        if summary.table is not None:
            blocks += [summary.table, *summary.notes,
                       caption_link(summary.table.caption or "main")]
        blocks.append(Text(link + ": the details, distributions, scheduling and the card."))
    return _text(markdown_lines([*blocks, *failures]))


def glossary_page(intro: Sequence[Block], worlds: Sequence[World]) -> str:
    """Every caption once (a caption that reads differently in some worlds, once per wording,
    with the worlds it is for), then a line on each column header the tables use."""
    texts: dict[str, dict[str, list[str]]] = {}  # key -> wording -> worlds
    headers: dict[str, None] = {}
    for where, blocks in [("", intro), *((w.title, w.blocks) for w in worlds)]:
        for block in blocks:
            if isinstance(block, Caption):
                names = texts.setdefault(block.key, {}).setdefault(block.text, [])
                if where and where not in names:
                    names.append(where)
            elif isinstance(block, Table):
                headers.update(dict.fromkeys(block.header))
    out: list[Block] = [Heading(1, "lenbench leaderboard: glossary"),
                        Text(f"[← The leaderboard]({README})"),
                        Text("What each table's columns and marks mean, written once for every "
                             "world; the tables link here.")]
    for key in sorted(texts, key=lambda k: list(CAPTION_TITLES).index(k)
                      if k in CAPTION_TITLES else len(CAPTION_TITLES)):
        out.append(Heading(2, caption_title(key)))
        wordings = texts[key]
        for text, names in wordings.items():
            out.append(Text(text if len(wordings) == 1 or not names
                            else f"*In {'; '.join(names)}:* {text}"))
    notes = [f"**{h}**: {column_note(h)}" for h in sorted(headers) if column_note(h)]
    if notes:
        out += [Heading(2, "Columns"), Items(notes)]
    return _text(markdown_lines(out))


def write_pages(out: Path, intro: Sequence[Block], worlds: Sequence[World],
                summaries: Sequence[Summary], failures: Sequence[Block]) -> Path:
    """Write README.md, glossary.md and one page per world into `out`, remove the pages of
    worlds no longer there, and return the README's path."""
    pages = {page_name(w): world_page(w) for w in worlds}
    pages[GLOSSARY] = glossary_page(intro, worlds)
    pages[README] = front_page(intro, worlds, summaries, failures)
    for stale in out.glob(f"{PAGE_PREFIX}*.md"):
        if stale.name not in pages:
            stale.unlink()
    for name, text in pages.items():
        atomic_write_bytes(out / name, text.encode("utf-8"))
    return out / README


def _text(lines: list[str]) -> str:
    return "\n".join(lines).rstrip("\n") + "\n"
