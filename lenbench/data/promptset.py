"""PromptSet: deduplicated prompts with train/val/test splits decided by a hash of the prompt.

Splitting by a hash of the normalised prompt (not by position) keeps a prompt in the same split
whatever else is in the collection, and makes duplicates fall into one split by construction, so
no prompt leaks from train to test. Every row dropped is counted by reason in the card.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pandas as pd

from lenbench.configs.dataset import DatasetConfig
from lenbench.data.sources import BUILTIN_SOURCES
from lenbench.data.sources.rows import RawPrompt, Rejected

SPLITS = ("train", "val", "test")
N_EXAMPLES = 5  # examples per reason shown in the card; every dropped row is in DROPPED_FILE
DROPPED_FILE = "dropped_rows.jsonl"  # beside card.json: reason, position and excerpt of each drop
EXCERPT_CHARS = 160
log = logging.getLogger(__name__)


def shorten(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The start of `text` on one line, for the list of dropped rows."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."


def normalize(text: str) -> str:
    """The form used for duplicate detection and split hashing: case- and space-insensitive."""
    return re.sub(r"\s+", " ", text).strip().lower()


def prompt_id(text: str) -> str:
    return hashlib.sha256(normalize(text).encode()).hexdigest()[:16]


def assign_split(pid: str, fractions: dict[str, float], salt: str) -> str:
    """Map a prompt id to a split, uniformly and reproducibly."""
    h = int(hashlib.sha256(f"{salt}:{pid}".encode()).hexdigest()[:12], 16) / 16**12
    edge = 0.0
    for name in SPLITS:
        edge += fractions[name]
        if h < edge:
            return name
    return SPLITS[-1]


def build_promptset(
    raw: Iterable[RawPrompt | Rejected],
    fractions: dict[str, float],
    salt: str = "lenbench",
    min_words: int = 1,
    max_words: int | None = None,
    limit: int | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Filter, deduplicate and split prompts; return the table and a card of counts.

    `card["dropped_rows"]` lists every dropped row (reason, where, message); `save_promptset`
    writes it to its own file, since a large source can drop thousands.
    """
    total = sum(fractions.get(s, 0.0) for s in SPLITS)
    if abs(total - 1.0) > 1e-6 or any(fractions.get(s, 0) < 0 for s in SPLITS):
        raise ValueError(f"dataset.split: fractions {dict(fractions)} must be >= 0 and sum to 1 "
                         "(e.g. {train: 0.7, val: 0.1, test: 0.2})")
    dropped: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    rows = []
    n_in = 0
    bad: Counter[str] = Counter()  # broken input rows, for one warning at the end
    first_bad = ""
    dropped_rows: list[dict] = []

    def drop(reason: str, where: str, message: str, excerpt: str = "") -> None:
        dropped[reason] += 1
        dropped_rows.append({"reason": reason, "where": where, "message": message,
                             "excerpt": shorten(excerpt)})
        if where and len(examples.setdefault(reason, [])) < N_EXAMPLES:
            examples[reason].append(f"{where}: {message}")

    # stop as soon as the limit is met: a row pulled from the source and not counted would be lost
    items = raw if limit is None or limit > 0 else ()
    for item in items:
        n_in += 1
        if isinstance(item, Rejected):
            drop(item.reason, item.where, item.message, item.excerpt)
            if item.bad:
                bad[item.reason] += 1
                first_bad = first_bad or f"{item.where}: {item.message}"
            continue
        text = item.text if isinstance(item.text, str) else ""
        n_words = len(text.split())
        if n_words == 0:
            drop("empty", item.where, "empty or whitespace-only prompt", text)
            continue
        if n_words < min_words:
            drop("too_short", item.where, f"{n_words} words < dataset.min_words={min_words}", text)
            continue
        if max_words is not None and n_words > max_words:
            drop("too_long", item.where, f"{n_words} words > dataset.max_words={max_words}", text)
            continue
        pid = prompt_id(text)
        if pid in seen:
            drop("duplicate", item.where, f"duplicate of {seen[pid] or 'an earlier prompt'}", text)
            continue
        seen[pid] = item.where
        rows.append({"prompt_id": pid, "text": text, "split": assign_split(pid, fractions, salt),
                     "family": item.family, "meta": json.dumps(item.meta, sort_keys=True)})
        if limit is not None and len(rows) >= limit:
            break
    df = pd.DataFrame(rows, columns=["prompt_id", "text", "split", "family", "meta"])
    card = {"n_read": n_in, "n_kept": len(df), "dropped": dict(sorted(dropped.items())),
            "splits": {s: int((df["split"] == s).sum()) for s in SPLITS}}
    if examples:
        card["examples"] = dict(sorted(examples.items()))
    card["dropped_rows"] = dropped_rows
    info = getattr(raw, "info", None)  # file sources describe what they read (path, reader)
    if info:
        card["source"] = dict(info)
    if bad:
        log.warning("promptset: skipped bad rows %s (every one listed in %s beside the dataset "
                    "card); first: %s",
                    dict(bad), DROPPED_FILE, first_bad)
    return df, card


def toyworld_source(n_prompts: int, seed: int) -> Iterable[RawPrompt]:
    """Fresh prompts from the toy world's families (responses are regenerated by the model)."""
    from lenbench.data.toyworld import make_corpus

    batch, offset = max(64, n_prompts), 0
    while True:  # keep drawing until the caller has enough distinct prompts
        for ex in make_corpus(batch, seed + 1000003 * offset):
            yield RawPrompt(ex.prompt, ex.family, ex.meta)
        offset += 1
        if offset > 50:
            raise RuntimeError("toyworld: could not draw enough distinct prompts; lower "
                               "dataset.n_prompts")


# every source by name; add your own with SOURCES["name"] = fn (fn yields RawPrompt | Rejected)
SOURCES: dict[str, Callable[..., Iterable[RawPrompt | Rejected]]] = {
    "toyworld": toyworld_source, **BUILTIN_SOURCES}


def load_source(name: str, **kwargs) -> Iterable[RawPrompt | Rejected]:
    if name not in SOURCES:
        raise KeyError(f"dataset.source={name!r} is unknown; available: {sorted(SOURCES)}")
    return SOURCES[name](**kwargs)


def _settings(ds: DatasetConfig, params: Iterable[str]) -> dict[str, Any]:
    """The dataset fields a source's signature names (its schema may lack some of them)."""
    names = {f.name for f in fields(ds)}
    return {k: getattr(ds, k) for k in params if k in names and k != "source_args"}


def source_from_config(ds: DatasetConfig) -> Iterable[RawPrompt | Rejected]:
    """Open the source a dataset config names, passing it the fields its signature declares.

    Each source takes only the fields in its signature (path, turns, language, ...); the rest
    (split, min_words, limit, ...) belong to `build_promptset`. `source_args:` (a mapping) is
    passed as is, for user-registered sources with arguments of their own.
    """
    name = ds.source
    if name not in SOURCES:
        raise KeyError(f"dataset.source={name!r} is unknown; available: {sorted(SOURCES)}")
    kwargs = _settings(ds, inspect.signature(SOURCES[name]).parameters)
    kwargs.update(ds.source_args or {})
    return SOURCES[name](**kwargs)


def source_fingerprint(ds: DatasetConfig) -> str | None:
    """Identity of a local `dataset.path` or of the file a `dataset.package` ships, for the
    promptset cache key.

    The config alone does not change when the file behind `path` does (names, sizes and mtimes
    are hashed), nor when a reinstall changes the file a package ships (its version, names and
    sizes: not mtimes, which every install of the same wheel sets anew, so that two machines, or
    a new virtual environment, reach the same key and reuse what is cached under it). None for
    hub or generated sources, whose identity is their config.
    """
    # file sources have a path, the wheel's schema a package; the others neither
    path, package = getattr(ds, "path", None), getattr(ds, "package", None)
    h, packaged = hashlib.sha256(), False
    if not path and package:
        from lenbench.data.sources.reading import SourceError, package_file

        try:
            path, pkg = package_file(package)
        except SourceError:
            return None  # the source itself reports the missing package
        h.update(f"{pkg['distribution']}=={pkg['version']}\n".encode())
        packaged = True
    if not path:
        return None
    root = Path(str(path)).expanduser()
    if not root.exists():
        return None  # the source itself reports the missing path
    files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
    for f in files:
        st = f.stat()
        name = f.relative_to(root) if root.is_dir() else f.name
        h.update(f"{name}:{st.st_size}".encode()
                 + (b"\n" if packaged else f":{st.st_mtime_ns}\n".encode()))
    return h.hexdigest()[:16]


def save_promptset(folder: Path, df: pd.DataFrame, card: dict) -> None:
    """The prompts, the card, and the full list of dropped rows beside it (named in the card)."""
    df.to_parquet(folder / "prompts.parquet", index=False)
    card = dict(card)
    rows = card.pop("dropped_rows", [])
    with (folder / DROPPED_FILE).open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    card["dropped_rows_file"] = DROPPED_FILE
    (folder / "card.json").write_text(json.dumps(card, indent=2))


def load_promptset(folder: Path) -> tuple[pd.DataFrame, dict]:
    card = json.loads((folder / "card.json").read_text())
    return pd.read_parquet(folder / "prompts.parquet"), card


# Source arguments that change how a source is read, not which prompts it yields.
READING_ONLY_ARGS = frozenset({"streaming", "hf_cache_dir", "strict"})
# Bump when building a PromptSet from the same inputs gives other rows.
PROMPTSET_VERSION = 1


def promptset_key(ds: DatasetConfig) -> dict:
    """The PromptSet cache key: an explicit view of what changes the prompts and their split.

    The source's name and the arguments its signature reads (less those that only change how it
    is read), `source_args`, the word filter, the limit, the split and the files behind a path
    or package, plus a version. A key the source does not read (the file sources' `seed`) or a
    field added to a schema later never shifts it.
    """
    name = ds.source
    params = inspect.signature(SOURCES[name]).parameters if name in SOURCES else {}
    args = _settings(ds, sorted(params))
    key = {"version": PROMPTSET_VERSION, "source": name,
           "args": {k: v for k, v in args.items() if k not in READING_ONLY_ARGS},
           "split": dict(ds.split), "split_salt": str(ds.split_salt),
           "min_words": ds.min_words, "max_words": ds.max_words,
           "limit": ds.limit or getattr(ds, "n_prompts", None)}  # toyworld draws n_prompts
    if ds.source_args:
        key["source_args"] = dict(ds.source_args)
    if (fingerprint := source_fingerprint(ds)) is not None:
        key["files"] = fingerprint  # an edited local file rebuilds the PromptSet
    return key
