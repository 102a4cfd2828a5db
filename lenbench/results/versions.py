"""The version numbers a result carries, and the values its identity fields may take.

Kept apart from the loader and the writer so that both, and the upgrade steps between file
layouts, read the same numbers without importing each other.
"""

from __future__ import annotations

SCHEMA_VERSION = 1  # the file layout; bump only when a reader can no longer load old files
# The scoring rules the figures were computed under; a result without the field is protocol 1.
# Version 2: the scheduling score ranks SJF keys by rank quantiles (scale-free); censored rows are
# scored by every distribution score and by the noise floor; the audit of what was scored
# re-predicts the full scored split with fresh copies of the fitted predictor.
# Version 3: rank scores that censoring does not mislead: Harrell's C over every row replaces
# Kendall tau and Spearman on the uncensored rows in the tables; within +-25% counts only the rows
# the data decide; the MAE on the uncensored rows, the runaway AUCs and the shares of upper
# quantiles at the cap are new. `python -m lenbench.results.rescore` recomputes these figures of
# an older file from its stored predictions.
# Version 4: the scheduling score is the predictor's mean gain over the baseline counted up to the
# oracle's, on the mean latency of all requests (the oracle scores exactly 1); the classes read
# their thresholds from the lengths that ended before the cap, with the capped requests a class of
# their own; the score at several aging weights. `python -m lenbench.rescore_scheduling`
# recomputes the scheduling block of an older file from its stored predictions.
# Version 5: the scheduling score where queues form: the headline is plain SJF (no guard; the
# aging guard is reported at its own weights) at the lowest load of a sweep (0.5-1.2 of the
# estimated saturation rate) at which the oracle cuts the mean latency of all requests by 20% or
# more, with no score where no load does; the sweep's value-of-prediction curves (FCFS, oracle,
# noisy oracles by C-index, prompt-length SJF, the predictor) and the capped class's P99.
PROTOCOL_VERSION = 5
PROTOCOL_CHANGES = {2: "the scale-free scheduling score, censored rows in every distribution "
                       "score and in the noise floor, and the full-split audit",
                    3: "Harrell's C over every row as the rank score, within ±25% counted on "
                       "the rows the data decide, the MAE on uncensored rows and the runaway "
                       "AUCs",
                    4: "the scheduling score on the mean latency of all requests, capped at the "
                       "oracle's (which scores exactly 100%), with classes read from the lengths "
                       "that ended before the cap",
                    5: "the scheduling score with plain SJF at the lowest load where the oracle "
                       "cuts the mean latency by 20% (none where no load does), beside the "
                       "load sweep"}
# The parts of a result whose rules each protocol changed ("metrics" covers "metrics.static",
# "metrics.variants", ...): a part's figures computed under an earlier protocol are still current
# when no later protocol changed that part, so a result is compared part by part.
PROTOCOL_PARTS = {2: ("metrics", "scheduling", "causality", "transfer"),
                  3: ("metrics", "transfer"),
                  4: ("scheduling",),
                  5: ("scheduling",)}


def changed_since(part: str, protocol: int) -> list[int]:
    """The protocols after `protocol`, up to this one, that changed the rules of `part`
    ("metrics.static", "scheduling", ...); [] when its figures are current."""
    def touches(version: int) -> bool:
        parts = PROTOCOL_PARTS.get(version)
        return parts is None or any(part == p or part.startswith(p + ".") for p in parts)

    return [v for v in range(protocol + 1, PROTOCOL_VERSION + 1) if touches(v)]


STATUSES = ("ok", "failed")
KINDS = ("predictor", "reference")
