"""Where and from what a result was measured: versions, hardware, the code revision, the time.

Timings mean nothing without the machine, and a number without its revision cannot be traced, so
every result records these (the `environment`, `git` and `created_at` fields).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from lenbench.models.build_info import CPU_FLAGS, cpu_description

__all__ = ["environment_info", "git_info", "utc_now"]


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment_info(device: str | None = None) -> dict[str, Any]:
    """Versions and hardware a number was measured on; timings mean nothing without them.

    ``device`` overrides detection (pass the device the run actually used); otherwise "cuda:NAME"
    when torch sees a GPU, else "cpu". torch is only imported if it is already installed.
    """
    import numpy

    torch_version = _version("torch")
    if device is None:
        device = "cpu"
        if torch_version is not None:
            try:
                import torch

                if torch.cuda.is_available():
                    device = f"cuda:{torch.cuda.get_device_name(0)}"
            except (ImportError, OSError, RuntimeError):  # a broken torch must not lose a result
                device = "cpu"
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch_version,
        "transformers": _version("transformers"),
        "numpy": numpy.__version__,
        "device": device,
        "cpu_count": os.cpu_count(),
        "cpu": cpu_description(CPU_FLAGS),  # float results differ between instruction sets
    }


def _git(path: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def git_info(path: str | os.PathLike[str] = ".") -> dict[str, Any]:
    """The code revision a result came from, and whether uncommitted edits could have changed it.

    Both values are None outside a git work tree (e.g. an installed wheel) or without a commit yet.
    """
    p = Path(path)
    rev = _git(p, "rev-parse", "HEAD")
    status = _git(p, "status", "--porcelain")
    return {
        "revision": rev.strip() if rev else None,
        "dirty": None if status is None else bool(status.strip()),
    }


def utc_now() -> str:
    """``created_at`` stamp: ISO 8601 in UTC with a ``Z``, second precision."""
    from datetime import UTC, datetime

    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
