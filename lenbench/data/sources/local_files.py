"""Local files and folders: the lenbench reader each file type gets, and the data files a
folder holds (read file by file when `datasets` cannot read the folder)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.csv_reader import read_csv_file
from lenbench.data.sources.datasets_reader import BUILDERS, JSON_SUFFIXES, read_with_datasets
from lenbench.data.sources.json_files import read_json_file
from lenbench.data.sources.parquet_reader import read_parquet_file
from lenbench.data.sources.records import Record, _unreadable

# what `save_to_disk` and hub repos keep beside the data: never read as rows
METADATA_FILES = ("dataset_info.json", "dataset_infos.json", "dataset_dict.json", "state.json")


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
