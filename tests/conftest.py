"""Shared fixtures: offline mode, tiny random Llamas, the toy_tiny model, one end-to-end run.

Nothing here writes into the repository: every cache, results and leaderboard folder is a pytest
temporary folder, and the session fails if a test wrote into the repository's tracked data. The
session fixtures build the toy_tiny model once and run the default suite once on a reduced
config; later tests reuse that cache (stages are keyed by config, so runs with the same upstream
overrides reuse the labels and features).
"""

from __future__ import annotations

import os

# Before anything imports transformers / datasets: never reach for a hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import time
from pathlib import Path

import pytest
import torch
from helpers.cli import E2E_UPSTREAM, E2ERun, run_lenbench
from helpers.models import toy_tiny_model_cfg
from helpers.tracked import GUARDED, changed_since, tracked_state

TRACKED = pytest.StashKey[dict | None]()  # the tracked data files as the session found them

# The models here are tiny: one thread is faster than two (no pool overhead) and keeps the suite
# from fighting itself on a 2-core machine. Subprocess runs get `threads=1` for the same reason.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def session_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache folder shared by every test that needs the toy_tiny model or pipeline stages."""
    return tmp_path_factory.mktemp("lenbench_cache")


@pytest.fixture(scope="session")
def toy_tiny_path(session_cache: Path) -> str:
    """Folder of the toy_tiny model (tokenizer with a chat template + trained tiny Llama)."""
    from lenbench.models.loading import resolve_model

    path, _ = resolve_model(toy_tiny_model_cfg(), session_cache, progress=False)
    return path


@pytest.fixture(scope="session")
def toy_tiny(toy_tiny_path: str):
    """The toy_tiny model loaded the way a hub model loads (from_pretrained)."""
    from lenbench.models.loading import load_target

    return load_target(toy_tiny_path, "float32", "cpu")


@pytest.fixture(scope="session")
def e2e(session_cache: Path, toy_tiny_path: str, tmp_path_factory: pytest.TempPathFactory
        ) -> E2ERun:
    """`lenbench` with no predictor override (the default suite) on the reduced world."""
    out = tmp_path_factory.mktemp("e2e")
    run = E2ERun(session_cache, out / "results", out / "leaderboard", None, 0.0)  # type: ignore
    started = time.perf_counter()
    proc = run_lenbench(*E2E_UPSTREAM, *run.paths())
    run.seconds = time.perf_counter() - started
    run.proc = proc
    assert proc.returncode == 0, f"lenbench failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every end-to-end run is `slow`: tests that use the `e2e` run or start the `lenbench` CLI
    themselves, so `pytest -m "not slow"` is the fast selection (CONTRIBUTING.md)."""
    import inspect

    for item in items:
        fn = getattr(item, "function", None)
        try:
            source = inspect.getsource(fn) if fn is not None else ""
        except (OSError, TypeError):
            source = ""
        if "e2e" in getattr(item, "fixturenames", ()) or "run_lenbench(" in source \
                or "lenbench_cmd(" in source:
            item.add_marker(pytest.mark.slow)


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[TRACKED] = tracked_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test may write into the repository's tracked data (helpers/tracked.py): the session
    fails naming each file that changed while it ran."""
    changed = changed_since(session.config.stash.get(TRACKED, None))
    if not changed:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{len(changed)} tracked file(s) under {', '.join(GUARDED)} changed while the tests "
             "ran (a test must write into tmp_path only; or someone else wrote them meanwhile):",
             *changed[:20]]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
