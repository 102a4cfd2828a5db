"""Progress lines for plain log files, beside the live bars.

A rich bar redraws one terminal line; in a batch job's log file (SLURM, nohup, CI) it leaves
nothing useful. `ProgressLog` writes an ordinary log line at most every `every_s` seconds and at
every tenth of the work: done/total, rate, elapsed time and the time left. Where rows differ in
cost (long rows first), the time left is counted in tokens when the caller knows their total.
"""

from __future__ import annotations

import logging
import time


def _clock(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


class ProgressLog:
    """Log `name: done/total (pct), rate unit/s, elapsed, ~left` as work advances."""

    def __init__(self, logger: logging.Logger, name: str, total: int, unit: str = "rows",
                 every_s: float = 30.0, start: int = 0, total_tokens: int = 0):
        self.log, self.name, self.total, self.unit = logger, name, max(int(total), 0), unit
        self.every_s = every_s
        self.done = start
        self.started = time.perf_counter()
        self.base = start  # work resumed from disk does not count towards the rate
        self.last_log = self.started
        self.last_tenth = self._tenth(start)
        self.tokens = 0  # tokens processed since start, when the caller counts them
        self.total_tokens = total_tokens  # tokens of the work after `start`: the time left by them

    def _tenth(self, done: int) -> int:
        return 10 * done // self.total if self.total else 10

    def advance(self, n: int = 1, tokens: int = 0) -> None:
        self.done += n
        self.tokens += tokens
        now = time.perf_counter()
        tenth = self._tenth(self.done)
        # a tenth crossed (at most one line a second: samples often finish in bursts), the
        # interval passed, or the end
        if (tenth > self.last_tenth and now - self.last_log >= 1.0) or \
                now - self.last_log >= self.every_s or self.done >= self.total:
            self.last_tenth, self.last_log = tenth, now
            self.log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.perf_counter()) - self.started
        worked = self.done - self.base
        rate = worked / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate if rate > 0 else None
        if self.total_tokens and self.tokens and elapsed > 0:
            left = max(self.total_tokens - self.tokens, 0) / (self.tokens / elapsed)
        pct = 100 * self.done / self.total if self.total else 100.0
        parts = [f"{self.name}: {self.done}/{self.total} {self.unit} ({pct:.0f}%)",
                 f"{rate:.2f} {self.unit}/s"]
        if self.tokens and elapsed > 0:
            parts.append(f"{self.tokens / elapsed:,.0f} tokens/s")
        parts.append(f"elapsed {_clock(elapsed)}")
        if self.done < self.total and left is not None:
            parts.append(f"~{_clock(left)} left")
        return ", ".join(parts)
