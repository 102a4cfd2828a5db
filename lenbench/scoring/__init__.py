"""Scoring: from predictions to the numbers in a result.

Point metrics and their intervals (`metrics.py`), distribution scores (`distribution_scores.py`,
`distribution_metrics.py`), the noise floor, paired comparisons, the hygiene of predictions
before they are scored, the audit of what was scored (`audit.py`, with `audit_plan.py`,
`causality.py` and `perturbed_store.py`),
and the content fingerprints that tie a score to the labels and features it was computed on.
"""
