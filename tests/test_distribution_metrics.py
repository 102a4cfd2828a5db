"""Distribution scores against hand-computed values on tiny examples, and the LengthDistribution
reads (quantile, cdf) they rest on."""

from __future__ import annotations

import numpy as np
import pytest

from lenbench.contract.distributions import LengthDistribution
from lenbench.scoring.distribution_metrics import (
    crps,
    distribution_metrics,
    dynamic_distribution_metrics,
    pinball,
    pit,
    pit_histogram,
    row_scores,
    sibling_distributions,
)

LEVELS = (0.1, 0.25, 0.5, 0.75, 0.9)


def test_pinball_by_hand() -> None:
    d = LengthDistribution.from_quantiles(LEVELS, [[10, 20, 30, 40, 50]])
    # L = 35: under-predicted at 10, 20, 30 (q (L - Q)), over at 40, 50 ((1 - q)(Q - L))
    expected = [0.1 * 25, 0.25 * 15, 0.5 * 5, 0.25 * 5, 0.1 * 15]
    assert pinball(d, [35]).tolist() == [pytest.approx(expected)]


def test_interval_coverage_and_width() -> None:
    d = LengthDistribution.from_quantiles(LEVELS, [[10, 20, 30, 40, 50]] * 3)
    s = row_scores(d, [20, 45, 50])  # 50% = [20, 40] (ends included), 80% = [10, 50]
    assert s["coverage_50"].tolist() == [1.0, 0.0, 0.0]
    assert s["coverage_80"].tolist() == [1.0, 1.0, 1.0]
    assert s["width_50"].tolist() == [20.0] * 3 and s["width_80"].tolist() == [40.0] * 3


def test_crps_of_a_point_mass_is_the_absolute_error() -> None:
    point = LengthDistribution.from_quantiles(LEVELS, [[10.0] * 5] * 3)
    assert crps(point, [13, 10, 4]) == pytest.approx([3.0, 0.0, 6.0])
    narrow = LengthDistribution.from_histogram([9.999, 10.001], [[1.0]])
    assert crps(narrow, [13]) == pytest.approx([3.0], abs=1e-3)


def test_crps_of_a_uniform_histogram() -> None:
    # U(0, 10): ∫_0^y (x/10)² dx + ∫_y^10 (x/10 - 1)² dx = (y³ + (10 - y)³) / 300
    u = LengthDistribution.from_histogram([0, 10], [[1.0]] * 4)
    y = np.array([5.0, 0.0, 2.0, 12.0])
    expected = (y[:3] ** 3 + (10 - y[:3]) ** 3) / 300
    # beyond the support: 10/3 over the bin plus 2 tokens of F = 1 against L = 12
    assert crps(u, y) == pytest.approx([*expected, 10 / 3 + 2])
    # the same distribution as two bins, and as dense quantiles (the grid approximation)
    two = LengthDistribution.from_histogram([0, 4, 10], [[0.4, 0.6]] * 4)
    assert crps(two, y) == pytest.approx(crps(u, y))
    levels = np.arange(1, 200) / 200
    dense = LengthDistribution.from_quantiles(levels, [levels * 10] * 4)
    # its tails hold 0.005 of mass at 0.05 and 9.95 instead of spreading it: a tiny difference
    assert crps(dense, y) == pytest.approx(crps(u, y), abs=1e-3)


def test_crps_of_siblings_matches_the_empirical_formula() -> None:
    """The sibling reference on m samples: CRPS = mean|x_i - L| - Σ|x_i - x_j| / (2 m²)."""
    lengths = np.array([10.0, 14.0, 30.0, 11.0, 50.0, 60.0])
    groups = np.array(["a", "a", "a", "a", "b", "b"])
    dist, keep = sibling_distributions(lengths, groups)
    assert keep.all()
    for i in (0, 2, 4):
        others = np.delete(lengths[groups == groups[i]], np.flatnonzero(
            np.flatnonzero(groups == groups[i]) == i))
        m = others.size
        exact = np.abs(others - lengths[i]).mean() - \
            np.abs(others[:, None] - others[None, :]).sum() / (2 * m * m)
        assert crps(dist.take([i]), [lengths[i]])[0] == pytest.approx(exact, abs=0.05)
    # a prompt with one sample has no siblings
    _, keep = sibling_distributions(np.array([5.0, 6.0, 7.0]), np.array(["a", "a", "b"]))
    assert keep.tolist() == [True, True, False]


def test_mid_pit_of_a_known_distribution() -> None:
    u = LengthDistribution.from_histogram([0, 10], [[1.0]] * 3)
    # (F(L - 1) + F(L)) / 2 with F(x) = x / 10: L = 5 -> (0.4 + 0.5) / 2
    assert pit(u, [5, 1, 10]).tolist() == pytest.approx([0.45, 0.05, 0.95])
    point = LengthDistribution.from_quantiles(LEVELS, [[7.0] * 5] * 3)
    assert pit(point, [7, 8, 6]).tolist() == [0.5, 1.0, 0.0]  # the atom is split in half
    assert pit_histogram([0.05, 0.15, 0.15, 1.0], n_bins=10) == \
        [0.25, 0.5, 0, 0, 0, 0, 0, 0, 0, 0.25]


def test_cdf_inverts_the_quantile_function_with_tied_quantiles() -> None:
    # Q: 2 at 0.1, rising to 5 at 0.3, flat to 0.5 (an atom of 0.2 at 5), 9 at 0.9
    d = LengthDistribution.from_quantiles([0.1, 0.3, 0.5, 0.9], [[2, 5, 5, 9]])
    assert d.cdf(3.0)[0] == pytest.approx(0.1 + 0.2 / 3)  # on the 0.1 -> 0.3 segment
    assert d.cdf(5.0)[0] == pytest.approx(0.5) and d.cdf(1.9)[0] == 0.0 and d.cdf(9)[0] == 1.0
    assert d.quantile([0.2, 0.4])[0].tolist() == pytest.approx([3.5, 5.0])


def test_metrics_score_censored_rows_and_bootstrap_by_prompt() -> None:
    d = LengthDistribution.from_quantiles(LEVELS, [[10, 20, 30, 40, 50]] * 4)
    # row 2 is cut at the cap, 100: every row is scored, the censored one included
    m = distribution_metrics(d, [30, 35, 100, 30], ["a", "a", "b", "c"],
                             censored=[False, False, True, False], cap=100, n_boot=200)
    assert (m["n"], m["n_prompts"], m["n_censored"], m["threshold"]) == (4, 3, 1, 100.0)
    # the censored row's 50% interval [20, 40] ends below its cut-off: certainly not covered
    assert m["coverage_50"] == m["coverage_50_high"] == 0.75
    # its CRPS is the integral over [1, 100) of F², known although its length is not
    row = crps(d, [30, 35, 100, 30], 1.0, 100.0)
    assert m["crps"] == pytest.approx(row.mean())
    # its pinball loss is the lower bound q (c - Q): the loss at the cut-off, as Q < c
    assert m["pinball_mean"] == pytest.approx(pinball(d, [30, 35, 100, 30]).mean())
    low, high = m["crps_ci"]
    # three prompts: each replicate's mean lies between the smallest and largest prompt mean
    means = [row[:2].mean(), row[2], row[3]]
    assert min(means) - 1e-9 <= low <= high <= max(means) + 1e-9


def test_a_run_whose_rows_are_all_censored_is_still_scored() -> None:
    # a small run with keep_censored can censor every test row: the point metrics score them
    # as lower bounds, and so do the distribution ones
    dist = LengthDistribution.from_quantiles([0.1, 0.5, 0.9], [[1, 2, 3], [4, 5, 6]])
    censored = np.array([True, True])
    static = distribution_metrics(dist, [2, 5], [0, 1], censored, cap=5)
    assert (static["n"], static["n_censored"]) == (2, 2)
    dyn = dynamic_distribution_metrics([0, 1], [0, 0], [2, 5], dist, [0, 1], censored, cap=5)
    assert (dyn["n_steps"], dyn["n_requests"], dyn["n_censored"]) == (2, 2, 2)
    assert distribution_metrics(dist.take([]), [], [], cap=5) is None
