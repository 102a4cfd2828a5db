"""Record what a stored result's predictor reads (`predictor.reads`: the prompt text, the
target's states, the target model), for results written before runs recorded it.

The predictor is built from its stored class and arguments, as the run built it, and its
declared `needs` give the answer (`evaluate.reads_of`, what a run now writes). The leaderboard's
verdict reads it to say which predictors fit in front of an engine whose internals are closed.

    python -m lenbench.results.add_reads leaderboard/results [--dry-run]
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from lenbench.results.store import add_to_results

log = logging.getLogger("lenbench.results.add_reads")


def with_reads(result: dict[str, Any]) -> dict[str, Any] | None:
    """A copy of a predictor's result with `predictor.reads`, or None where it has it already,
    is no predictor's, or its predictor cannot be built here."""
    from hydra.utils import instantiate

    from lenbench.contract.needs import reads_of

    predictor = result.get("predictor") or {}
    if result.get("kind") != "predictor" or "reads" in predictor or not predictor.get("target"):
        return None
    try:
        built = instantiate({"_target_": predictor["target"], "_recursive_": False,
                             "_convert_": "all",
                             **(predictor.get("params") or {})})
    except Exception as exc:  # noqa: BLE001 - a class that moved or an argument that changed
        log.warning("%s: cannot build %s (%s: %s)", predictor.get("name"), predictor["target"],
                    type(exc).__name__, exc)
        return None
    new = json.loads(json.dumps(result))
    new["predictor"]["reads"] = reads_of(built.needs)
    return new


def main(argv: Sequence[str] | None = None) -> int:
    def change(result: dict) -> tuple[dict, str] | None:
        new = with_reads(result)
        return None if new is None else (new, f"reads {new['predictor']['reads']}")

    add_to_results(argv, "python -m lenbench.results.add_reads",
                   "Record what each predictor reads (predictor.reads) in result files written "
                   "before runs recorded it, in place.", change)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
