"""Predictors evaluated several at a time in forks, and the reference simulations begun while
the features are computed (lenbench/runtime/predictor_jobs.py, fork_pool.py, sim/warmup.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lenbench.contract.needs import Needs
from lenbench.runtime import fork_pool
from lenbench.runtime.fork_pool import JobDied, run_forked
from lenbench.runtime.predictor_jobs import FailedElsewhere, evaluated, predictor_jobs
from lenbench.runtime.stage_times import recording, timed
from lenbench.sim import memo, warmup
from lenbench.sim.record import scheduling_record
from tests.helpers.cli import E2E_UPSTREAM, run_lenbench
from tests.test_sim_sweep import CFG, world  # noqa: F401, F811 - the fixture

pytestmark = pytest.mark.skipif(not fork_pool.can_fork(), reason="needs fork()")


def _built(*needs: Needs) -> list[tuple[str, dict, SimpleNamespace]]:
    return [(f"p{i}", {}, SimpleNamespace(needs=n)) for i, n in enumerate(needs)]


def test_how_many_predictors_run_at_once(monkeypatch) -> None:
    monkeypatch.setattr(fork_pool, "usable_cores", lambda: 4)
    monkeypatch.setattr("lenbench.runtime.predictor_jobs.usable_cores", lambda: 4)
    three = _built(Needs(), Needs(hidden=("mid",)), Needs(steps=True))
    assert predictor_jobs(0, 1, "cpu", False, three) == 3  # as many as predictors, <= cores
    assert predictor_jobs(0, 2, "cpu", False, three) == 1  # torch's threads hang in a fork
    assert predictor_jobs(2, 2, "cpu", False, three) == 1
    assert predictor_jobs(0, 1, "cuda", False, three) == 1  # a GPU's context: in turn
    assert predictor_jobs(3, 1, "cuda", False, three) == 1
    assert predictor_jobs(0, 1, "cpu", True, three) == 1  # a failure must stop the run at once
    assert predictor_jobs(8, 1, "cpu", False, three) == 3
    assert predictor_jobs(1, 1, "cpu", False, three) == 1
    assert predictor_jobs(0, 1, "cpu", False, three[:1]) == 1
    runs_target = _built(Needs(), Needs(target_model=True))
    assert predictor_jobs(0, 1, "cpu", False, runs_target) == 1  # it shares the model
    assert predictor_jobs(2, 1, "cpu", False, runs_target) == 2  # unless asked
    with pytest.raises(ValueError, match="jobs=-1"):
        predictor_jobs(-1, 1, "cpu", False, three)


def test_forked_jobs_come_back_in_order_with_the_work_they_did() -> None:
    pids = run_forked([lambda i=i: (i, os.getpid()) for i in range(5)], 2,
                      start_order=[4, 3, 2, 1, 0])
    out = list(pids)
    assert [i for i, _ in out] == [0, 1, 2, 3, 4]
    assert os.getpid() not in {pid for _, pid in out} and len({pid for _, pid in out}) <= 2


def test_a_job_whose_process_dies_is_reported_not_waited_for() -> None:
    out = list(run_forked([lambda: "first", lambda: os._exit(3)], 1))
    assert out[0] == "first" and isinstance(out[1], JobDied)


def test_forked_evaluations_keep_their_stage_times_and_failures() -> None:
    def evaluate_one(name, pcfg, predictor):
        with timed(name), timed("fit"):
            pass
        return {"name": name}, (ValueError("bad") if name == "p1" else None)

    built = _built(Needs(), Needs(), Needs(steps=True))
    with recording() as clock:
        with timed("world"):
            pass
        out = list(evaluated(built, evaluate_one, jobs=2))
    assert [r["name"] for r, _ in out] == ["p0", "p1", "p2"]
    assert out[0][1] is None and isinstance(out[1][1], FailedElsewhere)
    stages = [row["stage"] for row in clock.rows()]
    assert stages[0] == "world" and sorted(stages[1:]) == sorted(
        ["p0", "p0 / fit", "p1", "p1 / fit", "p2", "p2 / fit"])
    for name in ("p0", "p1", "p2"):  # each predictor's stages stay together, parent first
        assert stages.index(f"{name} / fit") == stages.index(name) + 1


def _figures(record):
    """A scheduling record without its wall-clock times."""
    if isinstance(record, dict):
        return {k: _figures(v) for k, v in record.items() if k != "wall_s"}
    if isinstance(record, list):
        return [_figures(v) for v in record]
    return record


def test_references_simulated_ahead_leave_each_predictor_only_its_own_rows(world,  # noqa: F811
                                                                          monkeypatch) -> None:
    true, pred, prompt, cut = world
    monkeypatch.setenv("LENBENCH_SIM_WORKERS", "1")
    memo.clear()
    cold = scheduling_record(true, pred, prompt, "mine", CFG, censored=cut)
    n_cold = len(memo.kept())
    memo.clear()
    warm = warmup.start(true, prompt, cut, CFG)
    assert warm.finish() > 0
    n_refs = len(memo.kept())
    again = scheduling_record(true, pred, prompt, "mine", CFG, censored=cut)
    assert _figures(again) == _figures(cold)  # the same figures, whoever simulated them
    # the predictor added only its own rows: the sweep, the headline's other seed, the guard
    assert len(memo.kept()) - n_refs == 3 * 2 + 1 + 3 and n_refs + 10 == n_cold


def test_a_failed_head_start_costs_only_the_head_start(caplog) -> None:
    warm = warmup.start(np.array([1, 2]), np.array([3]), np.array([False]), CFG)  # bad shapes
    assert warm.finish() == 0
    assert "each predictor simulates them itself" in caplog.text


def _comparable(path: Path) -> dict:
    """A result without what differs between two runs of the same work: times, dates, the run's
    config (jobs) and its causality audit (a fresh random draw of rows every run)."""
    r = json.loads(path.read_text())
    for key in ("timings", "created_at", "config", "git", "causality"):
        r.pop(key, None)
    return _figures(r)


def test_predictors_at_once_write_the_results_they_write_in_turn(e2e, tmp_path) -> None:
    runs = {}
    for jobs in ("1", "2"):
        proc = run_lenbench(*E2E_UPSTREAM, *e2e.paths(tmp_path / jobs, tmp_path / f"lb{jobs}"),
                            f"jobs={jobs}", "predictor.suite=[constant,mlp_probe,bin_classifier]",
                            "sim.sweep_seeds=1", "sim.seeds=[0]",
                            f"hydra.run.dir={tmp_path / f'run{jobs}'}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[jobs] = {p.relative_to(tmp_path / jobs): _comparable(p)
                      for p in (tmp_path / jobs).rglob("*.json")}
        if jobs == "2":
            log = (tmp_path / "run2" / "cli.log").read_text()
            assert "evaluating 3 predictors, 2 at a time" in log
    assert len(runs["1"]) == 4 and runs["1"].keys() == runs["2"].keys()
    for name, result in runs["1"].items():
        assert runs["2"][name] == result, name
