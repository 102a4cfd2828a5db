"""A `.json` file may be a list, an object of records, one object or JSON Lines: tell which,
and hand it to the reader for that layout."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.json_array import MEMBER, read_json_array
from lenbench.data.sources.json_lines import read_json_lines
from lenbench.data.sources.records import Record

LEADING = re.compile(r"[\ufeff \t\r\n]*")


def _blank_from(text: str, i: int) -> bool:
    return LEADING.match(text, i).end() == len(text)


def _by_name(doc: Any) -> bool:
    """An object whose values are mostly objects: records by name, not one record."""
    values = list(doc.values()) if isinstance(doc, dict) else []
    return sum(isinstance(v, dict) for v in values) * 2 > len(values)


def _json_layout(text: str) -> tuple[str, int, Any]:
    """How a .json file is laid out: 'list', 'records' (an object whose values are objects),
    'one' (a single object written over several lines) or 'lines' (JSON Lines); with where its
    first value starts and, for 'one', the object."""
    start = LEADING.match(text).end()
    if text.startswith("[", start):
        return "list", start, None
    if not text.startswith("{", start):
        return "lines", start, None
    eol = text.find("\n", start)
    first = text[start:eol if eol >= 0 else len(text)]
    try:
        row = json.loads(first)
    except (ValueError, RecursionError):
        pass
    else:  # JSON Lines, unless that line is the whole file and holds records by name
        whole = eol < 0 or _blank_from(text, eol)
        return ("records" if whole and _by_name(row) else "lines"), start, None
    decoder = json.JSONDecoder()
    try:
        doc, end = decoder.raw_decode(text, start)
    except (ValueError, RecursionError):
        doc, end = None, 0
    if doc is not None and _blank_from(text, end):
        return ("records", start, None) if _by_name(doc) else ("one", start, doc)
    # broken: an object of records if its first value is an object over several lines
    m = MEMBER.match(text, LEADING.match(text, start + 1).end())
    try:
        value, end = decoder.raw_decode(text, m.end()) if m else (None, 0)
    except (ValueError, RecursionError):  # the first record is broken: '{' alone says records
        return ("records" if first.strip() == "{" else "lines"), start, None
    several = isinstance(value, dict) and "\n" in text[start:end]
    return ("records" if several else "lines"), start, None


def read_json_file(path: Path) -> Iterator[Record]:
    """A `.json` list of objects, an object of records or one object, or JSON Lines (any suffix
    whose text is not one of those)."""
    if path.suffix in (".jsonl", ".ndjson"):
        yield from read_json_lines(path)
        return
    # a BOM stays in the text (the list reader starts at '['), so byte offsets count it
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    layout, start, doc = _json_layout(text)
    if layout in ("list", "records"):
        yield from read_json_array(path, text)
    elif layout == "one":
        yield Record(f"{path.name}:{text.count(chr(10), 0, start) + 1}", doc)
    else:
        yield from read_json_lines(path)
