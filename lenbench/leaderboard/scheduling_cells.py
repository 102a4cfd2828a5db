"""What every scheduling table reads from a scheduling record: its reference rows, and a score or
a change as cell text."""

from __future__ import annotations

from typing import Any

from lenbench.leaderboard.cells import DASH
from lenbench.results.checks import is_number

SCHED_REFS = ("baseline", "oracle", "constant")


def sched_refs(sched: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The reference entries (baseline, oracle, constant) of one scheduling record by row."""
    return {h["row"]: h for h in sched.get("headline") or [] if h.get("row") in SCHED_REFS}


def score_text(score: dict[str, Any] | None) -> str:
    """"62% [55, 70]"; a dash with the reason when no score is given (sim/score.py)."""
    if not score or score.get("value") is None:
        reason = (score or {}).get("reason")
        return f"{DASH} ({reason})" if reason else DASH
    text = f"{100 * score['value']:.0f}%"
    lo, hi = score.get("ci95_low"), score.get("ci95_high")
    if is_number(lo) and is_number(hi):
        text += f" [{100 * lo:.0f}, {100 * hi:.0f}]"
    return text


def pct(value: Any) -> str:
    """A change as "+3%", a dash when there is none."""
    return f"{100 * value:+.0f}%" if is_number(value) else DASH
