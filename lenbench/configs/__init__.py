"""Typed configs: each Hydra group's schema is a dataclass registered in Hydra's ConfigStore.

A YAML preset in conf/ starts from its schema (`- /schema/<group>/<schema>@_here_` in its
defaults) and sets only what differs, so every default is written once, in the dataclass. Hydra
merges presets and overrides into the typed node: an unknown key or a value of the wrong type
fails at compose time, naming the field. `register()` runs on `import lenbench`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lenbench.configs import dataset, generation, model
from lenbench.configs.run import (
    EvalConfig,
    FeaturesConfig,
    LenbenchConfig,
    PathsConfig,
    SimSettings,
)

SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": dataset.SCHEMAS,
    "model": model.SCHEMAS,
    "generation": generation.SCHEMAS,
    "features": {"default": FeaturesConfig},
    "eval": {"default": EvalConfig},
    "paths": {"default": PathsConfig},
    "sim": {"default": SimSettings},
}


def register() -> None:
    """Store every schema as `schema/<group>/<name>`, and the root as `lenbench_schema`."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="lenbench_schema", node=LenbenchConfig)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node)


CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def load_preset(group: str, name: str, conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """One group option as a plain dict, as `group=name` composes it (its schema's defaults,
    the presets it extends, then its own keys), without a Hydra app: for code and tests that
    need a preset outside a run."""
    path = conf_dir / group / f"{name}.yaml"
    if not path.exists():
        raise ValueError(f"{group}={name}: no preset {group}/{name}.yaml in {conf_dir}")
    own = OmegaConf.load(path)
    merged = OmegaConf.create()
    for entry in own.pop("defaults", []):
        if entry == "_self_":
            continue
        if entry.startswith("/schema/"):
            schema_group, schema = entry.removeprefix("/schema/").removesuffix("@_here_").split("/")
            merged = OmegaConf.merge(merged, OmegaConf.structured(SCHEMAS[schema_group][schema]))
        else:  # another option of the same group
            merged = OmegaConf.merge(merged, load_preset(group, entry, conf_dir))
    return OmegaConf.to_container(OmegaConf.merge(merged, own), resolve=True)


def group_settings(cfg: Mapping[str, Any], group: str, schema: str = "default") -> dict[str, Any]:
    """`cfg[group]` over its schema's defaults, as plain values, type-checked.

    Code reads every key of a group without restating its default: a composed run config has
    them all already, and a partial dict (built in a notebook or a test) gets the schema's.
    """
    node = OmegaConf.merge(OmegaConf.structured(SCHEMAS[group][schema]), dict(cfg.get(group) or {}))
    return OmegaConf.to_container(node, resolve=True)
