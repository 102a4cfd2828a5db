"""Each request's remaining-length error at a few listed steps, kept row by row.

The dynamic MAE averages each request's error over all its steps and then over requests; the
table by observed steps averages over the requests still decoding at each listed t. Neither lets
two predictors be compared step by step on the same requests, which is what tells a real
difference at a step from a difference of populations. So a result keeps, for every test row,
its absolute error at each listed t (scored as the dynamic metrics score it: a censored row's
L - t is a lower bound, and a prediction that reaches it has no error), or None where the
request has no scored step at t (it ended before t, or strided features skipped t).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from lenbench.scoring.metrics import censored_error


def step_errors(step_row: ArrayLike, step_t: ArrayLike, lengths: ArrayLike,
                pred_remaining: ArrayLike, steps: Sequence[int],
                censored: ArrayLike | None = None) -> NDArray[np.float64]:
    """(n_rows, len(steps)): |(L - t) - r_t| of each row at each listed t (censored rows as
    `censored_error` scores them), NaN where the row has no scored step at t."""
    row = np.asarray(step_row).reshape(-1).astype(np.int64)
    t = np.asarray(step_t).reshape(-1).astype(np.int64)
    length = np.asarray(lengths).reshape(-1)
    rem = np.asarray(pred_remaining, dtype=np.float64).reshape(-1)
    if not row.size == t.size == rem.size:
        raise ValueError(f"step_errors: step_row ({row.size}), step_t ({t.size}) and "
                         f"pred_remaining ({rem.size}) must have one entry per step")
    cut = np.zeros(length.size, dtype=bool) if censored is None else \
        np.asarray(censored, dtype=bool).reshape(-1)
    if cut.shape != length.shape:
        raise ValueError(f"step_errors: censored has {cut.size} flags for {length.size} rows")
    out = np.full((length.size, len(steps)), np.nan)
    for j, at in enumerate(steps):
        pick = t == int(at)
        r = row[pick]
        err = censored_error(rem[pick], (length[r] - int(at)).astype(np.float64), cut[r])
        out[r, j] = np.abs(err)
    return out


def step_error_record(errors: NDArray[np.float64], steps: Sequence[int]) -> dict[str, list]:
    """The JSON form a result stores: {"t": the listed steps, "error": one list per row, null
    where the row has no scored step at that t}."""
    return {"t": [int(s) for s in steps],
            "error": [[None if np.isnan(v) else float(v) for v in row] for row in errors]}
