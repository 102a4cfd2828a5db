"""The schemas of the single-option groups (features, eval, paths, sim) and of the root config."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any

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
    return dataclasses.make_dataclass("SimSettings", fields)


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
    device: str = "auto"       # auto | cpu | cuda | cuda:N
    progress: bool = True      # rich progress bars
    debug: bool = False        # true: user errors (bad config, bad input) show their traceback
