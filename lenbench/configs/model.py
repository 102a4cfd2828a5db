"""The `model` group's schemas: a hub or local checkpoint, a GGUF file, or the toy model."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
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
class ToyModelConfig:
    """Everything that determines the toy model; equal configs give equal weights on one machine.

    ``n_layers`` stays >= 8 so that the EAGLE-3 layers hs[2], hs[L//2], hs[L-3] are distinct.
    """

    seed: int = 0
    n_layers: int = 8
    hidden_size: int = 64
    n_heads: int = 4
    n_kv_heads: int = 2
    intermediate_size: int = 192
    vocab_size: int = 1024  # enough merges that every corpus word is one token
    max_seq_len: int = 256
    n_train_examples: int = 30_000  # >= train_steps * batch_size: no example is seen twice
    # Many small steps beat few large ones here: the counting that stops lists and reports is
    # learnt late, after ~1000 updates, and a 16-row step costs no more per row on 2 cores.
    train_steps: int = 1800
    batch_size: int = 16
    lr: float = 4e-3
    warmup_steps: int = 100
    min_lr_ratio: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    # The tokenizer is trained on this many corpus examples (it only needs to see the words).
    n_tokenizer_examples: int = 5_000

    @classmethod
    def from_overrides(cls, overrides: dict[str, Any]) -> ToyModelConfig:
        """The defaults with `model.toy`'s keys over them; an unknown key names the valid ones."""
        valid = {f.name for f in fields(cls)}
        unknown = set(overrides) - valid
        if unknown:
            raise ValueError(f"model.toy: unknown keys {sorted(unknown)}; valid: {sorted(valid)}")
        return cls(**overrides)

    @classmethod
    def tiny(cls, seed: int = 0, **overrides: object) -> ToyModelConfig:
        """A seconds-scale variant for tests: same architecture family, far less training."""
        base = cls(seed=seed, hidden_size=48, n_heads=2, n_kv_heads=1, intermediate_size=96,
                   vocab_size=400, max_seq_len=256, n_train_examples=2_000, train_steps=80,
                   batch_size=16, lr=1e-2, warmup_steps=5, n_tokenizer_examples=1_000)
        return replace(base, **overrides)

    def to_dict(self) -> dict:
        """Plain dict for cache keys and the build record."""
        return asdict(self)


@dataclass
class ToyModel(ModelConfig):
    """The toy world's model, trained by lenbench (lenbench/models/toy.py)."""

    name: str = "toy"
    source: str = "toy"
    dtype: str = "float32"
    # ToyModelConfig's fields that differ from its defaults: the toymodel stage's key and the
    # result's identity hash this block as written
    toy: dict[str, Any] = field(default_factory=dict)
    # false: the weights shipped in lenbench/worlds/toyworld/model/ when `toy` is their config
    # (any other config trains); true: train here (minutes; cached like any stage)
    retrain: bool = False

    def __post_init__(self) -> None:
        # The block as the model it builds, reshaped once, when the config is typed: loading,
        # the shipped weights' check and training all read this (not a field, so neither
        # Hydra's schema nor the composed mapping has it).
        self.toy_config = ToyModelConfig.from_overrides(dict(self.toy))


SCHEMAS = {"hf": HFModel, "gguf": GGUFModel, "toy": ToyModel}
