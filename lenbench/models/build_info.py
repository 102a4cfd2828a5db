"""What machine and software built a shipped artifact (toy weights, a world): for its card."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

# the instruction sets that change float results and speed (bfloat16 is fast with AVX-512 BF16 or
# AMX, emulated without): named with every artifact and result made on a CPU
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "fma")


def cpu_description(flags_of_interest: Sequence[str]) -> dict:
    """The CPU's name and which of `flags_of_interest` it has (they change float results)."""
    name, flags = platform.machine(), set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == platform.machine():
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {"name": name, "machine": platform.machine(),
            "flags": [f for f in flags_of_interest if f in flags]}


def package_versions(names: Sequence[str]) -> dict:
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def lenbench_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None
