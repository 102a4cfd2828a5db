"""JSON Lines: one object per line, each bad line counted with its `file:line` and skipped."""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path

from lenbench.data.sources.records import Record, _shown


def _decode_error(exc: UnicodeDecodeError) -> str:
    return f"bytes that are not UTF-8 (byte {exc.start}: {exc.object[exc.start:exc.end]!r})"


def _not_json(exc: Exception, with_line: bool = False) -> str:
    """Why text did not parse: a syntax error where it lies, or nesting or a number that the
    json module refuses (RecursionError, ValueError), which no line should turn into a crash."""
    if isinstance(exc, json.JSONDecodeError):
        at = f": line {exc.lineno} column {exc.colno}" if with_line else f", column {exc.colno}"
        return f"not valid JSON ({exc.msg}{at})"
    why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(":")[0]
    return f"not valid JSON ({why})"


def read_json_lines(path: Path) -> Iterator[Record]:
    """One object per line; blank lines are not rows. Each bad line is reported, then skipped."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, 1):
            where = f"{path.name}:{lineno}"
            if lineno == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)  # editors on Windows add one
            if not raw.strip():
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield Record(where, error=("non_utf8", _decode_error(exc)), text=_shown(raw))
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:
                yield Record(where, error=("malformed", _not_json(exc)), text=_shown(raw))
            else:
                yield Record(where, row)
