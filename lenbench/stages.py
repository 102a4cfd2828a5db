"""Cached pipeline stages: a key per stage, a lock while building, an atomic move into place.

Each stage's output lives in `cache_dir/<stage>/<key>/`, where the key hashes the stage's own
config together with its input's key, so a change upstream invalidates everything downstream and
nothing else. A stage is built in `<key>.partial/` and renamed into place only when complete, so a
killed run never leaves a half stage that looks finished. Resumable stages (generation) keep the
partial folder between runs and skip the pieces already in it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock

COMPLETE_MARKER = "stage.json"


def stable_hash(obj: Any, n: int = 12) -> str:
    """A short sha256 of a JSON-serialisable object, independent of dict order."""
    blob = json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:n]


class Stage:
    """One cached stage output: `path` once complete, `partial` while being built."""

    def __init__(self, cache_dir: str | Path, name: str, config: dict, parent: str | None = None):
        self.name = name
        self.config = config
        self.parent = parent
        self.key = stable_hash({"stage": name, "config": config, "parent": parent})
        root = Path(cache_dir) / name
        self.path = root / self.key
        self.partial = root / f"{self.key}.partial"
        self._lock_path = root / f"{self.key}.lock"

    @property
    def done(self) -> bool:
        return (self.path / COMPLETE_MARKER).exists()

    @contextmanager
    def lock(self, timeout: float = -1) -> Iterator[None]:
        """Serialise builders of this stage across processes (multirun jobs share the cache)."""
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(self._lock_path), timeout=timeout):
            yield

    @contextmanager
    def building(self, resume: bool = False) -> Iterator[Path]:
        """Yield the partial folder; on success, mark it complete and rename it into place.

        With `resume=False` a leftover partial folder from a killed run is discarded first.
        """
        if self.partial.exists() and not resume:
            shutil.rmtree(self.partial)
        self.partial.mkdir(parents=True, exist_ok=True)
        yield self.partial
        meta = {"stage": self.name, "key": self.key, "parent": self.parent, "config": self.config}
        tmp_marker = self.partial / (COMPLETE_MARKER + ".tmp")
        tmp_marker.write_text(json.dumps(meta, indent=2, default=str))
        os.replace(tmp_marker, self.partial / COMPLETE_MARKER)
        if self.path.exists():  # a stale incomplete folder can't be here: only complete ones are
            shutil.rmtree(self.path)
        os.replace(self.partial, self.path)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write a file so that readers see either the old content or the new, never a torn one.

    The bytes go to a hidden `.NAME.PID.tmp` in the same folder (so the rename is atomic), are
    fsynced and renamed over `path`; a killed writer leaves at most that hidden file. The file
    gets ordinary permissions (0644 under the usual umask), so shared result folders stay
    readable by the group.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable; not possible on every platform
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return path
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
    return path
