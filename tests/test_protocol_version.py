"""Every result names the scoring protocol it was computed under; results from an earlier
protocol load, but the leaderboard says so under the section's heading and marks their rows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers.leaderboard import board_text, schedule, synthetic_result
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
    write_result,
)
from lenbench.results.versions import changed_since

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
        assert r["protocol_version"] == PROTOCOL_VERSION == 5
    assert validate_result(failed)["protocol_version"] == PROTOCOL_VERSION


def test_each_part_is_older_only_where_a_later_protocol_changed_its_rules() -> None:
    assert changed_since("metrics.static", 3) == [] and changed_since("scheduling", 3) == [4, 5]
    assert changed_since("metrics.variants", 2) == [3]
    assert changed_since("scheduling", 1) == [2, 4, 5] and changed_since("scheduling", 4) == [5]
    assert changed_since("metrics.static", 4) == []  # protocol 5 changed the scheduling alone
    assert changed_since("scheduling", PROTOCOL_VERSION) == []


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
    board = board_text(build_leaderboard(res, tmp_path / "board"))
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
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    assert NOTE not in board
    assert sorted(_names(board)) == ["alpha", "beta"]
    assert not any("‡" in name for name in _names(board))


# a small, fast simulation of the toy preset's setting
SIM = {"enabled": True, "n_prefill": 1, "n_decode": 2, "max_num_seqs": 8, "n_requests": 300,
       "load_factor": 0.85, "arrival_cv": 2.0, "starvation": "aging", "aging_alpha": 1.0,
       "seeds": [0, 1, 2], "short_threshold": "q50", "long_threshold": "q90"}


def _scheduled(res: Path, name: str, protocol: int, sim: dict) -> None:
    """A synthetic result of `protocol` with a scheduling record of a noisy oracle."""
    synthetic_result(res, name, 0, protocol_version=protocol)
    path = next((res / "toyworld" / "toy" / name).glob("*.json"))
    r = json.loads(path.read_text(encoding="utf-8"))
    true = np.random.default_rng(0).lognormal(3.5, 0.8, 400).round() + 1
    noise = np.random.default_rng(len(name)).normal(0, 0.3, 400)
    r["scheduling"] = schedule(true, true * np.exp(noise), np.full(400, 20), name, sim)
    write_result(path, r)


def _scheduling(board: str) -> tuple[str, list[str]]:
    """The scheduling section's text above its table, and the names in its table."""
    text = board.split("### Scheduling\n\n", 1)[1]
    above, table = text.split("\n| Predictor |", 1)
    rows = table.split("\n\n", 1)[0].splitlines()[2:]
    return above, [ln.strip("| ").split(" | ")[0] for ln in rows]


def test_a_result_whose_scheduling_alone_is_older_is_marked_in_that_table_only(
        tmp_path: Path) -> None:
    """Protocol 4 changed the scheduling score only: a protocol-3 result's static figures are
    current (no mark, no note in the main table), its scheduling row is marked and said to be
    older, and the tidy table gives its scheduling figures their protocol."""
    res = tmp_path / "results"
    _scheduled(res, "current", PROTOCOL_VERSION, SIM)
    _scheduled(res, "older", 3, SIM)
    board = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    assert NOTE not in board.split("### Scheduling", 1)[0]
    assert sorted(_names(board)) == ["current", "older"]
    above, names = _scheduling(board)
    assert above.startswith(f"{NOTE} (1 of 2 predictor results, marked ‡): their scheduling "
                            "figures were computed before the scheduling score on the mean "
                            "latency of all requests")
    assert "older ‡" in names and "current" in names
    table, _ = load_table(res)
    sched = table[table["metric"] == "scheduling.score"]
    assert dict(zip(sched["predictor"], sched["protocol_version"])) == {
        "current": PROTOCOL_VERSION, "older": 3}
    static = table[table["metric"] == "static.mae"]
    assert dict(zip(static["predictor"], static["protocol_version"])) == {
        "current": PROTOCOL_VERSION, "older": 3}


def test_records_of_the_earlier_score_are_not_pooled_with_current_ones(tmp_path: Path) -> None:
    """Two records of the short-request score and one of today's: the table is today's, and the
    two are counted as of an earlier protocol, however many they are."""
    res = tmp_path / "results"
    _scheduled(res, "current", PROTOCOL_VERSION, SIM)
    for name in ("older_a", "older_b"):
        _scheduled(res, name, 3, dict(SIM, score_metric="e2e_mean_short"))
    board = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    above, names = _scheduling(board)
    assert NOTE not in above and [n for n in names if "older" in n] == []
    assert "2 predictor result(s) simulated with another sim configuration or other simulator " \
           "seeds than the one above (2 of them scored under an earlier protocol's scheduling " \
           "score: rescore them with `python -m lenbench.rescore_scheduling`) are not shown." \
           in board
