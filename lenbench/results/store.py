"""Saving a result: at its identity's path, never over other figures, without the paths of the
machine that made it.

A rerun of the same config on the same labels refreshes its own file when it scored the same
figures. When the figures differ (another library version, another thread count), the file
already there is kept and the new result is written beside it, named after its figures, with a
log line saying so: a result, published ones included, is never replaced without a trace. The
leaderboard shows the newer of the two (`build_rows` keeps the newest result per seed).

Paths are stored as the reader can use them: relative to the folder lenbench was started from
when inside it, `~/...` under the home folder, else `<local>/<name>`, so a committed result
names no folder of the machine that made it. No figure and no identity depends on them: the
config hash leaves the `paths` group out.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from lenbench.results import json_safe, result_path, write_result

__all__ = ["figures_digest", "portable_paths", "save_result"]

log = logging.getLogger(__name__)
LOCAL = "<local>"


def _portable(path: Path, base: Path, home: Path) -> str:
    for root, prefix in ((base, ""), (home, "~/")):
        try:
            rel = path.relative_to(root).as_posix()
        except ValueError:
            continue
        return (prefix + rel) if rel != "." else (prefix.rstrip("/") or ".")
    return f"{LOCAL}/{path.name}"


def portable_paths(obj: Any, base: str | os.PathLike[str] | None = None) -> Any:
    """`obj` with every absolute path made portable: a value that is a path becomes relative
    to `base` (default: the current folder), `~/...` or `<local>/<name>`; inside longer text (a
    traceback) the prefixes of `base`, the home folder and the Python installation are cut."""
    base_path = Path(base or os.getcwd()).resolve()
    home = Path.home().resolve()
    prefixes = [(f"{base_path}{os.sep}", ""), (f"{home}{os.sep}", "~/"),
                (f"{Path(sys.prefix).resolve()}{os.sep}", "<python>/"),
                (f"{Path(sys.base_prefix).resolve()}{os.sep}", "<python>/")]

    def text(value: str) -> str:
        if os.path.isabs(value) and "\n" not in value and not value.startswith("//"):
            return _portable(Path(os.path.normpath(value)), base_path, home)
        for prefix, replacement in prefixes:
            if prefix in value:
                value = value.replace(prefix, replacement)
        return value

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return text(value)
        if isinstance(value, Mapping):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [walk(v) for v in value]
        return value

    return walk(obj)


def figures_digest(result: Mapping[str, Any]) -> str:
    """8 hex digits of what a result scored (its metrics, those of its transfer set and its
    status), not of when or how fast: two runs that scored alike have the same digest."""
    scored = {"status": result.get("status"), "metrics": result.get("metrics"),
              "transfer": (result.get("transfer") or {}).get("metrics")}
    text = json.dumps(json_safe(scored), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]


def _existing_digest(path: Path) -> str | None:
    """The figures digest of the result at `path`; None when it holds no figures to keep (a
    failed run, an unreadable file)."""
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(old, Mapping) or old.get("status") != "ok":
        return None
    return figures_digest(old)


def _mae(result: Mapping[str, Any] | None) -> str:
    static = ((result or {}).get("metrics") or {}).get("static") or {}
    mae = static.get("mae")
    return f"{mae:.2f}" if isinstance(mae, int | float) else "none"


def save_result(result: Mapping[str, Any], results_dir: str | os.PathLike[str],
                base: str | os.PathLike[str] | None = None) -> Path:
    """Write `result` (paths made portable) at its identity's path under `results_dir`, or
    beside the file there when that one holds other figures; return the path written."""
    result = portable_paths(result, base)
    path = result_path(results_dir, result["dataset"]["name"], result["model"]["name"],
                       result["predictor"]["name"], result["config_hash"],
                       (result.get("fingerprints") or {}).get("labels"))
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        kept = _existing_digest(path)
        digest = figures_digest(result)
        if kept is not None and kept != digest:
            beside = path.with_name(f"{path.stem}.{digest}.json")
            old = json.loads(path.read_text(encoding="utf-8"))
            log.warning("%s already holds other figures for this run's identity (static MAE %s "
                        "there, %s now): it is kept, and this run is written beside it as %s "
                        "(the leaderboard shows the newer)", path, _mae(old), _mae(result),
                        beside.name)
            path = beside
    return write_result(path, result)


def result_files(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Every result file among `paths` (files, or folders searched recursively), in order,
    without the hidden temporary files an interrupted write leaves; a path that does not exist
    is a FileNotFoundError naming it."""
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p}: no such file or folder")
        out += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    return [p for p in out if not p.name.startswith(".")]


def add_to_results(argv: Sequence[str] | None, prog: str, description: str,
                   change: Callable[[dict[str, Any]], tuple[dict[str, Any], str] | None]
                   ) -> int:
    """The command line of a tool that adds figures to stored result files in place: each file
    among the paths given is read, `change` returns the new result and a line to log (None:
    leave the file as it is), and the file is rewritten unless --dry-run. Returns how many
    files changed (or would)."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("paths", nargs="+", help="result files or folders of them")
    parser.add_argument("--dry-run", action="store_true", help="report, write nothing")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        files = result_files(args.paths)
    except FileNotFoundError as exc:
        parser.error(str(exc))
    changed = 0
    for path in files:
        found = change(json.loads(path.read_text(encoding="utf-8")))
        if found is None:
            continue
        changed += 1
        log.info("%s: %s", path, found[1])
        if not args.dry_run:
            write_result(path, found[0])
    return changed
