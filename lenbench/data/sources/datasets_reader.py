"""Rows through `datasets.load_dataset`: hub ids, folders, and file types lenbench has no
reader for; plus the hub JSON files its fallback downloads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.records import Record, _value_error

JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
BUILDERS = {".json": "json", ".jsonl": "json", ".ndjson": "json", ".parquet": "parquet",
            ".csv": "csv", ".arrow": "arrow"}


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
