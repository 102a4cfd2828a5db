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
PROTOCOL_VERSION = 3
PROTOCOL_CHANGES = {2: "the scale-free scheduling score, censored rows in every distribution "
                       "score and in the noise floor, and the full-split audit",
                    3: "Harrell's C over every row as the rank score, within ±25% counted on "
                       "the rows the data decide, the MAE on uncensored rows and the runaway "
                       "AUCs"}

STATUSES = ("ok", "failed")
KINDS = ("predictor", "reference")
