"""PNG files of matplotlib figures, rendered beside the work that follows them.

Rendering a figure (matplotlib's draw and PNG encoding) takes most of a leaderboard build and
needs nothing but the figure. Inside `rendering_aside()`, `write_png` forks a process that
renders and writes the file while this one goes on to the next table, at most one per core at a
time; leaving the block waits for every file and raises if one could not be written. Outside
it, or where processes cannot be forked, it renders at once. Either way the file is written
atomically, so a kill mid-render never leaves a broken PNG.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lenbench.runtime.fork_pool import can_fork, usable_cores
from lenbench.stages import atomic_write_bytes

_aside: list[tuple[int, Path]] | None = None  # (pid, path) of the renders under way


def _render(fig: Any, path: Path, savefig: dict[str, Any]) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    atomic_write_bytes(path, buf.getvalue())


def _wait(pid: int, path: Path) -> str | None:
    """Wait for one render; the reason it failed, if it did."""
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"{path.name} (exit status {code})"


def write_png(fig: Any, path: str | Path, **savefig: Any) -> Path:
    """Render `fig` to `path` as PNG (`savefig` keywords: dpi, metadata): in a forked process
    inside `rendering_aside()`, else now."""
    path = Path(path)
    if _aside is None:
        _render(fig, path, savefig)
        return path
    while len(_aside) >= max(usable_cores(), 1):  # one render per core
        pid, done = _aside.pop(0)
        if (failure := _wait(pid, done)) is not None:
            raise RuntimeError(f"could not render {failure}")
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the render, then out, without running the parent's exit handlers
        code = 0
        try:
            _render(fig, path, savefig)
        except BaseException:  # noqa: BLE001 - reported to the parent by the exit status
            traceback.print_exc()
            code = 1
        finally:
            sys.stderr.flush()
            os._exit(code)
    _aside.append((pid, path))
    return path


@contextlib.contextmanager
def rendering_aside() -> Iterator[None]:
    """Render the figures `write_png` gets in forked processes; wait for them all on leaving
    (a render that failed is a RuntimeError naming its file)."""
    global _aside
    if _aside is not None or not can_fork():  # nested, or no fork: render where asked
        yield
        return
    _aside = []
    try:
        yield
    finally:
        running, _aside = _aside, None
        failures = [f for pid, path in running if (f := _wait(pid, path)) is not None]
        if failures and sys.exc_info()[0] is None:
            raise RuntimeError(f"could not render {', '.join(failures)}")
