"""The `lenbench` Hydra app: multirun, failures recorded (or raised), unknown names, user
predictors.

All runs reuse the session cache of the `e2e` fixture (same upstream overrides, same stage keys),
so each is seconds. User predictors live in tests/fixtures/user_predictors (put on PYTHONPATH) with
their YAML in tests/fixtures/user_conf/predictor (put on hydra.searchpath): nothing in lenbench is
edited to run them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers.cli import E2E_UPSTREAM, FIXTURES, REPO, USER_CONF, E2ERun, run_lenbench

from lenbench.results import validate_result

SEARCHPATH = f"hydra.searchpath=[file://{USER_CONF}]"


def _user_env() -> dict:
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(FIXTURES),
                                                      os.environ.get("PYTHONPATH")) if p)}


def _results(results_dir: Path) -> list[dict]:
    return [validate_result(json.loads(p.read_text()), source=str(p))
            for p in sorted(results_dir.rglob("*.json"))]


def _metric_rows(board: str) -> dict[str, str]:
    """Rows of the leaderboard's first metrics table (not the scheduling table), by name."""
    lines = board.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| Predictor | Static MAE"))
    rows = {}
    for ln in lines[start + 2:]:
        if not ln.startswith("| "):
            break
        rows[ln.split(" | ")[0][2:]] = ln
    return rows


def _ok(proc) -> None:
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"


def test_multirun_predictors_by_seeds(e2e: E2ERun, tmp_path):
    proc = run_lenbench("predictor=constant,mlp_probe,bin_classifier", "seed=0,1",
                        *E2E_UPSTREAM, *e2e.paths(tmp_path / "results", tmp_path / "board"),
                        multirun=True)
    _ok(proc)
    results = _results(tmp_path / "results")
    runs = sorted((r["predictor"]["name"], r["seed"]) for r in results
                  if r["predictor"]["name"] != "noise_floor")
    assert runs == [(p, s) for p in ("bin_classifier", "constant", "mlp_probe") for s in (0, 1)]
    assert all(r["status"] == "ok" for r in results)
    assert len({r["config_hash"] for r in results}) == len(results)  # no run overwrote another
    # the seed reaches the predictor: the two mlp_probe fits differ
    mlp = [r for r in results if r["predictor"]["name"] == "mlp_probe"]
    assert mlp[0]["predictions"]["pred"] != mlp[1]["predictions"]["pred"]
    # the leaderboard was rebuilt once at the end, with mean ± std over the two seeds
    board = (tmp_path / "board" / "README.md").read_text()
    rows = _metric_rows(board)
    for name in ("constant", "mlp_probe", "bin_classifier"):
        assert " ± " in rows[name].split(" | ")[1], rows[name]
        assert rows[name].endswith("| 2 |")  # Seeds column
    vals = sorted(r["metrics"]["static"]["mae"] for r in mlp)
    mean, std = (vals[0] + vals[1]) / 2, abs(vals[1] - vals[0]) / 2 ** 0.5
    assert rows["mlp_probe"].split(" | ")[1] == f"{mean:.1f} ± {std:.1f}"



def test_progress_flag_does_not_rename_the_result(e2e: E2ERun, tmp_path):
    """`progress` changes what a run shows, not what it computes: the same result file, one row."""
    for flag in ("true", "false"):
        _ok(run_lenbench("predictor=mlp_probe", *E2E_UPSTREAM, f"progress={flag}",
                         *e2e.paths(tmp_path / "results", tmp_path / "board")))
    files = sorted(p.relative_to(tmp_path / "results").as_posix()
                   for p in (tmp_path / "results").rglob("*.json") if "noise_floor" not in p.parts)
    assert len(files) == 1, files
    assert json.loads((tmp_path / "results" / files[0]).read_text())["predictor"]["params"][
        "progress"] is False  # the rerun overwrote it, and records what it ran with
    assert "mlp_probe" in _metric_rows((tmp_path / "board" / "README.md").read_text())

def test_failing_predictor_is_recorded_and_the_others_written(e2e: E2ERun, tmp_path):
    proc = run_lenbench("predictor=boom,constant", SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"),
                        multirun=True, env=_user_env())
    _ok(proc)
    by_name = {r["predictor"]["name"]: r for r in _results(tmp_path / "results")}
    assert sorted(by_name) == ["boom", "constant", "noise_floor"]
    boom = by_name["boom"]
    assert boom["status"] == "failed"
    assert boom["error"]["type"] == "RuntimeError"
    assert boom["error"]["message"] == "deliberate failure in BoomPredictor.fit"
    assert "boom.py" in boom["error"]["traceback"]
    assert by_name["constant"]["status"] == "ok"
    board = (tmp_path / "board" / "README.md").read_text()
    assert "1 failed" in board and "deliberate failure in BoomPredictor.fit" in board
    assert any(ln.startswith("| constant |") for ln in board.splitlines())


def test_raise_on_error_exits_nonzero(e2e: E2ERun, tmp_path):
    proc = run_lenbench("predictor.suite=[boom,constant]", "eval.raise_on_error=true",
                        SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"), env=_user_env())
    assert proc.returncode != 0
    assert "deliberate failure in BoomPredictor.fit" in proc.stderr
    # the failure itself is still on record; the run stopped there
    names = {r["predictor"]["name"]: r["status"] for r in _results(tmp_path / "results")}
    assert names == {"boom": "failed"}


def test_unknown_predictor_lists_the_available_ones(e2e: E2ERun, tmp_path):
    proc = run_lenbench("predictor=no_such_predictor", *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    assert proc.returncode != 0
    err = proc.stderr
    assert "no_such_predictor" in err
    assert "Available options in 'predictor'" in err
    for name in ("constant", "prompt_length", "mlp_probe", "bin_classifier"):
        assert f"\t{name}\n" in err, err
    assert not (tmp_path / "results").exists()


def test_console_script_lists_the_config_groups():
    script = Path(sys.executable).parent / "lenbench"
    if not script.exists():
        pytest.skip("the lenbench console script is not installed next to this interpreter")
    proc = subprocess.run([str(script), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    groups = dict(ln.strip().split(": ", 1) for ln in proc.stdout.splitlines()
                  if ln.startswith(("predictor: ", "model: ")))
    assert {"constant", "prompt_length", "mlp_probe", "bin_classifier", "suite"} <= set(
        groups["predictor"].split(", "))
    assert "toy_tiny" in groups["model"].split(", ")


def test_user_predictor_runs_through_the_whole_harness(e2e: E2ERun, tmp_path):
    proc = run_lenbench("predictor=knn", "predictor.k=3", SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"), env=_user_env())
    _ok(proc)
    by_name = {r["predictor"]["name"]: r for r in _results(tmp_path / "results")}
    assert sorted(by_name) == ["knn", "noise_floor"]
    knn = by_name["knn"]
    assert knn["status"] == "ok"
    assert knn["predictor"]["target"] == "user_predictors.knn.KNNPredictor"
    assert knn["predictor"]["params"] == {"k": 3}
    assert knn["timings"]["n_parameters"] == 0
    assert len(knn["predictions"]["pred"]) == knn["dataset"]["n_test"]
    # it saw the same cached world as the built-ins, and its k reached the constructor: the
    # median of 3 neighbours is always one of the train lengths
    labels = pd.read_parquet(e2e.cache_dir / "generate" / knn["stage_keys"]["generate"]
                             / "labels.parquet")
    train_lengths = set(labels.loc[labels["split"] == "train", "L"].astype(float))
    assert set(knn["predictions"]["pred"]) <= train_lengths
    board = (tmp_path / "board" / "README.md").read_text()
    assert any(ln.startswith("| knn |") for ln in board.splitlines())


def test_user_predictor_in_the_suite(e2e: E2ERun, tmp_path):
    """Suite members are composed inside the app: they must see the user's searchpath too."""
    proc = run_lenbench("predictor.suite=[constant,knn]", SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"), env=_user_env())
    _ok(proc)
    by_name = {r["predictor"]["name"]: r for r in _results(tmp_path / "results")}
    assert sorted(by_name) == ["constant", "knn", "noise_floor"]
    assert by_name["knn"]["predictor"]["params"] == {"k": 5}
    assert all(r["status"] == "ok" for r in by_name.values())


@pytest.mark.parametrize("override,field", [
    ("features.roles=[middle]", "features.roles"),
    ("+model.toy.n_layer=8", "model.toy"),
])
def test_bad_config_names_the_field(e2e: E2ERun, tmp_path, override, field):
    proc = run_lenbench(*E2E_UPSTREAM, "predictor=bin_classifier", override,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr[-3000:]


def test_bad_constructor_argument_is_recorded_not_fatal(e2e: E2ERun, tmp_path):
    """A suite member whose constructor rejects its config fails alone; the rest still run."""
    proc = run_lenbench("predictor.suite=[constant,prompt_length]", *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    _ok(proc)
    proc = run_lenbench("predictor=constant", "predictor.statistic=mode", *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results2", tmp_path / "board2"))
    _ok(proc)
    by_name = {r["predictor"]["name"]: r for r in _results(tmp_path / "results2")}
    assert by_name["constant"]["status"] == "failed"
    assert by_name["constant"]["error"]["type"] == "ValueError"
    assert "constant.statistic" in by_name["constant"]["error"]["message"]
    assert by_name["noise_floor"]["status"] == "ok"
