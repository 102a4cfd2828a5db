"""Typed configs: each Hydra group's schema is a dataclass registered in Hydra's ConfigStore.

A YAML preset in conf/ starts from its schema (`- /schema/<group>/<schema>@_here_` in its
defaults) and sets only what differs, so every default is written once, in the dataclass. Hydra
merges presets and overrides into the typed node: an unknown key or a value of the wrong type
fails at compose time, naming the field. `register()` runs on `import lenbench`.

Where a config is composed (the CLI, the world-building tools, tests) it is typed once, as a
`RunConfig` (configs/run.py), whose parts are these schemas' dataclasses; code below reads
their fields, never the composed mapping's keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from lenbench.configs.run import CONF_DIR, GROUP_SCHEMAS, LenbenchConfig, RunConfig, group_config

SCHEMAS: dict[str, dict[str, type]] = GROUP_SCHEMAS
__all__ = ["SCHEMAS", "RunConfig", "group_config", "load_preset", "preset_config", "register"]


def register() -> None:
    """Store every schema as `schema/<group>/<name>`, and the root as `lenbench_schema`."""
    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    store.store(name="lenbench_schema", node=LenbenchConfig)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            store.store(group=f"schema/{group}", name=name, node=node)


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


def preset_config(group: str, name: str, conf_dir: Path = CONF_DIR) -> Any:
    """One group option as its schema's dataclass, as `group=name` composes it."""
    return group_config(group, load_preset(group, name, conf_dir))
