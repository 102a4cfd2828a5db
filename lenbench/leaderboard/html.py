"""Blocks as HTML: the site's rendering of the same blocks the markdown renders (blocks.py).

Every string is escaped before anything else, so a name from a result shows as text whatever it
holds; only then do the markdown's inline marks (``**bold**``, ``*italic*``, `` `code` ``,
``\\|``) become tags. Each table cell that starts with a number carries it as ``data-v``, the
value a reader's click on the header sorts by (assets.SCRIPT); an interval alone sorts by its
midpoint, "(reference)" as 0 (a paired difference to itself), a dash as missing. Markdown
comments (the findings checker's markers) are dropped: a page shows what a reader would see.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

from lenbench.leaderboard.assets import CSP, SCRIPT, STYLE
from lenbench.leaderboard.blocks import (
    LEFT,
    Block,
    Caption,
    Cell,
    Comment,
    Heading,
    Image,
    Items,
    Table,
)
from lenbench.leaderboard.glossary import column_note


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


_COMMENT = re.compile(r"\s*<!--.*?-->", re.S)
_CODE = re.compile(r"(`[^`]+`)")
_STRONG = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*")
_EM = re.compile(r"(?<![\w*])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![\w*])")


def inline(text: object) -> str:
    """Escaped text with the markdown's inline marks as tags (code spans first, untouched)."""
    out = []
    for part in _CODE.split(_COMMENT.sub("", str(text))):
        if len(part) > 1 and part.startswith("`") and part.endswith("`"):
            out.append(f"<code>{esc(part[1:-1].replace(chr(92) + '|', '|'))}</code>")
            continue
        part = esc(part.replace("\\|", "|"))
        part = _STRONG.sub(r"<strong>\1</strong>", part)
        out.append(_EM.sub(r"<em>\1</em>", part))
    return "".join(out)


_NUMBER = re.compile(r"[-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
_SCALE = {"k": 1e3, "M": 1e6, "B": 1e9}


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def sort_value(text: str) -> float | None:
    """The number a cell sorts by: its leading number (a point value before its interval,
    unit suffixes k/M/B applied), an interval's midpoint when the cell is an interval alone,
    0 for "(reference)"; None for text and for missing values."""
    plain = text.replace("*", "").replace("`", "").strip().removeprefix("≥").strip()
    if plain == "(reference)":
        return 0.0
    if plain.startswith("[") and len(found := _NUMBER.findall(plain)) >= 2:
        return (_number(found[0]) + _number(found[1])) / 2
    match = _NUMBER.match(plain)
    if not match:
        return None
    rest = plain[match.end():]
    if rest[:1] in _SCALE and not rest[1:2].isalnum():
        return _number(match.group()) * _SCALE[rest[0]]
    if rest[:1].isalnum():  # "3gram": a name, not a number
        return None
    return _number(match.group())


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"


def th(label_html: str, note: str = "", gloss: str = "", left: bool = False,
       attrs: str = "", after: str = "") -> str:
    """A sortable header: its text is a button that sorts (a click anywhere on the header but
    a link does too), its note the tooltip; `after` (a link, say) and the glossary link follow
    the button, never inside it, so a click on the text never navigates."""
    title = f' title="{esc(note)}"' if note else ""
    link = (f'<a class="g" href="#{esc(gloss)}" title="What the columns mean">?</a>'
            if gloss else "")
    klass = ' class="l"' if left else ""
    return (f'<th scope="col"{klass}{attrs}><button type="button"{title}>{label_html}</button>'
            f"{after}{link}</th>")


PROSE = 48  # a cell of more characters than this, with spaces, is a sentence: it wraps


def td(cell: str | Cell, left: bool = False, attrs: str = "", klass: str = "") -> str:
    text = str(cell)
    value = cell.sort if isinstance(cell, Cell) else None
    if value is None and not isinstance(cell, Cell):
        value = sort_value(text)
    data = "" if value is None else f' data-v="{value:.10g}"'
    title = f' title="{esc(cell.note)}"' if isinstance(cell, Cell) and cell.note else ""
    prose = len(text) > PROSE and " " in text
    classes = " ".join(c for c in ("l" if left else "", "prose" if prose else "", klass) if c)
    klass_attr = f' class="{classes}"' if classes else ""
    return f"<td{klass_attr}{data}{title}{attrs}>{inline(text)}</td>"


def scroll_box(table: str, label: str = "table") -> str:
    """A table in a box that scrolls sideways, not the page: focusable, so keys scroll it."""
    return (f'<div class="scroll" tabindex="0" role="region" aria-label="{esc(label)}">'
            f"{table}</div>")


def table_html(table: Table, anchor: str = "") -> str:
    """A sortable table in a horizontally scrolling box; headers link to `anchor`, the table's
    caption in the glossary."""
    left = [a == LEFT for a in table.alignment()]
    head = "".join(th(inline(h), column_note(h), anchor, is_left)
                   for h, is_left in zip(table.header, left))

    def rows(body: Sequence[Sequence[str | Cell]]) -> str:
        return "".join("<tr>" + "".join(td(c, is_left) for c, is_left in zip(r, left)) + "</tr>"
                       for r in body)

    foot = f"<tfoot>{rows(table.foot)}</tfoot>" if table.foot else ""
    label = re.sub(r"[`*]", "", " · ".join(table.header[:3]))
    return scroll_box(f'<table class="sortable"><thead><tr>{head}</tr></thead>'
                      f"<tbody>{rows(table.rows)}</tbody>{foot}</table>", label)


def blocks_html(blocks: Iterable[Block], anchors: dict[int, str], shift: int = 0,
                ids: set[str] | None = None) -> str:
    """Headings (moved up `shift` levels, each with a unique id), paragraphs, tables (linked
    to their caption's anchor, by the table's id()), lists and figures; captions are left out:
    the page's glossary holds them."""
    ids = set() if ids is None else ids
    out = []
    for block in blocks:
        if isinstance(block, Caption | Comment):
            continue
        if isinstance(block, Heading):
            level = min(6, max(1, block.level - shift))
            out.append(f'<h{level} id="{unique_id(block.text, ids)}">{inline(block.text)}'
                       f"</h{level}>")
        elif isinstance(block, Table):
            out.append(table_html(block, anchors.get(id(block), "")))
        elif isinstance(block, Image):
            out.append(f'<figure><img src="{esc(block.src)}" alt="{esc(block.alt)}" '
                       f'loading="lazy"><figcaption>{esc(block.alt)}</figcaption></figure>')
        elif isinstance(block, Items):
            out.append("<ul>" + "".join(f"<li>{inline(i)}</li>" for i in block.items) + "</ul>")
        else:
            out.append(f"<p>{inline(block.text)}</p>")
    return "\n".join(out)


def unique_id(text: str, ids: set[str]) -> str:
    base = slug(re.sub(r"[`*]", "", text))
    name, n = base, 1
    while name in ids:
        n += 1
        name = f"{base}-{n}"
    ids.add(name)
    return name


def glossary_html(entries: Sequence[tuple[str, str, str]]) -> str:
    """(anchor, title, text) entries as the page's glossary."""
    if not entries:
        return ""
    items = "".join(f'<dt id="{esc(anchor)}">{inline(title)}</dt><dd>{inline(text)}</dd>'
                    for anchor, title, text in entries)
    return f'<h2 id="glossary">Glossary</h2><dl class="glossary">{items}</dl>'


def page_html(title: str, top: str, body: str) -> str:
    """A whole page: its style and script inline, nothing to fetch."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f'<meta name="referrer" content="no-referrer"><title>{esc(title)}</title>'
        f"<style>{STYLE}</style></head>\n<body>\n{top}\n<main>\n{body}\n</main>\n"
        f"<script>{SCRIPT}</script>\n</body></html>\n")

