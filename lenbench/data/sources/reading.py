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

This module chooses how a source is read (`open_records`); each reader has its own module
(`json_files`, `json_lines`, `json_array`, `csv_reader`, `parquet_reader`, `datasets_reader`,
`local_files`, `packages`), and the shared types and `convert` live in `records`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.datasets_reader import BUILDERS, _hub_json_files, read_with_datasets
from lenbench.data.sources.json_array import TextOffsets
from lenbench.data.sources.local_files import READER_NAMES, _local_files, read_local_file
from lenbench.data.sources.packages import package_file
from lenbench.data.sources.records import (
    MISSING,
    BadRow,
    Record,
    SourceError,
    SourceStream,
    convert,
)

__all__ = ["MISSING", "READERS", "BadRow", "Record", "SourceError", "SourceStream", "TextOffsets",
           "convert", "open_records", "package_file", "tracked"]

log = logging.getLogger(__name__)

READERS = ("auto", "datasets", "lines")
MAX_SPANS = 20  # unreadable stretches listed in the card; all of them are counted as 'malformed'


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
                                  f"after {'some' if produced else 'no'} rows{hint}: {msg}"
                                  ) from exc
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
