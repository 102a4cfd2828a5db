"""The table `lenbench` prints when a run ends: the leaderboard's own figures (MAE, C-index) and
the noise floor as the leaderboard shows it, not only its pessimistic end."""

from __future__ import annotations

import json

from helpers.leaderboard import GOLDEN

from lenbench.cli import _summary


def _golden(name: str) -> dict:
    return json.loads(next((GOLDEN / "toyworld" / "toy" / name).glob("*.json"))
                      .read_text(encoding="utf-8"))


def test_the_summary_shows_the_c_index_and_the_floor_range(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    probe = _golden("mlp_probe")
    floor = _golden("noise_floor")
    floor["metrics"]["noise_floor"] = {"in_sample": 131.0, "leave_one_out": 205.1,
                                       "interval": [124.0, 216.4]}
    dense = json.loads(json.dumps(floor))
    dense["predictor"]["name"] = "dense_floor"
    dense["metrics"]["noise_floor"]["extrapolated"] = {"estimate": 177.3, "ci": [161.1, 194.4]}
    _summary([probe, floor, dense])
    out = capsys.readouterr().err
    assert "C-index" in out and "Kendall" not in out
    c_index = probe["metrics"]["static"]["c_index"]
    line = next(ln for ln in out.splitlines() if "mlp_probe" in ln)
    assert f"{c_index:.2f}" in line
    line = next(ln for ln in out.splitlines() if "noise_floor" in ln)
    assert "131.0 – 205.1" in line and "[124.0, 216.4]" in line
    line = next(ln for ln in out.splitlines() if "dense_floor" in ln)
    assert "177.3" in line and "[161.1, 194.4]" in line and "205.1" not in line
