"""The predictor contract: what a predictor is, what it may read, and what it returns.

The bottom layer of lenbench: these modules import nothing else from lenbench, and everything
that runs, scores or stores predictors builds on them. `predictor.py` is the class a user
subclasses, `needs.py` what it declares, `views.py` the three views it is handed, `features.py`
the names and reader of the target-model features, `labels.py` the label table the views are
built from, `distributions.py` the distributions it may predict, and `instantiate.py` how a
preset becomes a predictor. `lenbench` re-exports the names users import.
"""
