"""The toy model's shipped weights: the default toy config needs no training.

The toy model's training is bit-reproducible on one machine, not across CPUs (float reductions
round differently), so labels sampled from a model trained here differ from machine to machine.
The weights trained once are shipped in `lenbench/worlds/toyworld/model/` with a card
(`lenbench_model_card.json`): the toy config they were trained with, the packages and the CPU
that trained them, a license note, and each file's sha256, checked every time the folder is used.

`model=toy` uses them when its `model.toy` block is the shipped config and `model.retrain` is
false; another toy config, or `model.retrain=true`, trains here (`models/toy.py`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from lenbench.configs.model import ToyModelConfig
from lenbench.models.gguf import CARD_FILE
from lenbench.stages import stable_hash
from lenbench.worlds.shipped import CARD_FILE as WORLD_CARD
from lenbench.worlds.shipped import ShippedWorldError, available, file_sha256

log = logging.getLogger(__name__)

SHIPPED_TOY_DIR = Path(__file__).resolve().parents[1] / "worlds" / "toyworld" / "model"
WEIGHTS_FILE = "model.safetensors"


def check_files(folder: str | Path, files: Mapping[str, Mapping]) -> None:
    """Every file the card lists exists and has the sha256 the card records (one line if not)."""
    for name, entry in files.items():
        path = Path(folder) / name
        if not path.is_file():
            raise ShippedWorldError(f"{path}: shipped file is missing; reinstall lenbench or "
                                    "restore it (git checkout)")
        actual = file_sha256(path)
        if actual != entry["sha256"]:
            raise ShippedWorldError(f"{path}: sha256 {actual[:16]}... differs from its card's "
                                    f"{entry['sha256'][:16]}...; the shipped file is damaged or "
                                    "was changed: reinstall lenbench or restore it (git checkout)")


def read_card(folder: str | Path | None = None) -> dict | None:
    """The card of shipped weights (by default the toy model's), or None where there is none."""
    path = Path(folder or SHIPPED_TOY_DIR) / CARD_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ShippedWorldError(f"{path}: not a readable card ({exc})") from None


def _plain(obj: object) -> object:
    return json.loads(json.dumps(obj, sort_keys=True))


def shipped_model_key(card: Mapping) -> str:
    """The model key of shipped weights: their files' checksums, so it is the same on every
    machine and never that of a model trained here (whose key is its config's)."""
    return stable_hash({"shipped_toy": {n: f["sha256"] for n, f in card["files"].items()}})


def _shipped_card(toy_cfg: ToyModelConfig, folder: str | Path) -> dict | None:
    """The card of weights shipped for `toy_cfg` (every field), its files checked; None when
    none are shipped for it."""
    card = read_card(folder)
    if card is None or _plain(card.get("toy_config")) != _plain(toy_cfg.to_dict()):
        return None
    check_files(folder, card["files"])
    return card


def shipped_toy_model(toy_cfg: ToyModelConfig, folder: str | Path | None = None
                      ) -> tuple[str, str] | None:
    """(folder, model key) of the weights shipped for `toy_cfg`, or None."""
    folder = Path(folder or SHIPPED_TOY_DIR)
    card = _shipped_card(toy_cfg, folder)
    if card is None:
        return None
    build = card.get("build") or {}
    log.info("toy model: the shipped weights in %s (trained with torch %s on %s; "
             "model.retrain=true trains here instead)", folder,
             (card.get("packages") or {}).get("torch"), (build.get("cpu") or {}).get("name"))
    return str(folder), shipped_model_key(card)


def model_world(target_path: str) -> str | None:
    """The shipped world a model folder's card names, which `generation.shipped` left null
    takes: shipped weights come with the world sampled from them (the toy model's:
    `toyworld`). None when the card names none, or names one that is not shipped."""
    world = (read_card(target_path) or {}).get("world")
    if not world:
        return None
    if str(world) not in available():  # weights shipped before their world was packed
        log.warning("%s: its card names the world %r, which is not shipped; its labels are "
                    "generated here", target_path, world)
        return None
    return str(world)


def same_model(folder_a: str | Path, folder_b: str | Path) -> bool:
    """Whether two model folders hold bit-identical tensors and the same tokenizer."""
    import torch
    from safetensors.torch import load_file

    a, b = load_file(Path(folder_a) / WEIGHTS_FILE), load_file(Path(folder_b) / WEIGHTS_FILE)
    same_tokenizer = (Path(folder_a) / "tokenizer.json").read_bytes() == \
        (Path(folder_b) / "tokenizer.json").read_bytes()
    return same_tokenizer and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _world_fingerprint(folder: str | Path) -> str | None:
    """The labels fingerprint of the world shipped beside the weights (`../card.json`)."""
    path = Path(folder).parent / WORLD_CARD
    return json.loads(path.read_text()).get("labels_fingerprint") if path.exists() else None


def retrained_toy_model(trained: str | Path, key: str, toy_cfg: ToyModelConfig,
                        folder: str | Path | None = None) -> tuple[str, str]:
    """After `model.retrain=true`: say whether the model trained here is the shipped one. The
    same model resolves to the shipped folder and key (so the shipped world applies to it, and
    `generation.regenerate=true` compares fresh labels with it); another stays (trained, key)."""
    folder = Path(folder or SHIPPED_TOY_DIR)
    card = _shipped_card(toy_cfg, folder)
    if card is None:
        return str(trained), key
    world = _world_fingerprint(folder)
    if same_model(trained, folder):
        log.info("retrained toy model %s: identical to the shipped one in %s, which is used "
                 "(its world's labels fingerprint: %s)", trained, folder, world)
        return str(folder), shipped_model_key(card)
    log.warning("retrained toy model %s: its weights differ from the shipped ones in %s "
                "(training rounds differently on this CPU or torch build); labels sampled from "
                "it are a world of their own, not the shipped one (labels fingerprint %s)",
                trained, folder, world)
    return str(trained), key
