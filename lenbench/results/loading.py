"""The one way to read result files: JSON, checked against the schema, upgraded to the current
layout, returned as a typed `Result`.

Everything that reads results (the leaderboard, its tidy table, a notebook) goes through here, so
an older file is upgraded in one place (lenbench/results/upgrade.py) and a broken one is reported
the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lenbench.results.checks import REGENERATE, ResultError
from lenbench.results.model import Result
from lenbench.results.validation import validate_result

__all__ = ["load_result", "load_results", "load_results_from", "read_result"]


def read_result(data: Any, source: str = "<result>") -> Result:
    """The `Result` of one parsed JSON document; ResultError naming `source` and the field when
    it does not follow the schema."""
    return Result.from_mapping(validate_result(data, source=source), source=source)


def load_result(path: str | os.PathLike[str], source: str | None = None) -> Result:
    """The result in the file at `path` (`source`: how messages and `Result.source` name it,
    the path itself by default); ResultError when it is unreadable or off the schema."""
    name = os.fspath(path) if source is None else source
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultError(f"{name}: not readable JSON ({exc}); fix: {REGENERATE}") from exc
    return read_result(data, source=name)


def load_results(results_dir: str | os.PathLike[str]) -> tuple[list[Result], list[str]]:
    """All valid results under ``results_dir`` and one problem line per file that is not.

    A broken file must be visible (the leaderboard lists it) but must not hide the other results.
    Files are read in sorted path order so that everything downstream is deterministic. Each
    result's `source` is its path relative to ``results_dir``.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"results folder '{root}' does not exist; run `lenbench` first or "
                                "point to the folder that holds the result JSON files")
    results: list[Result] = []
    problems: list[str] = []
    for path in sorted(root.rglob("*.json")):
        rel = path.relative_to(root).as_posix()
        if any(part.startswith(".") for part in path.relative_to(root).parts):
            continue  # hidden files and temp files of an interrupted write
        try:
            results.append(load_result(path, source=rel))
        except ResultError as exc:
            problems.append(str(exc))
    return results, problems


def load_results_from(folders: Sequence[str | os.PathLike[str]]
                      ) -> tuple[list[Result], list[str]]:
    """`load_results` over several folders, as one: each result's `source` is its path relative
    to the first folder (`../results/...` for one beside it), so that a link built from the
    first folder reaches every file."""
    first = Path(folders[0])
    results: list[Result] = []
    problems: list[str] = []
    for folder in folders:
        found, bad = load_results(folder)
        prefix = Path(os.path.relpath(Path(folder).resolve(), first.resolve())).as_posix()
        results += found if prefix == "." else \
            [dataclasses.replace(r, source=f"{prefix}/{r.source}") for r in found]
        problems += bad
    return results, problems
