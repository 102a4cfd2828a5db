"""A run says where its wall time went, stage by stage (lenbench/runtime/stage_times.py): the
figures a user needs to plan reproducing a leaderboard on their own machine."""

from __future__ import annotations

import json
import time

from helpers.cli import E2ERun

from lenbench.runtime.stage_times import StageClock, readable, recording, timed


def test_nested_stages_are_listed_parent_first_with_their_depth_and_share() -> None:
    with recording() as clock:
        with timed("world"):
            with timed("labels"):
                time.sleep(0.02)
            with timed("features"):
                time.sleep(0.04)
        with timed("probe"), timed("fit"):
            time.sleep(0.01)
    rows = clock.rows()
    assert [(r["stage"], r["depth"]) for r in rows] == [
        ("world", 0), ("world / labels", 1), ("world / features", 1), ("probe", 0),
        ("probe / fit", 1)]
    sec = {r["stage"]: r["seconds"] for r in rows}
    assert sec["world / labels"] >= 0.02 and sec["world / features"] >= 0.04
    assert sec["probe / fit"] >= 0.01
    assert sec["world"] >= sec["world / labels"] + sec["world / features"]
    assert sec["probe"] >= sec["probe / fit"]
    lines = clock.table().splitlines()
    assert len(lines) == 5 and lines[1].endswith("%    labels") and lines[3].endswith("%  probe")
    assert 0 < sum(r["share"] for r in rows if r["depth"] == 0) <= 1.0


def test_timing_outside_a_recording_records_nothing_and_recordings_nest() -> None:
    with timed("nowhere") as lap:  # measured, though nothing records it
        time.sleep(0.01)
    assert lap.seconds >= 0.01
    with recording() as outer:
        with timed("a"), recording() as inner, timed("b"):
            pass
        with timed("c"):
            pass
    assert [r["stage"] for r in inner.rows()] == ["b"]
    assert [r["stage"] for r in outer.rows()] == ["a", "c"]


def test_a_stage_that_raises_is_still_timed(tmp_path) -> None:
    clock = StageClock()
    try:
        with clock.timed("fit"):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    path = clock.write(tmp_path, overrides=["seed=1"])
    saved = json.loads(path.read_text())
    assert [s["stage"] for s in saved["stages"]] == ["fit"]
    assert saved["overrides"] == ["seed=1"] and saved["total_seconds"] >= 0


def test_times_read_as_a_person_reads_them() -> None:
    assert [readable(s) for s in (4.3, 65, 3599, 3725)] == ["4.3s", "1m05s", "59m59s", "1h02m"]


def test_a_run_keeps_its_stage_times_next_to_its_log(e2e: E2ERun) -> None:
    """The default suite's run: every stage of its world and of each predictor is timed."""
    assert "where the time went" in e2e.proc.stdout + e2e.proc.stderr
    ours = [json.loads(p.read_text()) for p in (e2e.cache_dir / "hydra").rglob("stage_times.json")]
    mine = f"paths.results_dir={e2e.results_dir}"
    ours = [r for r in ours if any(o.lstrip("+") == mine for o in r["overrides"])]
    assert len(ours) == 1
    record = ours[0]
    sec = {s["stage"]: s["seconds"] for s in record["stages"]}
    for stage in ("world", "world / promptset", "world / model", "world / labels",
                  "world / features"):
        assert stage in sec, sorted(sec)
    for name in ("constant", "prompt_length", "mlp_probe", "bin_classifier"):
        for part in ("fit", "predict", "audit", "simulator"):
            assert f"{name} / {part}" in sec, sorted(sec)
        parts = sum(v for k, v in sec.items() if k.startswith(f"{name} / "))
        assert parts <= sec[name] + 1e-3
    assert "mlp_probe / predict_remaining" in sec and "constant / predict_remaining" not in sec
    assert "noise_floor" in sec
    top = sum(s["seconds"] for s in record["stages"] if s["depth"] == 0)
    # predictors evaluated several at a time overlap: at most that many stages at any moment
    assert top <= record["at_once"] * record["total_seconds"] + 1e-3
    assert record["environment"]["cpu"]["name"]


def test_a_record_that_cannot_be_kept_costs_a_warning_not_the_run(monkeypatch, caplog) -> None:
    from lenbench.cli import _report_stage_times

    clock = StageClock()
    with clock.timed("world"):
        pass

    def broken() -> str:
        raise OSError("No space left on device")

    monkeypatch.setattr(clock, "table", broken)
    _report_stage_times(clock)  # does not raise
    assert "stage times not kept: No space left on device" in caplog.text
