"""Older result files brought up to the current layout: every upgrade in one place, one step per
change of the layout, so that files of every age load into the same `Result`.

Schema 1 grew by adding fields, and its files do not record which revision wrote them, so each
step is known by the field it added: it fills that field in a file that lacks it and leaves a
file that has it as it is. The steps run oldest first on every schema-1 file (a file may have a
later field and lack an earlier one: a hand-written fixture, a failed run). A change that old
readers could not follow bumps SCHEMA_VERSION and adds the step from the old version to the new
one to `SCHEMA_STEPS`; none has been needed yet.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from lenbench.results.versions import SCHEMA_VERSION

Step = Callable[[dict[str, Any]], dict[str, Any]]


def add_report(d: dict[str, Any]) -> dict[str, Any]:
    """Files from before predictors reported figures about themselves (`Predictor.report()`)
    have no `report`: nothing was reported."""
    if "report" not in d:
        d["report"] = {}
    return d


def add_fingerprints(d: dict[str, Any]) -> dict[str, Any]:
    """Files from before the data scored was fingerprinted have no `fingerprints` (nor row
    identities in `predictions`, nor an audit): null, so their rows are never paired with
    another result's or taken for rows of the same labels."""
    if "fingerprints" not in d:
        d["fingerprints"] = None
    return d


def add_protocol_version(d: dict[str, Any]) -> dict[str, Any]:
    """Files from before results named their scoring protocol were scored under protocol 1."""
    if "protocol_version" not in d:
        d["protocol_version"] = 1
    return d


# The revisions of schema 1, oldest first.
SCHEMA_1_STEPS: tuple[Step, ...] = (add_report, add_fingerprints, add_protocol_version)
# schema_version n -> the step from n to n + 1.
SCHEMA_STEPS: dict[int, Step] = {}


def upgrade(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `data` in the current layout (`data` itself is left as it is)."""
    d = dict(data)
    version = d["schema_version"]
    if version == 1:
        for step in SCHEMA_1_STEPS:
            d = step(d)
    while version < SCHEMA_VERSION:
        d = SCHEMA_STEPS[version](d)
        version += 1
        d["schema_version"] = version
    return d
