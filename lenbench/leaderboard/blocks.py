"""The leaderboard as blocks: headings, paragraphs, tables, captions, images and lists.

Each section builds its blocks once, and two renderers read them: `markdown_lines` writes
README.md and `lenbench.leaderboard.html` the web pages, so a new column, note or plot appears in
both. Text and cells hold the markdown's own inline text (`*ref*`, `**bold**`, `` `key` ``,
``\\|``): the markdown is that text unchanged, and the HTML renderer converts the same strings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

LEFT, RIGHT = ":---", "---:"


@dataclass(frozen=True)
class Cell:
    """A cell with more than its text: the value it sorts by on the site (None: sort by the
    text) and a tooltip. The markdown shows the text alone."""

    text: str
    sort: float | None = None
    note: str = ""

    def __str__(self) -> str:
        return self.text


@dataclass
class Heading:
    level: int  # 1 = "#", the markdown's levels
    text: str


@dataclass
class Text:
    """A paragraph. `role` "provenance" marks how the labels and the model were made (the
    site shows those in the world's card)."""

    text: str
    role: str = ""


@dataclass
class Table:
    """Rows of cells under a header. `foot` rows stay below the others when a reader sorts;
    `caption` is the key of the `Caption` that explains the columns; `align` is the markdown's
    (default: the first column left, the rest right)."""

    header: list[str]
    rows: list[list[str | Cell]]
    align: list[str] | None = None
    foot: list[list[str | Cell]] = field(default_factory=list)
    caption: str = ""

    def alignment(self) -> list[str]:
        return self.align or [LEFT] + [RIGHT] * (len(self.header) - 1)


@dataclass
class Caption:
    """What a table's columns mean. The markdown writes each caption once, in glossary.md, and
    links it from under its table (pages.py); a web page gathers each caption once, in its
    glossary, linked from the column headers."""

    key: str
    text: str


@dataclass
class Image:
    alt: str
    src: str  # a file name beside the markdown


@dataclass
class Items:
    """A bulleted list."""

    items: list[str]


@dataclass
class Comment:
    """A note for the markdown's machine readers (the findings checker's `world:` and `check:`
    markers): an HTML comment in the markdown, left out of the web pages."""

    text: str


Block = Heading | Text | Table | Caption | Image | Items | Comment


def table_markdown(header: Sequence[str], align: Sequence[str],
                   rows: Iterable[Sequence[str | Cell]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def block_markdown(block: Block) -> str:
    if isinstance(block, Heading):
        return f"{'#' * block.level} {block.text}"
    if isinstance(block, Table):
        return table_markdown(block.header, block.alignment(), [*block.rows, *block.foot])
    if isinstance(block, Image):
        return f"![{block.alt}]({block.src})"
    if isinstance(block, Items):
        return "\n".join(f"- {item}" for item in block.items)
    if isinstance(block, Comment):
        return f"<!-- {block.text} -->"
    return block.text


def markdown_lines(blocks: Iterable[Block]) -> list[str]:
    """The markdown of `blocks`, each followed by a blank line."""
    return [line for block in blocks for line in (block_markdown(block), "")]
