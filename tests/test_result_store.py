"""Saving a result: never over other figures, and without the paths of the machine that made it
(lenbench/results/store.py)."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from helpers.cli import REPO

from lenbench.results.store import figures_digest, portable_paths, save_result


def _result(mae: float, status: str = "ok", **config) -> dict:
    return {"status": status, "dataset": {"name": "toyworld"}, "model": {"name": "toy"},
            "predictor": {"name": "knn"}, "config_hash": "abcdef012345",
            "fingerprints": {"labels": "fbfa23c61b326639"},
            "metrics": None if status == "failed" else {"static": {"mae": mae}},
            "timings": {"fit_s": mae / 100}, "config": {"paths": config}}


def test_paths_are_stored_relative_to_the_run_folder_home_or_not_at_all(tmp_path):
    home = Path.home()
    stored = portable_paths({"paths": {"cache_dir": str(tmp_path / ".cache" / "lenbench"),
                                       "results_dir": str(tmp_path),
                                       "leaderboard_dir": str(home / "boards" / "mine"),
                                       "elsewhere": "/srv/shared/cache"},
                             "relative": "results", "number": 3.5, "names": ["org/model"],
                             "traceback": f'File "{tmp_path}/pkg/mod.py", line 3\n'},
                            base=tmp_path)
    assert stored == {"paths": {"cache_dir": ".cache/lenbench", "results_dir": ".",
                                "leaderboard_dir": "~/boards/mine",
                                "elsewhere": "<local>/cache"},
                      "relative": "results", "number": 3.5, "names": ["org/model"],
                      "traceback": 'File "pkg/mod.py", line 3\n'}


def test_a_rerun_with_the_same_figures_refreshes_its_own_file(tmp_path):
    first = save_result(_result(12.5), tmp_path / "results", base=tmp_path)
    again = _result(12.5)
    again["timings"]["fit_s"] = 9.0  # how fast is not what was scored
    second = save_result(again, tmp_path / "results", base=tmp_path)
    assert first == second
    assert list((tmp_path / "results").rglob("*.json")) == [first]
    assert json.loads(first.read_text())["timings"]["fit_s"] == 9.0


def test_other_figures_for_the_same_identity_are_written_beside(tmp_path, caplog):
    kept = save_result(_result(12.5), tmp_path / "results", base=tmp_path)
    before = kept.read_bytes()
    with caplog.at_level(logging.WARNING, logger="lenbench.results.store"):
        beside = save_result(_result(13.0), tmp_path / "results", base=tmp_path)
    assert beside != kept and beside.parent == kept.parent
    assert beside.name == f"{kept.stem}.{figures_digest(_result(13.0))}.json"
    assert kept.read_bytes() == before  # the earlier figures are untouched
    assert json.loads(beside.read_text())["metrics"]["static"]["mae"] == 13.0
    [line] = [r.getMessage() for r in caplog.records]
    assert kept.name in line and beside.name in line and "12.50" in line and "13.00" in line
    # the same figures a third time land on the file that holds them, not a third one
    assert save_result(_result(13.0), tmp_path / "results", base=tmp_path) == beside
    assert len(list((tmp_path / "results").rglob("*.json"))) == 2


def test_a_failure_never_replaces_figures_but_figures_replace_a_failure(tmp_path):
    ok = save_result(_result(12.5), tmp_path / "r1", base=tmp_path)
    failed = save_result(_result(0, status="failed"), tmp_path / "r1", base=tmp_path)
    assert failed != ok and json.loads(ok.read_text())["status"] == "ok"
    first = save_result(_result(0, status="failed"), tmp_path / "r2", base=tmp_path)
    second = save_result(_result(12.5), tmp_path / "r2", base=tmp_path)
    assert first == second and json.loads(second.read_text())["status"] == "ok"


def test_a_saved_result_names_no_folder_of_this_machine(tmp_path):
    path = save_result(_result(12.5, cache_dir=str(tmp_path / ".cache"),
                                      results_dir="/srv/elsewhere/results"),
                       tmp_path / "results", base=tmp_path)
    assert json.loads(path.read_text())["config"]["paths"] == {
        "cache_dir": ".cache", "results_dir": "<local>/results"}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def test_no_committed_result_holds_an_absolute_path():
    files = sorted((REPO / "leaderboard" / "results").rglob("*.json"))
    files += sorted((REPO / "tests" / "data").rglob("*.json"))
    assert files
    found = [(f.relative_to(REPO).as_posix(), s) for f in files
             for s in _strings(json.loads(f.read_text(encoding="utf-8")))
             if os.path.isabs(s) or str(REPO) in s or str(Path.home()) + os.sep in s]
    assert found == []
