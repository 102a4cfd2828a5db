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
PROTOCOL_VERSION = 2
PROTOCOL_CHANGES = {2: "the scale-free scheduling score, censored rows in every distribution "
                       "score and in the noise floor, and the full-split audit"}

STATUSES = ("ok", "failed")
KINDS = ("predictor", "reference")
