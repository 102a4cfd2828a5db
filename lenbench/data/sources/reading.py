"""Reading rows from a hub data set, a local folder or a local file, and reporting the bad ones.

Hub ids and folders go through `datasets.load_dataset`, the code path users run on machines with
hub access. A single local JSON or JSON Lines file is read by our own reader instead, because
`load_dataset` stops at the first malformed line without naming it, and users who bring their own
file need every bad row counted with its file and line. When `load_dataset` fails on JSON data in
a folder or hub repo, the same reader takes over and the card says so.

Every row comes out as a `Record`; a source turns records into `RawPrompt`s, or into `Rejected`s
that the PromptSet card counts by reason. Nothing is skipped without a count.
"""

from __future__ import annotations

import codecs
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lenbench.data.promptset import RawPrompt, Rejected

log = logging.getLogger("lenbench")

JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
BUILDERS = {".json": "json", ".jsonl": "json", ".ndjson": "json", ".parquet": "parquet",
            ".csv": "csv", ".arrow": "arrow"}
READERS = ("auto", "datasets", "lines")
# Reasons that mean broken input (rejected under strict); other drops are deliberate filters.
BAD_REASONS = ("malformed", "non_utf8", "missing_field", "wrong_type", "non_text")


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


def read_json_array(path: Path, text: str) -> Iterator[Record]:
    """The elements of a top-level JSON list, each with the line it starts on.

    Bytes that are not UTF-8 were decoded as surrogates, so the element holding them is still
    found and rejected by `check_text`; a syntax error ends the file (the reader cannot resync
    inside one JSON document), and is reported with how much was left unread.
    """
    decoder = json.JSONDecoder()
    pos, line, counted = text.index("[") + 1, 1, 0

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def line_at(i: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, i)
        counted = i
        return line

    line_at(pos)
    pos = skip_ws(pos)
    if pos < len(text) and text[pos] == "]":
        return
    while True:
        where = f"{path.name}:{line_at(pos)}"
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            why = (f"not valid JSON ({exc.msg}); the rest of the file from line {exc.lineno} "
                   "could not be read")
            yield Record(where, error=("malformed", why))
            return
        yield Record(where, obj)
        pos = skip_ws(pos)
        if pos < len(text) and text[pos] == ",":
            pos = skip_ws(pos + 1)
            continue
        if pos < len(text) and text[pos] == "]":
            return
        why = "expected ',' or ']' between list elements; the rest of the file could not be read"
        yield Record(f"{path.name}:{line_at(pos)}", error=("malformed", why))
        return


def read_json_file(path: Path) -> Iterator[Record]:
    """A `.json` list of objects, or JSON Lines (any suffix whose text does not start with '[')."""
    if path.suffix in (".jsonl", ".ndjson"):
        yield from read_json_lines(path)
        return
    data = path.read_bytes()
    text = data.decode("utf-8", errors="surrogateescape").removeprefix("\ufeff")
    if text.lstrip()[:1] == "[":
        yield from read_json_array(path, text)
    else:
        yield from read_json_lines(path)


def check_text(value: Any) -> None:
    """Reject text holding bytes that were not UTF-8 (they cannot be stored or tokenized)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end].encode("utf-8", "surrogateescape")
        raise BadRow("non_utf8", f"bytes that are not UTF-8 ({bad!r})") from None


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
                return lambda: read_json_file(p)
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

    return records


def convert(records: Callable[[], Iterator[Record]],
            to_prompts: Callable[[dict], Iterable[RawPrompt | Rejected]],
            strict: bool) -> Callable[[], Iterator[RawPrompt | Rejected]]:
    """Turn records into prompts; bad rows become counted `Rejected`s, or errors under strict."""

    def reject(where: str, reason: str, message: str) -> Rejected:
        if strict:
            raise SourceError(f"{where}: {message} (dataset.strict=true rejects bad rows; fix "
                              "the row, or set dataset.strict=false to count and skip them)")
        return Rejected(reason, where, message)

    def items() -> Iterator[RawPrompt | Rejected]:
        for rec in records():
            if rec.error is not None:
                yield reject(rec.where, *rec.error)
                continue
            if not isinstance(rec.row, dict):
                yield reject(rec.where, "wrong_type",
                             f"expected a JSON object, got {type(rec.row).__name__}")
                continue
            try:
                out = list(to_prompts(rec.row))
                for item in out:
                    if isinstance(item, RawPrompt):
                        check_text([item.text, item.meta])
            except BadRow as exc:
                yield reject(rec.where, exc.reason, exc.message)
                continue
            except Exception as exc:  # a row shape no check foresaw: name it rather than crash
                raise SourceError(f"{rec.where}: could not read this row ({type(exc).__name__}: "
                                  f"{exc}); please report it with the row") from exc
            for item in out:
                item.where = rec.where + item.where  # converters may add a suffix: " (turn 3)"
                yield item

    return items
