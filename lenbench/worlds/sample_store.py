"""Samples kept across runs, so that a world grows instead of being rebuilt.

A sample's tokens depend only on the model, the sampling settings, the seed, the prompt and the
sample index (each request draws from its own seeded stream). Prompt-set size, `n_samples` and
shard layout do not change them. So every sample generated under one set of those settings is
kept in one store, keyed by (prompt_id, sample_idx) and checked against a hash of the rendered
prompt: a later run that raises `dataset.limit` or `generation.n_samples` takes what the store
holds and generates only the rest.

A shipped world (lenbench/worlds/) seeds the same lookup with the samples it ships.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

log = logging.getLogger(__name__)

STORE_COLUMNS = ["prompt_id", "sample_idx", "prompt_sha", "output_token_ids", "finish_reason"]


def prompt_tokens_sha(prompt_ids: Sequence[int]) -> str:
    """A short hash of a rendered prompt: the same text under another chat template or tokenizer
    gives another prompt, whose samples must not be reused."""
    return hashlib.sha256(np.asarray(prompt_ids, dtype=np.int64).tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class KnownSample:
    """A sample generated earlier: its rendered prompt's hash, its tokens and how it ended."""

    prompt_sha: str
    output_ids: tuple[int, ...]
    finish_reason: str


KnownSamples = Mapping[tuple[str, int], KnownSample]


def known_from_frame(df: pd.DataFrame) -> dict[tuple[str, int], KnownSample]:
    """The lookup of a table with `STORE_COLUMNS` (later rows win on a repeated key)."""
    return {(str(pid), int(s)): KnownSample(str(sha), tuple(int(t) for t in ids), str(fin))
            for pid, s, sha, ids, fin in zip(df["prompt_id"], df["sample_idx"], df["prompt_sha"],
                                             df["output_token_ids"], df["finish_reason"])}


class SampleStore:
    """A folder of parquet parts, one per finished shard; parts are written atomically and never
    rewritten, so concurrent workers can add to the same store."""

    def __init__(self, folder: str | os.PathLike[str]):
        self.folder = Path(folder)

    def parts(self) -> list[Path]:
        return sorted(self.folder.glob("part-*.parquet")) if self.folder.exists() else []

    def load(self) -> dict[tuple[str, int], KnownSample]:
        parts = self.parts()
        if not parts:
            return {}
        known = known_from_frame(pd.concat([pd.read_parquet(p) for p in parts],
                                           ignore_index=True))
        log.info("sample store %s: %d samples from earlier runs", self.folder, len(known))
        return known

    def add(self, rows: Iterable[dict]) -> Path | None:
        """Keep rows with `STORE_COLUMNS`; the part's name hashes its keys, so writing the same
        samples twice (a resumed shard) leaves one part."""
        df = pd.DataFrame(list(rows), columns=STORE_COLUMNS)
        if df.empty:
            return None
        name = hashlib.sha256("\n".join(f"{p}:{s}" for p, s in zip(df["prompt_id"],
                                                                     df["sample_idx"])).encode())
        path = self.folder / f"part-{name.hexdigest()[:16]}.parquet"
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        df.to_parquet(tmp, index=False)
        os.replace(tmp, path)
        return path
