"""Every benchmark in benchmarks/ still starts: it imports what it uses from this lenbench and
parses its arguments (`--help`), so a renamed or retyped name breaks a test, not a reader's run."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.cli import REPO

SCRIPTS = sorted((REPO / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_starts_and_explains_itself(script):
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "usage:" in proc.stdout
