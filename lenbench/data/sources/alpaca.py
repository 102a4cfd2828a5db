"""Alpaca (tatsu-lab/alpaca): rows of {instruction, input, output}.

The prompt is the instruction, followed by a blank line and the input when there is one; the
data set's own `output` is ignored (lengths come from the target model).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lenbench.data.sources.reading import BadRow, SourceStream, convert, open_records
from lenbench.data.sources.rows import RawPrompt, Rejected

HUB_ID = "tatsu-lab/alpaca"


def alpaca_prompt(row: dict) -> str:
    """instruction, or instruction + "\\n\\n" + input when the input is not blank."""
    if "instruction" not in row:
        raise BadRow("missing_field", "missing field 'instruction'")
    if row["instruction"] is None:
        raise BadRow("null_field", "field 'instruction' is null")
    instruction, extra = row["instruction"], row.get("input")
    if not isinstance(instruction, str):
        raise BadRow("non_text", f"'instruction' is not text ({type(instruction).__name__})")
    if extra is not None and not isinstance(extra, str):
        raise BadRow("non_text", f"'input' is not text ({type(extra).__name__})")
    return f"{instruction}\n\n{extra}" if extra and extra.strip() else instruction


def alpaca_source(path: str | None = None, hub_id: str | None = HUB_ID,
                  data_files: Any = None, hf_split: str = "train",
                  config_name: str | None = None, revision: str | None = None,
                  reader: str = "auto", streaming: bool = False,
                  hf_cache_dir: str | None = None, strict: bool = False) -> SourceStream:
    """Prompts of Alpaca rows, from the hub or a local file or folder."""
    info: dict = {"format": "alpaca"}
    records = open_records("alpaca", path=path, hub_id=hub_id, data_files=data_files,
                           hf_split=hf_split, config_name=config_name, revision=revision,
                           reader=reader, streaming=streaming, hf_cache_dir=hf_cache_dir,
                           info=info)

    def to_prompts(row: dict) -> Iterable[RawPrompt | Rejected]:
        return [RawPrompt(alpaca_prompt(row))]

    return SourceStream(convert(records, to_prompts, strict), info)
