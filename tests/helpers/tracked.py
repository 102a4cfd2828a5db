"""The repository's tracked data files as a test session found them: no test may write into
them (every output of a test belongs in a temporary folder; tests/conftest.py checks at the end
of the session)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helpers.cli import REPO

# where a run or a test could write by mistake: the published leaderboard, the shipped worlds,
# the test data
GUARDED = ("leaderboard", "lenbench/worlds", "tests/data")


def tracked_state(repo: Path = REPO, folders: tuple[str, ...] = GUARDED
                  ) -> dict[str, tuple[int, int]] | None:
    """(mtime in ns, size) of every tracked data file under `folders` (code aside: it is
    edited, not written by runs); None outside a git checkout."""
    try:
        listed = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--", *folders],
                                capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    state = {}
    for name in listed.decode().split("\0"):
        path = repo / name
        if name and not name.endswith(".py") and path.is_file():
            stat = path.stat()
            state[name] = (stat.st_mtime_ns, stat.st_size)
    return state


def changed_since(before: dict[str, tuple[int, int]] | None, repo: Path = REPO,
                  folders: tuple[str, ...] = GUARDED) -> list[str]:
    """The tracked files under `folders` written, removed or added since `before`."""
    if before is None:
        return []
    after = tracked_state(repo, folders) or {}
    return sorted(name for name in before.keys() | after.keys()
                  if before.get(name) != after.get(name))
