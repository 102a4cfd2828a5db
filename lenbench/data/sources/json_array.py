"""A top-level JSON list (or object of records) read element by element, so a broken element
is counted at its line and byte offset and reading resumes at the next one."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.json_lines import _not_json
from lenbench.data.sources.records import Record, _shown


class TextOffsets:
    """Line numbers and UTF-8 byte offsets of positions in decoded text, asked in increasing order.

    Each call encodes only the text since the previous call, so one pass over a file stays linear.
    Bytes that were not UTF-8 were decoded as surrogates and encode back to one byte each.
    """

    def __init__(self, text: str):
        self.text, self.pos, self.line, self.byte = text, 0, 1, 0

    def at(self, i: int) -> tuple[int, int]:
        if i < self.pos:
            raise ValueError(f"position {i} is before {self.pos}: ask in increasing order")
        chunk = self.text[self.pos:i]
        self.line += chunk.count("\n")
        self.byte += len(chunk.encode("utf-8", "surrogateescape"))
        self.pos = i
        return self.line, self.byte


MEMBER = re.compile(r'"(?:[^"\\]|\\.)*"\s*:\s*')  # a record's name in an object of records
BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped whole) or a bracket
VALUE_START = r'[\[{"\-0-9tfn]'  # the characters a JSON value can start with


def read_json_array(path: Path, text: str) -> Iterator[Record]:
    """The elements of a top-level JSON list, each with the line it starts on (or the values of
    an object of records, {"name": {...}, ...}, read the same way).

    Bytes that are not UTF-8 were decoded as surrogates, so the element holding them is still
    found and rejected by `check_text`. Text that is not valid JSON becomes one 'malformed' record
    with its line and byte offset; reading resumes at the next element (see `next_element`), so
    one broken element does not cost the rest of the file. A file cut off inside an element (an
    interrupted download or upload) keeps every complete element before the cut.
    """
    decoder = json.JSONDecoder()
    offsets = TextOffsets(text)
    n_read = 0
    keys: set[str] = set()  # of the records read so far: tells a record from a nested object
    opener = next(c for c in text if c in "[{")
    closer, what = ("]", "list") if opener == "[" else ("}", "object")

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def decode(i: int) -> tuple[Any, int]:
        """The element at i and where it ends (in an object, the value after its name)."""
        if opener == "{":
            m = MEMBER.match(text, i)
            if m is None:
                raise json.JSONDecodeError("Expecting a quoted record name and ':'", text, i)
            i = m.end()
        return decoder.raw_decode(text, i)

    top = text.index(opener)
    pos = skip_ws(top + 1)
    if pos < len(text) and text[pos] == closer:
        return
    # Dumped lists start each element on a line of its own at one indentation, which no nested
    # value shares: a line starting a value there is where reading resumes after a broken
    # element (not a closing bracket, nor the rest of a string broken by a raw line break).
    # With no indentation that holds only when the first element fits its line (one element a
    # line); else (indent=0) only lines that start like the first element are taken.
    indent = text[text.rfind("\n", 0, pos) + 1:pos]
    mark = None
    if pos < len(text) and not indent.strip(" \t"):
        one_a_line = bool(indent)
        if not indent:
            with contextlib.suppress(ValueError, RecursionError):
                one_a_line = "\n" not in text[pos:decode(pos)[1]]
        starts = VALUE_START if one_a_line else re.escape(text[pos])
        mark = re.compile(re.escape("\n" + indent) + f"(?={starts})")
    # A list written on one line has no such mark: there reading resumes after the next ','
    # at an element that decodes, is followed by ',' or the end of the list, and is not nested
    # in the broken one (a turn of a conversation): an object sharing a key with the records
    # read so far, or a value the brackets before it (strings skipped) leave inside the list.
    comma = re.compile(r",\s*(?=" + (VALUE_START if opener == "[" else '"') + ")")
    scan = {"pos": top, "depth": 0}  # brackets open at scan["pos"], counted left to right

    def in_list(at: int) -> bool:
        for m in BRACKET.finditer(text, scan["pos"]):
            if m.end() > at:
                return m.start() >= at and scan["depth"] == 1  # else `at` is inside a string
            b = m.group()
            scan["pos"] = m.end()
            scan["depth"] += (b in ("[", "{")) - (b in ("]", "}"))
        return scan["depth"] == 1

    def next_element(i: int, here: bool = False) -> int | None:
        """The start of the first element at or after position i (`here`: i may be one)."""
        if mark:
            m = mark.search(text, max(0, i - len(indent) - 1))
            return m.end() if m else None
        at: int | None = i if here else None
        while True:
            if at is None:
                m = comma.search(text, i)
                if m is None:
                    return None
                at = m.end()
            try:
                obj, end = decode(at)
            except (ValueError, RecursionError):
                i, at = at, None
                continue
            after = skip_ws(end)
            ends = text[after:after + 1] in (",", "") or (
                text[after] == closer and skip_ws(after + 1) == len(text))
            record = isinstance(obj, dict) and bool(keys & obj.keys())
            if ends and (record or in_list(at)):
                return at
            i, at = at, None  # a string may have swallowed the next element's start: look inside

    def skipped(start: int, end: int | None, why: str) -> Record:
        """A 'malformed' record for text[start:end] (end None: the rest of the file)."""
        line, byte = offsets.at(start)
        size = offsets.at(len(text) if end is None else end)[1] - byte
        truncated = end is None and not text.rstrip().endswith(closer)
        if end is not None:
            msg = (f"{why}; {size:,} bytes from byte {byte:,} could not be read and are "
                   f"skipped, reading resumes at line {offsets.line:,}")
        elif not truncated:
            msg = (f"{why}; the rest of the file from byte {byte:,} ({size:,} bytes) "
                   "could not be read")
        elif start >= len(text):
            msg = (f"{why}; the file ends at byte {byte:,} before the {what} is closed: "
                   f"{n_read:,} complete records read")
        else:
            msg = (f"{why}; the file ends inside the record at byte {byte:,}: {n_read:,} complete "
                   f"records read, the truncated tail ({size:,} bytes) could not be read and is "
                   "skipped")
        return Record(f"{path.name}:{line}", error=("malformed", msg),
                      span={"byte": byte, "bytes": size, "truncated": truncated},
                      text=_shown(text[start:start + 400]))

    while True:
        try:
            obj, end = decode(pos)
        except (ValueError, RecursionError) as exc:
            resume = next_element(pos + 1)
            yield skipped(pos, resume, _not_json(exc, with_line=True))
            if resume is None:
                return
            pos = resume
            continue
        n_read += 1
        if isinstance(obj, dict):
            keys.update(obj)
        if end > scan["pos"]:  # a broken element's stray quote miscounts no further than this
            scan.update(pos=end, depth=1)
        yield Record(f"{path.name}:{offsets.at(pos)[0]}", obj)
        pos = skip_ws(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip_ws(pos + 1)
            if not text.startswith(closer, pos):  # a ',' before the end loses nothing
                continue
        if pos < len(text) and text[pos] == closer:
            rest = skip_ws(pos + 1)
            if rest < len(text):  # e.g. files joined end to end: say what is not read
                line, byte = offsets.at(rest)
                size = offsets.at(len(text))[1] - byte
                why = (f"text after the {what} is closed; the rest of the file from byte "
                       f"{byte:,} ({size:,} bytes) is not read")
                yield Record(f"{path.name}:{line}", error=("malformed", why),
                             span={"byte": byte, "bytes": size, "truncated": False},
                             text=_shown(text[rest:rest + 400]))
            return
        resume = next_element(pos, here=True)
        if resume != pos:  # == pos: only a ',' is missing, and nothing is lost
            yield skipped(pos, resume, f"expected ',' or '{closer}' between {what} elements")
            if resume is None:
                return
            pos = resume
