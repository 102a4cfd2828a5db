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
from helpers.leaderboard import board_text

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
    # each run draws its own audit stream
    audited = [r["causality"]["audit_seed"] for r in results
               if r["predictor"]["name"] != "noise_floor"]
    assert len(set(audited)) == len(audited) == 6
    # the seed reaches the predictor: the two mlp_probe fits differ
    mlp = [r for r in results if r["predictor"]["name"] == "mlp_probe"]
    assert mlp[0]["predictions"]["pred"] != mlp[1]["predictions"]["pred"]
    # the leaderboard was rebuilt once at the end, with mean ± std over the two seeds
    board = board_text(tmp_path / "board" / "README.md")
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
    assert "mlp_probe" in _metric_rows(board_text(tmp_path / "board" / "README.md"))

def test_failing_predictor_is_recorded_and_the_others_written(e2e: E2ERun, tmp_path):
    proc = run_lenbench("predictor=boom,constant", SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"),
                        multirun=True, env=_user_env())
    assert proc.returncode == 1, proc.stderr[-3000:]
    # the sweep ends with one line per job that failed, naming the predictor and its error
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("lenbench: job ")]
    assert "boom (RuntimeError: deliberate failure in BoomPredictor.fit)" in line, line
    by_name = {r["predictor"]["name"]: r for r in _results(tmp_path / "results")}
    assert sorted(by_name) == ["boom", "constant", "noise_floor"]
    boom = by_name["boom"]
    assert boom["status"] == "failed"
    assert boom["error"]["type"] == "RuntimeError"
    assert boom["error"]["message"] == "deliberate failure in BoomPredictor.fit"
    assert "boom.py" in boom["error"]["traceback"]
    assert by_name["constant"]["status"] == "ok"
    board = board_text(tmp_path / "board" / "README.md")
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
    board = board_text(tmp_path / "board" / "README.md")
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
    # one audit stream for the run: its predictors are checked on the same changed rows
    audits = [by_name[n]["causality"] for n in ("constant", "knn")]
    assert audits[0]["audit_seed"] == audits[1]["audit_seed"]
    assert audits[0]["cut_steps"] == audits[1]["cut_steps"]


@pytest.mark.parametrize("override,field", [
    ("features.roles=[middle]", "features.roles"),
    ("+model.toy.n_layer=8", "model.toy"),
])
def test_bad_config_names_the_field(e2e: E2ERun, tmp_path, override, field):
    proc = run_lenbench(*E2E_UPSTREAM, "predictor=bin_classifier", override,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"))
    assert proc.returncode != 0
    assert field in proc.stderr, proc.stderr[-3000:]


def _lenbench_lines(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("lenbench: ")]


def test_a_constructor_that_refuses_its_arguments_stops_before_the_world(tmp_path):
    """Constructors run while the config is checked: a ValueError there (`k=0`) is one line and
    exit status 2, before any stage is built or any result written."""
    cache = tmp_path / "cache"
    proc = run_lenbench("predictor=constant", "predictor.statistic=mode",
                        f"paths.cache_dir={cache}", f"paths.results_dir={tmp_path / 'results'}",
                        timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    first, last = _lenbench_lines(proc)
    assert first.startswith("lenbench: predictor constant could not be built: ValueError: ")
    assert "constant.statistic" in first and "stopped before any model work" in last
    proc = run_lenbench("predictor=knn_defaults", "predictor.k=0", SEARCHPATH,
                        f"paths.cache_dir={cache}", f"paths.results_dir={tmp_path / 'results'}",
                        env=_user_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _lenbench_lines(proc)[0] == ("lenbench: predictor knn could not be built: "
                                        "ValueError: knn.k must be >= 1")
    assert sorted(p.name for p in cache.iterdir()) == ["hydra"]  # no stage was built
    assert not (tmp_path / "results").exists()


def test_an_outside_predictor_takes_any_constructor_argument(e2e: E2ERun, tmp_path):
    """The preset lists no `k`: `predictor.k=3` still reaches the constructor (a class outside
    lenbench, its YAML found through hydra.searchpath)."""
    proc = run_lenbench("predictor=knn_defaults", "predictor.k=3", SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"), env=_user_env())
    _ok(proc)
    knn = {r["predictor"]["name"]: r for r in _results(tmp_path / "results")}["knn"]
    assert knn["status"] == "ok" and knn["predictor"]["params"] == {"k": 3}


def test_a_misspelt_predictor_argument_names_the_ones_it_takes(tmp_path):
    proc = run_lenbench("predictor=knn_defaults", "predictor.kk=3", SEARCHPATH,
                        f"paths.cache_dir={tmp_path / 'cache'}", env=_user_env(), timeout=120)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert _lenbench_lines(proc) == [
        "lenbench: predictor.kk: not an argument of KNNPredictor (it takes k)",
        "lenbench: stopped before any model work (debug=true shows the traceback)"]


def test_a_predictor_failing_at_predict_time_fails_the_run_after_the_others(e2e: E2ERun,
                                                                             tmp_path):
    proc = run_lenbench("predictor.suite=[boom_predict,constant]", SEARCHPATH, *E2E_UPSTREAM,
                        *e2e.paths(tmp_path / "results", tmp_path / "board"), env=_user_env())
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = proc.stderr.strip().splitlines()[-1]
    assert summary.startswith("lenbench: 1 of 3 results failed: boom_predict (RuntimeError: "
                              "deliberate failure in BoomPredictor.predict)"), summary
    by_name = {r["predictor"]["name"]: r["status"] for r in _results(tmp_path / "results")}
    assert by_name == {"boom_predict": "failed", "constant": "ok", "noise_floor": "ok"}
    board = board_text(tmp_path / "board" / "README.md")
    assert any(ln.startswith("| constant |") for ln in board.splitlines())
    assert "deliberate failure in BoomPredictor.predict" in board


def test_a_run_writes_to_the_users_folders_not_the_published_leaderboard(e2e: E2ERun,
                                                                           tmp_path):
    """Without paths.*, results and the leaderboard go to results/ and leaderboard-local/ of
    the folder lenbench is started from; leaderboard/ is written only when publishing."""
    proc = run_lenbench("predictor=constant", *E2E_UPSTREAM, f"paths.cache_dir={e2e.cache_dir}",
                        cwd=tmp_path)
    _ok(proc)
    assert sorted(p.parent.name for p in (tmp_path / "results").rglob("*.json")) == [
        "constant", "noise_floor"]
    assert (tmp_path / "leaderboard-local" / "README.md").is_file()
    assert not (tmp_path / "leaderboard").exists()


def test_the_default_folders_are_ignored_and_publishing_is_explicit():
    from hydra import compose, initialize_config_dir

    from lenbench.cli import CONF_DIR

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        default = compose("config").paths
        publish = compose("config", overrides=["paths=publish"]).paths
    assert (default.results_dir, default.leaderboard_dir) == ("results", "leaderboard-local")
    assert (publish.results_dir, publish.leaderboard_dir) == ("leaderboard/results", "leaderboard")
    ignored = subprocess.run(["git", "-C", str(REPO), "check-ignore", "--no-index",
                              f"{default.results_dir}/w/m/p/x.json",
                              f"{default.leaderboard_dir}/README.md"],
                             capture_output=True, text=True, check=False)
    assert len(ignored.stdout.splitlines()) == 2, ignored
