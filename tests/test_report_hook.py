"""Predictor.report(): the default, and the harness's check that it is plain JSON."""

from __future__ import annotations

import numpy as np
import pytest

from lenbench import Predictor
from lenbench.evaluate import predictor_report


class Minimal(Predictor):  # Predictor is abstract: fit and predict are required
    def fit(self, train, val=None) -> None:
        pass

    def predict(self, split) -> np.ndarray:
        return np.ones(len(split))


class Reporting(Minimal):
    def __init__(self, report):
        self._report = report

    def report(self):
        return self._report


def test_default_report_is_empty() -> None:
    assert Minimal().report() == {}
    with pytest.raises(TypeError, match="abstract"):
        Predictor()


def test_numpy_values_become_plain_json() -> None:
    got = predictor_report(Reporting({"n": np.int64(3), "rate": np.float32(0.5),
                                      "alpha": np.array([0.25, np.nan]),
                                      "speculative": {"tau": np.float64(2.0)}}), "p")
    assert got == {"n": 3, "rate": 0.5, "alpha": [0.25, None], "speculative": {"tau": 2.0}}
    assert type(got["n"]) is int


def test_bad_reports_name_the_predictor() -> None:
    with pytest.raises(TypeError, match=r"myprobe\.report\(\) returned list"):
        predictor_report(Reporting([1, 2]), "myprobe")
    with pytest.raises(TypeError, match=r"myprobe\.report\(\) is not JSON-serialisable"):
        predictor_report(Reporting({"model": object()}), "myprobe")
