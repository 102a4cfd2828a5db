"""Checking a loaded result against its schema: the error type and the field-level checks
that the result file and its distribution fields share."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


class ResultError(ValueError):
    """A result file that does not follow the schema; the message names the file, field and fix."""


REGENERATE = "re-run that job to regenerate the file, or delete it"


def fail(source: str, field: str, problem: str, fix: str = REGENERATE) -> ResultError:
    return ResultError(f"{source}: field '{field}' {problem}; fix: {fix}")


def get_field(d: Mapping[str, Any], dotted: str, source: str, prefix: str = "") -> Any:
    """``d[a][b]`` for ``dotted`` = "a.b"; ``prefix`` is where ``d`` sits, for the error message."""
    cur: Any = d
    walked = prefix.split(".") if prefix else []
    for part in dotted.split("."):
        walked.append(part)
        if not isinstance(cur, Mapping):
            raise fail(source, ".".join(walked[:-1]), "is not an object")
        if part not in cur:
            raise fail(source, ".".join(walked), "is missing")
        cur = cur[part]
    return cur


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_type(value: Any, field: str, source: str, expected: str, nullable: bool = False) -> None:
    if value is None and nullable:
        return
    ok = {
        "str": isinstance(value, str) and value != "",
        "text": isinstance(value, str),  # may be empty, e.g. str() of a bare exception
        "int": isinstance(value, int) and not isinstance(value, bool),
        "number": is_number(value),
        "bool": isinstance(value, bool),
        "object": isinstance(value, Mapping),
        "list": isinstance(value, list),
    }[expected]
    if not ok:
        shown = json.dumps(value, default=str)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        what = {"str": "a non-empty string", "text": "a string"}.get(expected, f"a {expected}")
        raise fail(source, field, f"should be {what}{' or null' if nullable else ''}, got {shown}")
