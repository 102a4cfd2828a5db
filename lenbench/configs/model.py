"""The `model` group's schemas: a hub or local checkpoint, a GGUF file, or the toy model."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ModelConfig:
    name: str = "???"
    source: str = "hf"               # hf | gguf | toy
    revision: str | None = None      # hub commit or tag; a local copy ignores it
    dtype: str = "bfloat16"          # float32 | bfloat16 | float16 | auto (float32 on CPUs)


@dataclass
class HFModel(ModelConfig):
    """A transformers checkpoint: a local folder or a hub id (a .gguf path is converted)."""

    name: str = "local"
    path: str | None = "???"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # recorded with labels


@dataclass
class GGUFFiles:
    """Where a preset's GGUF lives: `module:relative/path` per chunk, joined in order."""

    files: list[str] = field(default_factory=list)
    sha256: str | None = None   # the joined file's; a mismatch stops before conversion
    install: str | None = None  # the command that installs the package(s), for the error


@dataclass
class GGUFModel(ModelConfig):
    """A GGUF checkpoint from an installed package (or `path`), converted once into the cache."""

    source: str = "gguf"
    path: str | None = None            # a .gguf file here overrides the package's file
    gguf: GGUFFiles = field(default_factory=GGUFFiles)
    dtype: str = "auto"                # float32 on CPUs (~4x faster than bf16 without AMX)
    chat_template: str | None = None   # null: the GGUF's own
    stop_strings: list[str] = field(default_factory=list)
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToyModel(ModelConfig):
    """The toy world's model, trained by lenbench (lenbench.models.toy.ToyModelConfig)."""

    name: str = "toy"
    source: str = "toy"
    dtype: str = "float32"
    toy: dict[str, Any] = field(default_factory=dict)  # ToyModelConfig fields (checked there)
    # false: the weights shipped in lenbench/worlds/toyworld/model/ when `toy` is their config
    # (any other config trains); true: train here (minutes; cached like any stage)
    retrain: bool = False


SCHEMAS = {"hf": HFModel, "gguf": GGUFModel, "toy": ToyModel}
