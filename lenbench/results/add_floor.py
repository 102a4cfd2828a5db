"""Add the extrapolated noise floor to stored noise-floor results, from their stored rows.

    python -m lenbench.results.add_floor leaderboard/results [more folders or files]

A world's noise-floor reference stores the test rows it scored (true lengths, prompt ids,
censored flags). `scoring.noise_floor.extrapolated_floor` reads nothing else, so the single
floor estimate a run now records (`metrics.noise_floor.extrapolated`) is computed here for a
result written before it existed, with the result's bootstrap settings, exactly as the run would
have; a result that has it already is left as it is.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

import numpy as np

from lenbench.results.provenance import utc_now
from lenbench.results.rescore import stored_bootstrap
from lenbench.results.store import add_to_results
from lenbench.scoring.noise_floor import extrapolated_floor

log = logging.getLogger("lenbench.results.add_floor")


def with_extrapolated_floor(result: dict) -> dict | None:
    """A copy of a noise-floor result with its extrapolated floor, or None where it has one
    already or cannot get one."""
    floor = (result.get("metrics") or {}).get("noise_floor")
    preds = result.get("predictions") or {}
    if result.get("kind") != "reference" or not isinstance(floor, dict) \
            or "extrapolated" in floor or not preds.get("prompt_id"):
        return None
    n_boot, ci, seed = stored_bootstrap(result)
    new = json.loads(json.dumps(result))
    new["metrics"]["noise_floor"]["extrapolated"] = extrapolated_floor(
        np.asarray(preds["true"], dtype=np.float64), np.asarray(preds["prompt_id"]),
        np.asarray(preds.get("censored") or [False] * len(preds["true"]), dtype=bool),
        n_boot=n_boot, seed=seed, ci=ci)
    new.setdefault("rescored", {})["noise_floor"] = {
        "at": utc_now(), "added": ["extrapolated"], "from": "predictions (the scored rows)"}
    return new


def main(argv: Sequence[str] | None = None) -> int:
    def change(result: dict) -> tuple[dict, str] | None:
        new = with_extrapolated_floor(result)
        if new is None:
            return None
        est = new["metrics"]["noise_floor"]["extrapolated"]
        return new, ("no prompt with enough samples" if est is None else
                     f"{est['estimate']:.1f} {est['ci']} on {est['n_prompts']} prompts")

    add_to_results(argv, "python -m lenbench.results.add_floor",
                   "Add the extrapolated noise floor (metrics.noise_floor.extrapolated) to "
                   "noise-floor result files, from their stored rows, in place.", change)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
