"""Parquet files read by lenbench, so a bad row or row group is counted as `file[row]`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.data.sources.records import Record, _unreadable, _value_error


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
