"""The schemas of the single-option groups (features, eval, paths, sim), the root config's
schema, and `RunConfig`: the composed config as typed objects, built once by each entry point."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from lenbench.configs import dataset, generation, model
from lenbench.configs.dataset import DatasetConfig
from lenbench.configs.generation import GenerationConfig
from lenbench.configs.model import ModelConfig
from lenbench.sim.config import SimConfig


@dataclass
class FeaturesConfig:
    """What the features stage stores from the target's hidden states."""

    roles: list[str] = field(default_factory=lambda: ["low", "mid", "high", "last"])
    poolings: list[str] = field(default_factory=lambda: ["last", "mean", "entropy"])
    step_roles: list[str] = field(default_factory=lambda: ["mid"])  # stored at every step
    step_stride: int = 1
    batch_tokens: int = 8192
    # add entropy for progressive (PLP) predictors: pooled over 0..n-1+t
    step_poolings: list[str] = field(default_factory=lambda: ["last"])


@dataclass
class EvalConfig:
    n_boot: int = 1000           # bootstrap resamples over prompts for the 95% intervals
    ci: float = 0.95
    progress_bins: int = 10      # dynamic MAE by progress decile
    noise_floor: bool = True     # write the noise_floor reference row when n_samples >= 2
    raise_on_error: bool = False  # true: a failing predictor stops the run


@dataclass
class PathsConfig:
    """Relative paths are relative to the directory lenbench is started from. A run writes to
    the user's own folders; publishing into the committed leaderboard is the explicit
    `paths=publish` (conf/paths/publish.yaml)."""

    cache_dir: str = "${oc.env:LENBENCH_CACHE_DIR,.cache/lenbench}"  # models, labels, features
    results_dir: str = "results"                # one JSON per run
    leaderboard_dir: str = "leaderboard-local"  # README.md, plots and the site


def _omegaconf_type(hint: Any) -> Any:
    """SimConfig's annotation, or Any where OmegaConf has no such type (a union of str/float)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) > 1:
        return Any
    return hint


def _sim_schema() -> type:
    """SimConfig's fields and defaults (the paper's serving study) plus `enabled`: the
    simulator's parameters are written once, in SimConfig."""
    hints = typing.get_type_hints(SimConfig)
    fields = [("enabled", bool, field(default=True))]
    for f in dataclasses.fields(SimConfig):
        default = field(default=f.default) if f.default is not dataclasses.MISSING \
            else field(default_factory=f.default_factory)
        fields.append((f.name, _omegaconf_type(hints[f.name]), default))
    return dataclasses.make_dataclass("SimSettings", fields, namespace={
        "simulation": _simulation, "__module__": __name__})


def _simulation(self: Any) -> SimConfig:
    """The simulator's config (`enabled` is the run's switch, not the simulator's)."""
    return SimConfig.from_dict(dataclasses.asdict(self))


SimSettings = _sim_schema()


@dataclass
class LenbenchConfig:
    """The root: one node per group (typed by the option's schema) and the run's own settings."""

    paths: Any = None
    dataset: Any = None
    transfer: Any = None       # a second prompt set to score on (docs/protocol.md, "Transfer")
    model: Any = None
    generation: Any = None
    features: Any = None
    predictor: Any = None      # each predictor's arguments are its class's (checked on build)
    eval: Any = None
    sim: Any = None
    seed: int = 0              # predictor seed (fit, bootstrap); data and model seeds are theirs
    threads: int = 1           # torch threads per job
    jobs: int = 0              # predictors evaluated at once (0: from the cores; 1: in turn)
    device: str = "auto"       # auto | cpu | cuda | cuda:N
    progress: bool = True      # rich progress bars
    debug: bool = False        # true: user errors (bad config, bad input) show their traceback


# the presets (conf/<group>/<option>.yaml), shipped inside the package
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"

# Each group's options (`group=option` picks one; a single-option group has `default`). The
# transfer set is a dataset preset, so it takes the dataset group's schemas.
GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "dataset": dataset.SCHEMAS,
    "model": model.SCHEMAS,
    "generation": generation.SCHEMAS,
    "features": {"default": FeaturesConfig},
    "eval": {"default": EvalConfig},
    "paths": {"default": PathsConfig},
    "sim": {"default": SimSettings},
}
# The key that names a group's option in its values, and the option conf/config.yaml chooses
DEFAULT_OPTION = {"dataset": ("source", "toyworld"), "model": ("source", "toy"),
                  "generation": ("backend", "hf")}


def _names(schema: type) -> set[str]:
    return {f.name for f in dataclasses.fields(schema)}


def group_schema(group: str, values: Mapping[str, Any]) -> type:
    """The schema `values` were composed from: the one whose fields are exactly its keys (a
    composed group has every key of its schema), else, for a partial group, the option its
    `source`/`backend` names, else the default run's option (conf/config.yaml)."""
    options = GROUP_SCHEMAS["dataset" if group == "transfer" else group]
    if len(options) == 1:
        return next(iter(options.values()))
    key, default = DEFAULT_OPTION["dataset" if group == "transfer" else group]
    keys = set(values)
    fits = [s for s in options.values() if keys <= _names(s)]
    exact = [s for s in fits if _names(s) == keys]
    chosen = values.get(key) or default

    def named(schema: type) -> bool:
        return getattr(schema, key, None) == chosen or schema is options.get(chosen)

    for candidates in ([s for s in exact if named(s)], exact, [s for s in fits if named(s)], fits):
        if candidates:
            picked = candidates[0]
            if key in values and chosen in options and not named(picked):
                raise ValueError(_other_option(group, key, chosen, options, picked))
            return picked
    unknown = sorted(keys - _names(options.get(chosen, next(iter(options.values())))))
    raise ValueError(f"{group}: no {group} schema has the keys {unknown}")


def _other_option(group: str, key: str, chosen: str, options: dict[str, type],
                  picked: type) -> str:
    """The one line for a `source`/`backend` set to another option than the group's preset:
    its settings would not fit that option's schema, so the preset must change, not the key."""
    folder = "dataset" if group == "transfer" else group
    option = next(n for n, s in options.items() if s is picked)
    presets = sorted(p.stem for p in (CONF_DIR / folder).glob("*.yaml")
                     if f"/schema/{folder}/{chosen}@" in p.read_text())
    choose = (f"choose a preset made for it ({', '.join(f'{folder}={p}' for p in presets)})"
              if presets else f"no {folder} preset is made for it")
    return (f"{group}.{key}={chosen!r} does not fit this {group}'s settings (a {option} "
            f"preset's): {choose}, which brings its own settings")


def group_config(group: str, values: Mapping[str, Any] | None) -> Any:
    """One group's values as its schema's dataclass; keys left out take the schema's defaults.
    A required key left out (`???`) or a key no schema has is a ValueError naming it."""
    return _typed(group, OmegaConf.to_container(_node(group, values or {}), resolve=True))


def _node(group: str, values: Mapping[str, Any]) -> DictConfig:
    return OmegaConf.merge(OmegaConf.structured(group_schema(group, values)), dict(values))


def _typed(group: str, values: Mapping[str, Any]) -> Any:
    try:
        return OmegaConf.to_object(_node(group, values))
    except OmegaConfBaseException as exc:
        raise _problem(group, exc) from None


def _problem(group: str, exc: OmegaConfBaseException) -> ValueError:
    """OmegaConf's refusal as one line naming the field."""
    return ValueError(f"{group}.{getattr(exc, 'full_key', '')}: "
                      f"{str(getattr(exc, 'msg', exc)).splitlines()[0]}")


def _plain(value: Any) -> Any:
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value


@dataclass(frozen=True, kw_only=True)  # `transfer` (a default) precedes required parts
class RunConfig:
    """The run's config as typed objects: one schema dataclass per group.

    Built once, by `from_composed`, where a config is composed (the CLI, the world-building
    tools, tests); below that each stage and loader receives the parts it needs, never the
    whole mapping, so no module re-reads keys or reshapes them on the way. The parts are the
    schema classes Hydra composes into (plain dataclasses, as Hydra needs them mutable): treat
    them as values and change them with `dataclasses.replace`. `to_dict` gives back the
    composed mapping, which results record and hash.
    """

    paths: PathsConfig
    dataset: DatasetConfig
    transfer: DatasetConfig | None = None  # a second prompt set (dataset@transfer=...)
    model: ModelConfig
    generation: GenerationConfig
    features: FeaturesConfig
    predictor: dict[str, Any] = field(default_factory=dict)  # constructor arguments: the class
    #                                                          is the schema (contract/instantiate)
    eval: EvalConfig
    sim: Any  # SimSettings
    seed: int = 0
    threads: int = 1
    jobs: int = 0
    device: str = "auto"
    progress: bool = True
    debug: bool = False

    @classmethod
    def from_composed(cls, cfg: Mapping[str, Any] | DictConfig) -> RunConfig:
        """The typed config of a composed one (a DictConfig or its resolved container). A
        partial mapping (a notebook, a test) is completed as `lenbench` with no override would
        compose it: each group's schema defaults (the default run's option where the group
        does not name one), interpolations resolved across groups."""
        if isinstance(cfg, DictConfig):
            cfg = OmegaConf.to_container(cfg, resolve=False)
        groups = ({f.name for f in dataclasses.fields(cls)} & set(GROUP_SCHEMAS)) | {"transfer"}
        root = OmegaConf.create({k: v for k, v in cfg.items() if k not in groups})
        for group in sorted(groups):
            values = cfg.get(group)
            if group == "transfer" and values is not None and not values.get("source"):
                raise ValueError("transfer: no dataset preset; choose it with "
                                 "dataset@transfer=PRESET, e.g. dataset@transfer=jsonl "
                                 "transfer.path=FILE")
            try:
                root[group] = None if group == "transfer" and values is None else \
                    _node(group, values or {})
            except OmegaConfBaseException as exc:
                raise _problem(group, exc) from None
        root["predictor"] = cfg.get("predictor") or {}
        plain = OmegaConf.to_container(root, resolve=True, throw_on_missing=False)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(plain) - known)
        if unknown:
            raise ValueError(f"{unknown[0]}: not a key of the config")
        return cls(**{k: _typed(k, v) if k in groups and v is not None else v
                      for k, v in plain.items()})

    def to_dict(self, only: Iterable[str] | None = None) -> dict[str, Any]:
        """The composed config as plain values (what a result records as its `config`), or
        only the named parts of it."""
        names = [f.name for f in dataclasses.fields(self)] if only is None else list(only)
        return {name: _plain(getattr(self, name)) for name in names}
