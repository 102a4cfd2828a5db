"""The gain over the constant, split into the rows that ended and the censored rows."""

from __future__ import annotations

import numpy as np

from lenbench.results.model import Predictions
from lenbench.scoring.comparisons import gain_split, row_errors


def _runs(pred, true, censored, ids):
    return [Predictions(list(true), list(pred), prompt_id=list(ids), censored=list(censored))]


def test_the_two_parts_add_up_to_the_gain_and_fall_where_the_gain_was_made():
    rng = np.random.default_rng(0)
    n = 200
    true = rng.integers(20, 700, n).astype(float)
    censored = rng.random(n) < 0.25
    true[censored] = 768.0
    ids = [f"p{i // 2}" for i in range(n)]
    const = _runs(np.full(n, 300.0), true, censored, ids)
    # perfect on the rows that ended, the constant's guess on the censored ones
    pred = np.where(censored, 300.0, true)
    ended, capped = gain_split(_runs(pred, true, censored, ids), const)
    whole = row_errors(const)[0].mean() - row_errors(_runs(pred, true, censored, ids))[0].mean()
    assert abs(ended + capped - whole) < 1e-9
    assert capped == 0 and ended > 0
    # at the cap on the censored rows: their error (a lower bound) vanishes, a gain of its own
    pred2 = np.where(censored, 768.0, 300.0)
    ended2, capped2 = gain_split(_runs(pred2, true, censored, ids), const)
    assert ended2 == 0 and capped2 > 0


def test_no_split_where_the_rows_differ_or_censoring_is_not_recorded():
    true = np.array([10.0, 20.0, 30.0])
    ids = ["a", "b", "c"]
    const = _runs(np.full(3, 20.0), true, [False] * 3, ids)
    assert gain_split(_runs(true, true, [False] * 3, ["a", "b", "d"]), const) is None
    bare = [Predictions(list(true), list(true), prompt_id=ids)]
    assert gain_split(bare, const) is None
