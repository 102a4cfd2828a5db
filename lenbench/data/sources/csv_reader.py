"""CSV files read by lenbench, so every bad row is counted with its `file:line`."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.records import BadRow, Record, _shown, check_text

CSV_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _csv_value(cell: str) -> Any:
    """The number or true/false a cell is written as, else None."""
    cell = cell.strip()
    if cell.lower() in ("true", "false"):
        return cell.lower() == "true"
    if CSV_NUMBER.fullmatch(cell):
        try:
            return float(cell) if any(c in cell for c in ".eE") else int(cell)
        except ValueError:  # more digits than int() converts
            return None
    return None


def read_csv_file(path: Path) -> Iterator[Record]:
    """The rows of a CSV file under its header line, each located by the line it starts on.

    A record that is not valid CSV (a stray quote) or has more cells than the header is counted,
    and reading resumes on the next line. As in `datasets` (pandas), an empty cell is null and a
    column whose cells are mostly numbers (or true/false) holds numbers; a cell there that is
    not a number stays text, so only its own row is rejected.
    """
    text = path.read_bytes().decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
    csv.field_size_limit(max(csv.field_size_limit(), len(text)))  # a long prompt is no error
    lines = list(io.StringIO(text, newline=""))
    records: list[tuple[int, list[str] | None, str]] = []  # (line, cells or None, why not)
    k = 0
    while k < len(lines):
        reader = csv.reader((lines[j] for j in range(k, len(lines))), strict=True)
        while True:
            line = k + reader.line_num + 1
            try:
                cells = next(reader)
            except StopIteration:
                k = len(lines)
                break
            except csv.Error as exc:
                records.append((line, None, f"not valid CSV ({exc})"))
                k = line  # resume on the line after the record's first
                break
            if len(cells) > 1 or any(c.strip() for c in cells):  # blank lines are not rows
                records.append((line, cells, ""))
    if not records:
        return
    (line, header, why), body = records[0], records[1:]
    reason = "malformed"
    if header is not None:
        try:
            check_text(header)
        except BadRow as exc:  # another encoding (UTF-16, Latin-1): no field can be named
            reason, why = exc.reason, exc.message
    if reason != "malformed" or header is None:
        why = f"the header line: {why}; no row can be read"
        yield Record(f"{path.name}:{line}", error=(reason, why), text=_shown(lines[line - 1]),
                     span={"byte": 0, "bytes": path.stat().st_size, "truncated": False})
        return
    cells_of = [[cells[c] for _, cells, _ in body if cells and c < len(cells) and cells[c]]
                for c in range(len(header))]
    numeric = [sum(_csv_value(v) is not None for v in col) * 2 > len(col) for col in cells_of]
    for line, cells, why in body:
        where = f"{path.name}:{line}"
        if cells is None or len(cells) > len(header):
            why = why or f"{len(cells)} cells where the header has {len(header)}"
            yield Record(where, error=("malformed", why), text=_shown(lines[line - 1]))
        else:  # a short row lacks its last fields: they are missing, not null
            row = {}
            for key, cell, num in zip(header, cells, numeric):
                value = _csv_value(cell) if num and cell else None
                row[key] = None if cell == "" else cell if value is None else value
            yield Record(where, row)
