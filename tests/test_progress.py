"""Plain progress lines: one per tenth of the work (or per interval), resumed work not counted."""

from __future__ import annotations

import logging

from lenbench.runtime.progress import ProgressLog, _clock


def test_logs_once_per_tenth_and_at_the_end(caplog, monkeypatch):
    ticks = iter(range(1000))  # two seconds per sample: no burst suppression
    monkeypatch.setattr("lenbench.runtime.progress.time.perf_counter", lambda: 2.0 * next(ticks))
    caplog.set_level(logging.INFO)
    p = ProgressLog(logging.getLogger("t"), "generate", 100, "samples", every_s=1e9)
    for _ in range(100):
        p.advance()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 10
    assert lines[0].startswith("generate: 10/100 samples (10%)")
    assert lines[-1].startswith("generate: 100/100 samples (100%)")
    assert "left" not in lines[-1] and "left" in lines[0]


def test_resumed_work_is_not_in_the_rate(caplog, monkeypatch):
    clock = iter([0.0, 10.0, 10.0])
    monkeypatch.setattr("lenbench.runtime.progress.time.perf_counter", lambda: next(clock))
    p = ProgressLog(logging.getLogger("t"), "generate", 100, "samples", every_s=1e9, start=50)
    caplog.set_level(logging.INFO)
    p.advance(20)  # 20 new samples in 10 s: 2/s, 30 left -> 15 s
    line = caplog.records[-1].getMessage()
    assert "70/100 samples (70%)" in line and "2.00 samples/s" in line and "~0m15s left" in line


def test_bursts_log_one_line_a_second(caplog, monkeypatch):
    monkeypatch.setattr("lenbench.runtime.progress.time.perf_counter", lambda: 5.0)
    caplog.set_level(logging.INFO)
    p = ProgressLog(logging.getLogger("t"), "generate", 100, "samples", every_s=1e9)
    for _ in range(99):
        p.advance()  # every sample done at the same instant: tenths crossed, no line
    assert not caplog.records
    p.advance()
    assert caplog.records[-1].getMessage().startswith("generate: 100/100")


def test_time_left_by_tokens_where_rows_differ_in_cost(caplog, monkeypatch):
    clock = iter([0.0, 10.0, 10.0])
    monkeypatch.setattr("lenbench.runtime.progress.time.perf_counter", lambda: next(clock))
    p = ProgressLog(logging.getLogger("t"), "features", 100, "rows", every_s=1e9,
                    total_tokens=10_000)
    caplog.set_level(logging.INFO)
    p.advance(10, tokens=5_000)  # the long tenth of the rows is half the tokens: 10 s more,
    line = caplog.records[-1].getMessage()  # not the 90 s the rows' rate says
    assert "500 tokens/s" in line and "~0m10s left" in line


def test_clock():
    assert _clock(59.6) == "1m00s" and _clock(3725) == "1h02m05s"
