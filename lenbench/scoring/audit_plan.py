"""How many rows of the scored split the audit of what was scored perturbs, and which.

The audit perturbs a random share of the scored rows and checks that a fresh copy of the fitted
predictor reproduces what was scored on them (lenbench/scoring/audit.py). A sparse leak, one
that reads a row's hidden length on a share q of rows, shows on a perturbed row it touches (whose
length changed), so when the rows are drawn independently of the leak the audit misses it with
probability

    P(miss) = (1 - q)^k        (k: perturbed rows whose length changed)

and catches it with power 1 - (1 - q)^k. For power P the audit needs k >= ln(1 - P) / ln(1 - q):
99 rows for q = 3% and P = 95%, whatever the split's size (drawing without replacement from a
finite split only helps). The rows are traded lengths in pairs, so the draw asks for an even
number: 100.

Cost: the audit predicts the drawn rows once more, so its extra cost is about the drawn share of
the scored rows (of the scored steps, for dynamic methods, which cost per step). The share is
capped at `MAX_EXTRA_COST`; a split too small for the power target at that cost gets as many rows
as the cap allows (never fewer than `MIN_ROWS`), and the result records the power it reached.

The rows come from the audit's own random stream, seeded afresh on every run and recorded: a
predictor cannot know from the run's seed which rows will be checked, and the record lets the
audit be repeated exactly (`audit_scored(..., audit_seed=...)`).
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

import numpy as np

LEAK_SHARE = 0.03  # the sparse leak the audit is sized for: the hidden length read on 3% of rows
POWER_TARGET = 0.95  # the chance of catching that leak that the audit aims for
MAX_EXTRA_COST = 0.25  # the largest share of the scored rows (and steps) the audit re-predicts
MIN_ROWS = 2  # one traded pair, even on a split too small for the cost cap
AUDIT_STREAM = 0x61756474  # spawn key of the audit's random stream ("audt")


def new_audit_seed() -> int:
    """A fresh seed for the audit's random stream (63 bits: exact in any JSON reader's ints)."""
    return secrets.randbits(63)


def audit_rng(audit_seed: int) -> np.random.Generator:
    """The audit's random stream: its own spawn key, so no seeded stream of a run or a predictor
    draws the same numbers."""
    return np.random.default_rng(np.random.SeedSequence(int(audit_seed),
                                                        spawn_key=(AUDIT_STREAM,)))


def rows_for_power(leak_share: float = LEAK_SHARE, power: float = POWER_TARGET) -> int:
    """The fewest perturbed rows that catch a leak on `leak_share` of rows with `power`."""
    return math.ceil(math.log(1.0 - power) / math.log(1.0 - leak_share))


def power_against(rows: int, leak_share: float = LEAK_SHARE) -> float:
    """The chance that `rows` perturbed rows catch a leak on `leak_share` of rows."""
    return 1.0 - (1.0 - leak_share) ** int(rows)


@dataclass
class AuditDraw:
    """The rows the audit perturbs and why there are that many."""

    rows: np.ndarray  # sorted positions in the scored split
    target: int  # the rows the power target asks for (even: lengths are traded in pairs)
    row_budget: int  # the most rows the cost cap allows
    step_budget: float | None  # the most steps it allows (dynamic methods), or None
    limited_by: str  # "power target", "cost cap" or "split size"
    steps_share: float | None  # the drawn rows' share of the split's steps


def draw_rows(steps_per_row: np.ndarray, rng: np.random.Generator, dynamic: bool,
              leak_share: float = LEAK_SHARE, power: float = POWER_TARGET,
              max_extra_cost: float = MAX_EXTRA_COST, n_rows: int | None = None) -> AuditDraw:
    """Rows in a random order until the power target or the cost cap is reached, whichever
    comes first. Rows without steps are never drawn; `dynamic` adds the step budget (a share
    `max_extra_cost` of all steps) to the row budget. `n_rows` asks for that many rows instead,
    whatever they cost (a manual audit, a test)."""
    counts = np.asarray(steps_per_row, dtype=np.int64)
    n, total = len(counts), int(counts.sum())
    if n_rows is not None:
        target, row_budget, step_budget = int(n_rows), n, None
    else:
        needed = rows_for_power(leak_share, power)
        target = needed + needed % 2
        row_budget = max(int(math.floor(max_extra_cost * n + 1e-9)), MIN_ROWS)
        step_budget = max_extra_cost * total if dynamic else None
    order = rng.permutation(np.flatnonzero(counts > 0))
    taken, used, limited_by = [], 0, "split size"
    for row in order:
        if len(taken) >= target:
            limited_by = "power target"
            break
        over_steps = step_budget is not None and used + counts[row] > step_budget
        if len(taken) >= MIN_ROWS and (len(taken) >= row_budget or over_steps):
            limited_by = "cost cap"
            break
        taken.append(int(row))
        used += int(counts[row])
    else:
        if len(taken) >= target:
            limited_by = "power target"
    return AuditDraw(np.sort(np.asarray(taken, dtype=np.int64)), target, row_budget, step_budget,
                     limited_by, used / total if dynamic and total else None)
