"""The dtype parity report: identical samples, where they part, and the length distributions."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lenbench.worlds.parity import first_difference, parity_report


def _labels(lengths, tokens=None, finish=None) -> pd.DataFrame:
    n = len(lengths)
    return pd.DataFrame({
        "prompt_id": [f"p{i // 2}" for i in range(n)], "sample_idx": [i % 2 for i in range(n)],
        "L": lengths,
        "output_token_ids": tokens or [list(range(int(v))) for v in lengths],
        "finish_reason": finish or ["stop"] * n})


def test_first_difference():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_identical_labellings():
    a = _labels([5, 7, 9, 11])
    report = parity_report(a, a.copy())
    assert report["identical"] == 4 and report["same_L"] == 4
    assert report["median_first_difference"] is None
    assert report["ks"]["p_value"] == pytest.approx(1.0)
    assert report["paired"]["mean_L_difference"] == 0 and report["paired"]["ci95"] == [0, 0]
    assert report["paired"]["wilcoxon_p_value"] is None


def test_shifted_distribution_is_detected():
    rng = np.random.default_rng(0)
    short = rng.integers(10, 60, 200).tolist()
    long = (np.array(short) + 80).tolist()
    report = parity_report(_labels(short), _labels(long, finish=["length"] * 200))
    assert report["identical"] == 0 and report["both_censored"] == 0
    assert report["ks"]["p_value"] < 1e-6 and report["mann_whitney"]["p_value"] < 1e-6
    assert report["reference"]["eos_share"] == 1.0 and report["other"]["eos_share"] == 0.0
    assert report["other"]["mean_L"] == pytest.approx(report["reference"]["mean_L"] + 80)
    assert report["paired"]["mean_L_difference"] == pytest.approx(80)
    assert report["paired"]["ci95"] == pytest.approx([80, 80])


def test_the_paired_interval_is_over_prompts():
    """Two prompts shift by +10 and -10 on both samples: mean 0, an interval that spans both."""
    a = _labels([50, 50, 50, 50])
    b = _labels([60, 60, 40, 40])
    paired = parity_report(a, b)["paired"]
    assert paired["mean_L_difference"] == 0 and paired["n_prompts"] == 2
    assert paired["ci95"][0] == pytest.approx(-10) and paired["ci95"][1] == pytest.approx(10)


def test_samples_cut_at_the_cap_on_both_sides_are_counted():
    a = _labels([5, 9, 9], finish=["stop", "length", "length"])
    b = _labels([5, 9, 7], finish=["stop", "length", "stop"])
    report = parity_report(a, b)
    assert report["same_L"] == 2 and report["both_censored"] == 1


def test_only_common_rows_are_compared():
    a, b = _labels([5, 7, 9, 11]), _labels([5, 7])
    assert parity_report(a, b)["n_samples"] == 2
    with pytest.raises(ValueError, match="share no"):
        parity_report(a, _labels([3]).assign(prompt_id="other"))
