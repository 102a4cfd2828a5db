"""Repository paths, the reduced end-to-end config, and running the `lenbench` console script."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
USER_CONF = FIXTURES / "user_conf"

# The reduced upstream config shared by every end-to-end test: same overrides -> same stage keys ->
# the session cache is reused (model, prompts, labels, features are built once per session).
E2E_UPSTREAM = [
    "model=toy_tiny",
    "dataset.n_prompts=40",
    "generation.n_samples=2",
    "generation.max_new_tokens=64",
    "generation.shard_prompts=16",
    "features.roles=[mid]",
    "features.poolings=[last]",
    "features.step_roles=[mid]",
    "eval.n_boot=200",
    "progress=false",
    "threads=1",
]


def lenbench_cmd(*overrides: str, multirun: bool = False) -> list[str]:
    """The `lenbench` console script's entry point, run with this interpreter."""
    return [sys.executable, "-m", "lenbench.cli", *(["-m"] if multirun else []), *overrides]


def run_lenbench(*overrides: str, multirun: bool = False, env: dict | None = None,
                 timeout: float = 600, cwd: Path = REPO) -> subprocess.CompletedProcess:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(lenbench_cmd(*overrides, multirun=multirun), cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


@dataclass
class E2ERun:
    """The session's one end-to-end run of the default suite on the reduced config."""

    cache_dir: Path
    results_dir: Path
    leaderboard_dir: Path
    proc: subprocess.CompletedProcess
    seconds: float

    def paths(self, results_dir: Path | None = None, leaderboard_dir: Path | None = None
              ) -> list[str]:
        return [f"paths.cache_dir={self.cache_dir}",
                f"paths.results_dir={results_dir or self.results_dir}",
                f"paths.leaderboard_dir={leaderboard_dir or self.leaderboard_dir}"]
