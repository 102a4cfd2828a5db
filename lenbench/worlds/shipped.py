"""A shipped world: generated labels that travel with lenbench, with their card and checksum.

A world folder (`lenbench/worlds/<name>/`) holds
- `samples.parquet`: one row per sample — `prompt_id` (our hash of the normalised prompt),
  `record` (where the prompt is in its source: the conversation id), `text_sha256` (the exact
  prompt text's hash), `prompt_sha` (the rendered prompt tokens' hash), `sample_idx`, `split`,
  `output_token_ids`, `L`, `finish_reason`;
- `card.json`: what made it (model and its sha256, package versions, sampling, dtype, CPU, the
  lenbench commit), the settings that decide its samples (`sample_key`), the labels fingerprint,
  the sha256 of `samples.parquet`, and the license note.

No prompt text is shipped. The prompts come from the source the card names (a wheel), and every
shipped row is matched to its prompt by id and checked by the text's hash, so a different file
behind the same name cannot pass silently.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from lenbench.worlds.sample_store import KnownSample

log = logging.getLogger(__name__)

WORLDS_DIR = Path(__file__).parent
SAMPLES_FILE = "samples.parquet"
CARD_FILE = "card.json"
# keys of the generate stage's config that change which samples exist, not what a sample is;
# `shipped` (the digest of the world a run reads) too, so that the samples a run adds to a world
# land in the one sample store that `grow` reads, however far the world had grown
NOT_SAMPLE_KEYS = ("n_samples", "shard_prompts", "keep_censored", "max_prompt_tokens",
                   "max_length_exclusive", "dense_prompts", "dense_n_samples", "dense_split",
                   "dense_drawn", "shipped")


class ShippedWorldError(ValueError):
    """A shipped world is missing, damaged, or does not fit the prompts it is used with."""


def sample_key(stage_config: Mapping) -> dict:
    """The part of a generate stage's config that decides each sample's tokens."""
    return {k: v for k, v in stage_config.items() if k not in NOT_SAMPLE_KEYS}


def sample_files(card: Mapping) -> list[str]:
    """The card's sample files, in order: `samples.parquet`, or the chunks of a grown world."""
    return sorted(f for f in card.get("files", {})
                  if f.startswith("samples") and f.endswith(".parquet"))


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def available() -> list[str]:
    return sorted(p.parent.name for p in WORLDS_DIR.glob(f"*/{CARD_FILE}"))


def world_folder(name: str) -> Path:
    """A world shipped in the package by name (`name@2`: its version 2, shipped as `name_v2`),
    or a folder given as a path."""
    if "@" in name and not Path(name).expanduser().exists():
        base, version = name.rsplit("@", 1)
        name = base if version in ("1", "v1") else f"{base}_v{version.lstrip('v')}"
    folder = Path(name).expanduser()
    if not (folder / CARD_FILE).exists():
        folder = WORLDS_DIR / name
    if not (folder / CARD_FILE).exists():
        raise ShippedWorldError(f"generation.shipped={name!r}: no such world; shipped worlds: "
                                f"{available()} (or give a folder holding {CARD_FILE})")
    return folder


@dataclass
class ShippedWorld:
    name: str
    folder: Path
    card: dict
    samples: pd.DataFrame

    @classmethod
    def load(cls, name: str) -> ShippedWorld:
        """Read a world and check each of its sample files against the card's sha256 (a world
        that grows ships its samples in several files, `samples-000.parquet`, ...)."""
        folder = world_folder(name)
        card = json.loads((folder / CARD_FILE).read_text())
        parts = []
        for file in sample_files(card):
            path = folder / file
            if not path.exists():
                raise ShippedWorldError(f"shipped world {name!r}: {path} is missing")
            expected = card["files"][file]["sha256"]
            if (actual := file_sha256(path)) != expected:
                raise ShippedWorldError(
                    f"shipped world {name!r}: {path} has sha256 {actual[:16]}..., its card says "
                    f"{expected[:16]}...: the file is damaged or was changed; reinstall lenbench "
                    "or rebuild the world")
            parts.append(pd.read_parquet(path))
        if not parts:
            raise ShippedWorldError(f"shipped world {name!r}: its card lists no sample file")
        return cls(name, folder, card, pd.concat(parts, ignore_index=True))

    @property
    def digest(self) -> str:
        """The sha256 of its samples (of the files' sha256s, for a world in several files)."""
        shas = [self.card["files"][f]["sha256"] for f in sample_files(self.card)]
        return shas[0] if len(shas) == 1 else hashlib.sha256("".join(shas).encode()).hexdigest()

    @property
    def complete(self) -> bool:
        """False while a world is still growing towards its size (its card says how far)."""
        return bool((self.card.get("progress") or {}).get("complete", True))

    @property
    def fingerprint(self) -> str | None:
        value = self.card.get("labels_fingerprint")
        return None if value is None else str(value)

    def differences(self, run_sample_key: Mapping) -> list[str]:
        """The settings in which this run differs from the world's build ([] when it fits)."""
        mine = json.loads(json.dumps(dict(run_sample_key), sort_keys=True, default=str))
        theirs = self.card["sample_key"]
        return [f"{k}: run {mine.get(k)!r}, world {theirs.get(k)!r}"
                for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]

    def known(self, prompts: pd.DataFrame) -> dict[tuple[str, int], KnownSample]:
        """The shipped samples of the prompts in `prompts`, matched by id and checked by text.

        A shipped prompt whose text differs from the run's (another file behind the same source)
        is an error, not a silent regeneration.
        """
        texts = dict(zip(prompts["prompt_id"], prompts["text"]))
        rows = self.samples[self.samples["prompt_id"].isin(texts)]
        bad = [pid for pid, sha in zip(rows["prompt_id"], rows["text_sha256"])
               if text_sha256(texts[pid]) != sha]
        if bad:
            raise ShippedWorldError(
                f"shipped world {self.name!r}: {len(set(bad))} prompts (e.g. {bad[0]}) have "
                "other text in this run's source than in the world's; the source is not the "
                f"one the card names ({self.card.get('dataset', {}).get('source_package')})")
        return {(str(pid), int(s)): KnownSample(str(sha), tuple(int(t) for t in ids), str(fin))
                for pid, s, sha, ids, fin in zip(rows["prompt_id"], rows["sample_idx"],
                                                 rows["prompt_sha"], rows["output_token_ids"],
                                                 rows["finish_reason"])}


def compare_with_shipped(labels: pd.DataFrame, world: ShippedWorld) -> dict:
    """How regenerated labels compare with the shipped ones on the samples both hold."""
    from lenbench.scoring.fingerprints import labels_fingerprint

    mine = labels.set_index(["prompt_id", "sample_idx"])
    theirs = world.samples.set_index(["prompt_id", "sample_idx"])
    common = mine.index.intersection(theirs.index)
    same_tokens = sum(list(a) == list(b) for a, b in zip(
        mine.loc[common, "output_token_ids"], theirs.loc[common, "output_token_ids"]))
    fingerprint = labels_fingerprint(labels)
    return {"world": world.name, "shipped_fingerprint": world.fingerprint,
            "fingerprint": fingerprint, "matches": fingerprint == world.fingerprint,
            "samples_compared": len(common), "samples_identical": int(same_tokens),
            "same_L": int((mine.loc[common, "L"].to_numpy()
                           == theirs.loc[common, "L"].to_numpy()).sum())}


def shipped_world_for(shipped: str | None, stage_cfg: dict) -> ShippedWorld | None:
    """The shipped world `shipped` (`generation.shipped`) names, or None when none is named or
    its samples were made with other settings than this run's (then everything is generated,
    and the log says which settings differ)."""
    if not shipped:
        return None
    world = ShippedWorld.load(str(shipped))
    if diffs := world.differences(sample_key(stage_cfg)):
        log.warning("shipped world %s was built with other settings (%s); its samples are not "
                    "used and this run generates its own", world.name, "; ".join(diffs))
        return None
    return world


def report_against_shipped(labels: pd.DataFrame, gen_card: dict, shipped: str | None,
                           regenerate: bool) -> None:
    """After `generation.regenerate=true`: say whether the labels reproduce the shipped world
    `shipped` (`generation.shipped`) names."""
    info = gen_card.get("shipped_world")
    if not info or info.get("used") or not regenerate:
        return
    report = compare_with_shipped(labels, ShippedWorld.load(str(shipped)))
    verdict = "matches" if report["matches"] else "does NOT match"
    log.warning("regenerated labels (fingerprint %s) %s the shipped world %s (fingerprint %s): "
                "%d of %d shared samples identical, %d with the same L", report["fingerprint"],
                verdict, report["world"], report["shipped_fingerprint"],
                report["samples_identical"], report["samples_compared"], report["same_L"])
