"""The feature vocabulary and the reader of a features folder.

A predictor names the target-model features it reads by layer role and pooling (`Needs`); the
features stage writes them under file names derived from those names, and the views read them
back through `FeatureStore`. These names and the reader are the contract between the two sides,
so they live here, below both: extraction (`lenbench/features/extract.py`) only writes.
Layer roles follow EAGLE-3: low/mid/high = hs[2], hs[L//2], hs[L-3]; last = hs[L] (HF
`hidden_states`, where hs[0] is the embedding output).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ROLES = ("low", "mid", "high", "last")
POOLINGS = ("last", "mean", "entropy")
STEP_POOLINGS = ("last", "entropy")


def check_names(field: str, values, allowed: tuple[str, ...]) -> None:
    """Reject a name outside `allowed`, naming the config field and the valid choices."""
    for value in values:
        if value not in allowed:
            raise ValueError(f"{field}: unknown name {value!r}; use one of {list(allowed)}")


def role_layers(num_layers: int) -> dict[str, int]:
    """Index into HF `hidden_states` for each role (EAGLE-3 convention, DESIGN §4)."""
    layers = {"low": 2, "mid": num_layers // 2, "high": num_layers - 3, "last": num_layers}
    if len({layers[r] for r in ("low", "mid", "high")}) < 3:
        raise ValueError(f"a model with {num_layers} layers has no three distinct EAGLE-3 layers "
                         "(need at least 7)")
    return layers


def static_file(role: str, pooling: str) -> str:
    """The file of the prompt states of `role` pooled by `pooling` in a features folder."""
    return f"static_{role}_{pooling}.npy"


def step_file(role: str, pooling: str) -> str:
    """The file of the step states of `role` pooled by `pooling` in a features folder."""
    return f"steps_{role}.npy" if pooling == "last" else f"steps_{role}_{pooling}.npy"


class FeatureStore:
    """Read-only access to a features folder (memory-mapped; nothing loaded until asked)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / "meta.json").read_text())
        self.step_offsets = np.load(self.folder / "steps_offsets.npy")
        self.token_offsets = np.load(self.folder / "entropy_offsets.npy")

    def static(self, role: str, pooling: str) -> np.ndarray:
        path = self.folder / static_file(role, pooling)
        if not path.exists():
            raise KeyError(f"features for role={role!r} pooling={pooling!r} were not extracted; "
                           f"add them to features.roles/features.poolings (have "
                           f"{self.meta['roles']} x {self.meta['poolings']})")
        return np.load(path, mmap_mode="r")

    def steps(self, role: str, pooling: str = "last") -> np.ndarray:
        path = self.folder / step_file(role, pooling)
        if not path.exists():
            raise KeyError(f"step features for role={role!r} pooling={pooling!r} were not "
                           f"extracted; add them to features.step_roles/features.step_poolings "
                           f"(have {self.meta['step_roles']} x "
                           f"{self.meta.get('step_poolings', ['last'])})")
        return np.load(path, mmap_mode="r")

    def step_index(self) -> np.ndarray:
        return np.load(self.folder / "steps_index.npy", mmap_mode="r")

    def entropy(self, row: int) -> np.ndarray:
        ent = np.load(self.folder / "entropy.npy", mmap_mode="r")
        return np.asarray(ent[self.token_offsets[row]: self.token_offsets[row + 1]])
