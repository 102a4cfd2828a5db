"""The paired interval covers seed variance: with several seeds a side, each bootstrap replicate
redraws the seeds as well as the prompts."""

import numpy as np
import pytest

from lenbench.scoring.comparisons import paired_cell
from lenbench.scoring.metrics import bootstrap_ratio_ci, paired_difference


def _rows(n_prompts=300, per_prompt=2, seed=0):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(n_prompts), per_prompt)
    hardness = rng.gamma(2.0, 50.0, size=n_prompts)[groups]  # shared by every predictor
    return groups, hardness, rng


def test_one_seed_a_side_is_the_prompt_bootstrap():
    groups, hard, rng = _rows()
    a = hard + rng.normal(0, 5, hard.size)
    b = hard + rng.normal(1, 5, hard.size)
    d = paired_difference(a, b, groups)
    diff = a - b
    expected = bootstrap_ratio_ci(np.bincount(groups, weights=diff),
                                  np.bincount(groups).astype(float))
    assert d["ci"] == expected
    assert d["mean"] == pytest.approx(diff.mean())
    # a (1, rows) matrix is one seed, the same as a vector
    assert paired_difference(a[None, :], b, groups)["ci"] == expected


def test_identical_seeds_add_no_width():
    groups, hard, rng = _rows()
    a = hard + rng.normal(0, 5, hard.size)
    b = hard + rng.normal(1, 5, hard.size)
    one = paired_difference(a, b, groups)
    three = paired_difference(np.stack([a, a, a]), np.stack([b, b]), groups)
    assert three["mean"] == pytest.approx(one["mean"])
    assert three["ci"] == pytest.approx(one["ci"])


def test_seed_variance_widens_the_interval():
    """A's seeds differ by ±6 tokens on every row (training variance), its mean is 1.5 below B:
    over prompts alone that is significant; with the seeds redrawn it is not."""
    groups, hard, rng = _rows()
    b = hard + rng.normal(0, 3, hard.size)
    base = b - 1.5 + rng.normal(0, 3, hard.size)
    a = np.stack([base - 6.0, base, base + 6.0])
    seeded = paired_difference(a, b, groups)
    prompts_only = paired_difference(a.mean(axis=0), b, groups)
    assert seeded["mean"] == pytest.approx(prompts_only["mean"])
    assert prompts_only["excludes_zero"]
    assert not seeded["excludes_zero"]
    width = seeded["ci"][1] - seeded["ci"][0]
    assert width > 3 * (prompts_only["ci"][1] - prompts_only["ci"][0])


def test_rows_must_match():
    groups, hard, _ = _rows()
    with pytest.raises(ValueError, match="same rows"):
        paired_difference(np.stack([hard, hard]), hard[:-1], groups)


class _Scored:
    def __init__(self, true, pred, ids):
        self.true, self.pred, self.prompt_id = list(true), list(pred), list(ids)
        self.censored, self.dynamic_error, self.dynamic_steps = None, None, None


def test_the_table_cell_reads_every_seed():
    """paired_cell passes each run as a seed. Seeds that err by 40, 0 and 40 tokens on every
    row (mean 26.7) against a reference erring about 16: over prompts alone +11 is
    significant, but one seed in three is exact, so with the seeds redrawn it is not."""
    groups, hard, rng = _rows()
    true = np.round(hard + 100)
    ref = [_Scored(true, true + rng.normal(0, 20, true.size), groups)]
    seeds = [_Scored(true, true + off, groups) for off in (-40.0, 0.0, 40.0)]
    assert paired_cell(seeds, ref).startswith("+1")
    assert not paired_cell(seeds, ref).startswith("**")
    # one seed a side: the prompts alone exclude 0, but a single fit is never bold
    one = paired_cell([_Scored(true, true + 40.0, groups)], ref)
    assert one.startswith("+2") and one.endswith("°")
    again = [_Scored(true, true + 40.0, groups)] * 2  # two seeds that agree: bold
    assert paired_cell(again, ref * 2).startswith("**+2")
