"""Scoring: from predictions to the numbers in a result.

Point metrics and their intervals (`metrics.py`), distribution scores (`distribution_scores.py`,
`distribution_metrics.py`), the noise floor, paired comparisons, the hygiene of predictions
before they are scored, the causality audit of dynamic predictors (`audit.py`, `causality.py`),
and the content fingerprints that tie a score to the labels and features it was computed on.
"""
