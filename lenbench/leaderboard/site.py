"""The leaderboard as a static web site, built from the same blocks as README.md.

``index.html`` puts every world side by side (worlds as columns, predictors as rows, each cell
the predictor's rank and static MAE there, with the markdown's markers), with filters by world
and by predictor kind; ``world-<stem>.html`` holds one world's tables, plots, card and links to
its result files. Pages are self-contained: style and script are inline, images are the PNGs
beside them, and links are relative, so the folder opens from file:// with no network. Each
page opens with links to its sections, and fits a phone as well as a wide screen: its tables,
not the page, scroll sideways (assets.STYLE).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lenbench.leaderboard.blocks import Block, Caption, Cell, Heading, Table, Text
from lenbench.leaderboard.cells import cell_text
from lenbench.leaderboard.glossary import CAPTION_TITLES
from lenbench.leaderboard.html import (
    blocks_html,
    esc,
    glossary_html,
    inline,
    page_html,
    scroll_box,
    sort_value,
    td,
    th,
    unique_id,
)
from lenbench.leaderboard.metric_specs import main_spec
from lenbench.leaderboard.provenance import card_entries
from lenbench.leaderboard.rows import MIN_RANKING_PROMPTS, Row, main_legend, metric_cell, row_marks
from lenbench.results import Result

PAGE_PREFIX = "world-"
KINDS = ("static", "dynamic", "distributional", "reference")
_RESERVED_IDS = ("card", "files", "glossary", "filters", "overview", "worlds", "ranking")


@dataclass
class World:
    """One section of the leaderboard: a (dataset, model[, labels fingerprint]) world."""

    title: str  # the section's heading (inline markdown)
    stem: str  # file stem its plots share
    blocks: list[Block]
    rows: list[Row]
    results: list[Result]  # its successful results
    too_few: int | None  # its test prompts, when too few to rank predictors on

    @property
    def page(self) -> str:
        return f"{PAGE_PREFIX}{self.stem}.html"


def row_kinds(row: Row) -> list[str]:
    """What a row predicts: static totals, dynamic remaining lengths, distributions."""
    if row.kind == "reference":
        return ["reference"]
    kinds = ["static"] if row.values("static.mae") else []
    if row.values("dynamic.mae"):
        kinds.append("dynamic")
    if row.variant is None and any(r.metrics.distribution for r in row.results):
        kinds.append("distributional")
    return kinds or ["static"]


def ranks(world: World) -> dict[int, int]:
    """Rank of each predictor row with a static MAE (1 = lowest), in the main table's order."""
    ranked = [row for row in world.rows if row.kind == "predictor" and row.sort_mae is not None]
    return {id(row): i + 1 for i, row in enumerate(ranked)}


def _write(path: Path, text: str) -> None:
    """Write through a temporary file, so a reader never sees half a page."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _top(worlds: list[World], current: str = "") -> str:
    links = "".join(f'<a href="{esc(w.page)}"{" aria-current=page" * (w.page == current)}>'
                    f"{inline(w.title)}</a>" for w in worlds)
    return (f'<header class="top"><a class="home" href="index.html">lenbench leaderboard</a>'
            f'<nav class="worlds" aria-label="Worlds">{links}</nav></header>')


def _overview(worlds: list[World]) -> str:
    """The index table: one row per predictor label, one column per world."""
    entries: dict[tuple[str, str], dict[int, Row]] = {}
    kinds: dict[tuple[str, str], set[str]] = {}
    for i, world in enumerate(worlds):
        for row in world.rows:
            key = (row.label, row.kind)
            entries.setdefault(key, {})[i] = row
            kinds.setdefault(key, set()).update(row_kinds(row))
    world_ranks = [ranks(w) for w in worlds]

    def order(key: tuple[str, str]) -> tuple[Any, ...]:
        shares = [(world_ranks[i][id(row)] - 1) / max(1, len(world_ranks[i]) - 1)
                  for i, row in entries[key].items() if id(row) in world_ranks[i]]
        return (key[1] == "reference", not shares,
                statistics.fmean(shares) if shares else 0.0, key[0])

    head = th("Predictor", "the predictor (and its reading)", "g-index", True)
    head += th("Kind", "static, dynamic, distributional, reference", "g-index", True)
    for i, world in enumerate(worlds):
        few = (f' <span class="few" title="{world.too_few} test prompts (&lt; '
               f'{MIN_RANKING_PROMPTS}): too few to rank">(few prompts)</span>'
               if world.too_few else "")
        page = (f' <a class="page" href="{esc(world.page)}" title="This world\'s page">'
                "page&#8599;</a>")
        head += th(f"{inline(world.title)}{few}", "rank and static MAE in this world",
                   "g-index", attrs=f' data-world="{i}"', after=page)
    body = []
    for key in sorted(entries, key=order):
        label, kind = key
        name = f"*{cell_text(label)}* (ref)" if kind == "reference" else cell_text(label)
        cells = [td(name, True), td(", ".join(k for k in KINDS if k in kinds[key]), True)]
        for i, world in enumerate(worlds):
            row = entries[key].get(i)
            if row is None:
                cells.append(td("", attrs=f' data-world="{i}"'))
                continue
            mae = metric_cell(row, main_spec("static.mae"))
            rank = world_ranks[i].get(id(row))
            shown = "" if rank is None else (f"({rank}) · " if world.too_few else
                                             f"**{rank}** · ")
            text = " ".join([shown + mae, *row_marks(row)])
            note = (f"{world.too_few} test prompts: too few to rank predictors"
                    if world.too_few else "")
            cells.append(td(Cell(text, sort_value(mae), note), attrs=f' data-world="{i}"',
                            klass="few" if world.too_few else ""))
        body.append(f'<tr data-kinds="{" ".join(sorted(kinds[key]))}">{"".join(cells)}</tr>')
    return scroll_box(f'<table class="sortable" id="overview"><thead><tr>{head}'
                      f'</tr></thead><tbody>{"".join(body)}</tbody></table>',
                      "Every world: rank and static MAE")


def _filters(worlds: list[World]) -> str:
    boxes = "".join(f'<label><input type="checkbox" checked data-world="{i}"> '
                    f"{inline(w.title)}</label>" for i, w in enumerate(worlds))
    kinds = "".join(f'<label><input type="checkbox" checked data-kind="{k}"> {k}</label>'
                    for k in KINDS)
    return (f'<div id="filters"><fieldset><legend>Worlds</legend>{boxes}</fieldset>'
            f"<fieldset><legend>Predictor kinds</legend>{kinds}</fieldset></div>")


INDEX_NOTE = (
    "Each cell: the predictor's rank in that world (1 = lowest static MAE among its predictors; "
    "references are not ranked) and its static MAE in tokens (mean ± std over seeds), as in "
    "the world's main table. Markers as in the markdown: † reads the next token, (non-causal) "
    "failed the audit of what was scored, ‡ scored under an earlier protocol. A rank in "
    f"parentheses: the world has too few test prompts (< {MIN_RANKING_PROMPTS}) to rank "
    "predictors. Sort by any column with its header; the filters hide worlds and kinds of "
    "predictor (a row with no figure in a shown world is hidden).")


RANKING = "Every world side by side"


def index_page(worlds: list[World], intro: list[Block], failures: list[Block]) -> str:
    listing = "".join(
        f'<li><a href="{esc(w.page)}">{inline(w.title)}</a>: {len(w.results)} result(s)'
        + (f', <span class="warn">{w.too_few} test prompts, too few to rank</span>'
           if w.too_few else "") + "</li>" for w in worlds)
    ids = set(_RESERVED_IDS)
    head = intro[:1] if intro and isinstance(intro[0], Heading) and intro[0].level == 1 else []
    title = blocks_html(head, {}, ids=ids)
    toc = [(a, t, []) for a, t, _ in _sections(intro[len(head):], set(ids), 2)]
    if worlds:
        toc += [("ranking", RANKING, []), ("worlds", "Worlds", [])]
    body = [title, _contents(toc + [("glossary", "Glossary", [])], "inline"),
            blocks_html(intro[len(head):], {}, ids=ids),
            f'<h2 id="ranking">{RANKING}</h2>' if worlds else "",
            _filters(worlds) if worlds else "", _overview(worlds) if worlds else "",
            f'<h2 id="worlds">Worlds</h2><ul>{listing}</ul>' if worlds else "",
            blocks_html(failures, {}, ids=set(_RESERVED_IDS)),
            glossary_html([("g-index", CAPTION_TITLES["index"], INDEX_NOTE),
                           ("g-main", CAPTION_TITLES["main"],
                            main_legend().replace("REF", "the reference"))])]
    return page_html("lenbench leaderboard", _top(worlds), "\n".join(b for b in body if b))


def _captions(blocks: list[Block]) -> tuple[list[tuple[str, str, str]], dict[int, str]]:
    """The glossary entries of a page (each caption text once) and each table's anchor: the
    first caption of its key that follows it."""
    entries: list[tuple[str, str, str]] = []
    by_text: dict[str, str] = {}
    used: set[str] = set()
    explained: dict[int, str] = {}
    for i, block in enumerate(blocks):
        if isinstance(block, Caption) and block.text not in by_text:
            by_text[block.text] = unique_id(f"g-{block.key}", used)
            entries.append((by_text[block.text], CAPTION_TITLES.get(block.key, block.key),
                            block.text))
        if isinstance(block, Table) and block.caption:
            caption = next((b for b in blocks[i + 1:]
                            if isinstance(b, Caption) and b.key == block.caption), None)
            if caption is not None:
                explained[id(block)] = caption.text
    return entries, {table: by_text[text] for table, text in explained.items()}


def _result_links(world: World, out: Path, results_dir: Path) -> str:
    items = []
    for r in sorted(world.results, key=lambda r: (r.predictor.name, r.seed, r.source)):
        target = os.path.relpath(results_dir.resolve() / r.source, out.resolve())
        href = quote(Path(target).as_posix())
        items.append(f'<li><a href="{esc(href)}">{esc(r.predictor.name)}, seed '
                     f'{esc(r.seed)}</a> <code>{esc(r.source)}</code></li>')
    return ('<h2 id="files">Result files</h2><p>The JSON each figure above comes from.</p>'
            f'<ul class="files">{"".join(items)}</ul>')


Section = tuple[str, str, list[tuple[str, str]]]  # anchor, title, its subsections


def _sections(blocks: list[Block], ids: set[str], level: int) -> list[Section]:
    """The headings of `level` among `blocks`, each with those one level below it, under the
    ids blocks_html gives them when it starts from `ids`."""
    found: list[Section] = []
    for b in blocks:
        if isinstance(b, Heading):
            anchor = unique_id(b.text, ids)
            if b.level == level:
                found.append((anchor, b.text, []))
            elif b.level == level + 1 and found:
                found[-1][2].append((anchor, b.text))
    return found


def _contents(entries: list[Section], klass: str = "") -> str:
    """The page's sections, and the subsections under each, as links at its top."""
    def item(anchor: str, text: str) -> str:
        return f'<a href="#{esc(anchor)}">{inline(text)}</a>'

    items = "".join(
        f"<li>{item(a, t)}"
        + (f'<ol>{"".join(f"<li>{item(*sub)}</li>" for sub in subs)}</ol>' if subs else "")
        + "</li>" for a, t, subs in entries)
    return (f'<nav class="{f"toc {klass}".strip()}" aria-label="Contents"><h2>Contents</h2>'
            f"<ol>{items}</ol></nav>")


def world_page(world: World, worlds: list[World], out: Path, results_dir: Path) -> str:
    """One world: its card, its section's blocks, its result files and its glossary."""
    first, rest = world.blocks[0], world.blocks[1:]
    title = first.text if isinstance(first, Heading) else world.title
    provenance = [b for b in rest if isinstance(b, Text) and b.role == "provenance"]
    shown = [b for b in rest if not (isinstance(b, Text) and b.role == "provenance")]
    first_table = next((i for i, b in enumerate(shown) if isinstance(b, Table)), None)
    if first_table is not None:  # the markdown's main table has no heading of its own
        shown.insert(first_table, Heading(3, "Main table"))
    entries, anchors = _captions(shown)
    toc = [("card", "World card", []), *_sections(shown, set(_RESERVED_IDS), 3),
           ("files", "Result files", []), ("glossary", "Glossary", [])]
    card = "".join(f"<dt>{esc(label)}</dt><dd>{inline(text)}</dd>"
                   for label, text in card_entries(world.results, world.rows))
    body = [f"<h1>{inline(title)}</h1>",
            _contents(toc),
            f'<section class="card" aria-labelledby="card"><h2 id="card">World card</h2>'
            f"<dl>{card}</dl>{blocks_html(provenance, {})}</section>",
            blocks_html(shown, anchors, shift=1, ids=set(_RESERVED_IDS)),
            _result_links(world, out, results_dir), glossary_html(entries)]
    return page_html(f"{world.title} · lenbench leaderboard".replace("`", ""),
                     _top(worlds, world.page), "\n".join(body))


def write_site(out: Path, results_dir: Path, intro: list[Block], worlds: list[World],
               failures: list[Block]) -> Path:
    """Write index.html and one page per world into `out`; remove pages of worlds that are
    gone. Returns the index's path."""
    written = set()
    for world in worlds:
        path = out / world.page
        _write(path, world_page(world, worlds, out, results_dir))
        written.add(path)
    for stale in out.glob(f"{PAGE_PREFIX}*.html"):
        if stale not in written:
            stale.unlink()
    index = out / "index.html"
    _write(index, index_page(worlds, intro, failures))
    return index

