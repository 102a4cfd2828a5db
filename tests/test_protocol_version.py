"""Every result names the scoring protocol it was computed under; results from an earlier
protocol load, but the leaderboard says so under the section's heading and marks their rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.leaderboard import synthetic_result
from helpers.worlds import CFG, TrainQuantiles, make_world

from lenbench.evaluate import evaluate_predictor, failed_result, noise_floor_result
from lenbench.leaderboard import build_leaderboard
from lenbench.leaderboard.rows import main_legend
from lenbench.leaderboard.table import load_table
from lenbench.results import (
    PROTOCOL_VERSION,
    ResultError,
    load_results,
    validate_result,
)

NOTE = "**Scored under an earlier protocol**"


def _names(board: str) -> list[str]:
    """The predictor cells of the main table."""
    lines = board.split("| Predictor |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [ln.strip("| ").split(" | ")[0] for ln in lines]


def test_every_result_evaluate_writes_carries_the_protocol() -> None:
    world = make_world(2)
    ok = evaluate_predictor(TrainQuantiles(), "tq", {"name": "tq"}, world, CFG, seed=0)
    failed = failed_result(world, "tq", {"name": "tq"}, CFG, 0, RuntimeError("boom"))
    floor = noise_floor_result(world, CFG)
    for r in (ok, failed, floor):
        assert r["protocol_version"] == PROTOCOL_VERSION == 3
    assert validate_result(failed)["protocol_version"] == PROTOCOL_VERSION


def test_a_file_without_the_field_is_protocol_1_and_a_wrong_one_is_refused(tmp_path: Path
                                                                          ) -> None:
    synthetic_result(tmp_path, "old", 0, protocol_version=None)
    (old,), problems = load_results(tmp_path)
    raw = json.loads((tmp_path / old.source).read_text(encoding="utf-8"))
    assert not problems and "protocol_version" not in raw and old.protocol_version == 1
    for bad in ("2", 0, 2.5, True):
        r = {**raw, "protocol_version": bad}
        with pytest.raises(ResultError, match="'protocol_version'"):
            validate_result(r, source="x.json")


def test_a_section_with_an_old_result_says_so_and_marks_its_row(tmp_path: Path) -> None:
    res = tmp_path / "results"
    synthetic_result(res, "old", 0, protocol_version=None)
    synthetic_result(res, "new", 0)
    board = build_leaderboard(res, tmp_path / "board").read_text(encoding="utf-8")
    section = board.split("## toyworld / toy\n\n", 1)[1]
    assert section.startswith(f"{NOTE} (1 of 2 results, marked ‡): these figures were computed "
                              "before the scale-free scheduling score")
    assert board.count(NOTE) == 1
    assert "rerun the section's runs to rescore them." in section.split("\n", 1)[0]
    assert sorted(_names(board)) == ["new", "old ‡"]
    assert "‡ scored under an earlier protocol" in main_legend() and "‡ scored" in board
    table, _ = load_table(res)
    assert dict(zip(table["predictor"], table["protocol_version"])) == {"old": 1,
                                                                        "new": PROTOCOL_VERSION}


def test_a_section_of_current_results_has_no_note_and_no_marker(tmp_path: Path) -> None:
    res = tmp_path / "results"
    synthetic_result(res, "alpha", 0)
    synthetic_result(res, "beta", 0)
    board = build_leaderboard(res, tmp_path / "board").read_text(encoding="utf-8")
    assert NOTE not in board
    assert sorted(_names(board)) == ["alpha", "beta"]
    assert not any("‡" in name for name in _names(board))
