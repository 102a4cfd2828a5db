"""Reusing a cached features stage that holds more than a run asks for.

The features stage's key is its configuration: the configured roles and poolings plus whatever
the run's predictors declare. A run of one predictor after a whole suite therefore asks for less
than the suite's stage holds, and would redo the teacher-forced pass (an hour on a CPU for a
real world) to store a subset of what is on disk. Predictors read features by role and pooling,
so a stage of the same world whose lists cover the run's, with every other setting equal, serves
the run as its own would.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from lenbench.stages import COMPLETE_MARKER, Stage

log = logging.getLogger(__name__)

LIST_FIELDS = ("roles", "poolings", "step_roles", "step_poolings")  # more is a superset


def covers(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a stage built with `stored` holds everything `wanted` asks for: each list a
    superset, every other setting (stride, batch size) equal."""
    for key, value in wanted.items():
        if key in LIST_FIELDS:
            if not set(value) <= set(stored.get(key) or []):
                return False
        elif stored.get(key) != value:
            return False
    return True


def covering_stage(cache_dir: str | Path, config: dict[str, Any], parent: str) -> Stage | None:
    """A complete features stage of the same labels (`parent`) that covers `config`, the
    smallest such when several do; None where there is none."""
    found = []
    for marker in (Path(cache_dir) / "features").glob(f"*/{COMPLETE_MARKER}"):
        try:
            meta = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        stored = meta.get("config")
        if meta.get("parent") != parent or not isinstance(stored, dict) or \
                not covers(stored, config):
            continue
        stage = Stage(cache_dir, "features", stored, parent=parent)
        if stage.path == marker.parent and stage.done:  # its record is its key: not hand-made
            found.append(stage)
    if not found:
        return None
    best = min(found, key=lambda s: (sum(len(s.config.get(k) or []) for k in LIST_FIELDS),
                                     s.key))
    log.info("features: reusing stage %s, which holds every feature this run needs and more "
             "(%s)", best.key, ", ".join(f"{k} {best.config.get(k)}" for k in LIST_FIELDS))
    return best
