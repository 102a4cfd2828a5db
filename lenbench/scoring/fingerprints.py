"""Content fingerprints of the data a result was scored on.

Stage keys name the config that built the data, not the data: two machines can build different
labels from one config (the toy model's training is not bit-identical across CPUs). A fingerprint
hashes the content itself, so the leaderboard never puts results scored on different labels or
features in one table, and a result written for other data never replaces one at the same path.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

_CHUNK = 1 << 20


def labels_fingerprint(labels: pd.DataFrame) -> str:
    """sha256 of every row's (prompt_id, sample_idx, split, L, censored), in table order."""
    h = hashlib.sha256()
    cols = labels[["prompt_id", "sample_idx", "split", "L", "censored"]]
    for row in cols.itertuples(index=False):
        h.update(f"{row[0]}\t{int(row[1])}\t{row[2]}\t{int(row[3])}\t{int(bool(row[4]))}\n"
                 .encode())
    return h.hexdigest()[:16]


FINGERPRINT_FILE = "fingerprint.txt"


def stage_fingerprint(folder: str | Path) -> str:
    """`arrays_fingerprint` of a finished stage, computed once and kept beside its arrays (a
    features stage at full scale holds gigabytes; rereading them every run would cost minutes)."""
    from lenbench.stages import atomic_write_bytes

    path = Path(folder) / FINGERPRINT_FILE
    if path.exists():
        return path.read_text().strip()
    value = arrays_fingerprint(folder)
    atomic_write_bytes(path, value.encode())
    return value


def arrays_fingerprint(folder: str | Path) -> str:
    """sha256 over the names and bytes of the `.npy` arrays under `folder` (a features stage;
    its meta.json, which records timings, is left out)."""
    h = hashlib.sha256()
    root = Path(folder)
    for path in sorted(root.rglob("*.npy")):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()[:16]
