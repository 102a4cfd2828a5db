"""The leaderboard's scheduling table, built from results that carry simulator output."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from lenbench.evaluate import schedule
from lenbench.leaderboard import build_leaderboard
from lenbench.results import result_path, write_result

GOLDEN = Path(__file__).parent / "data" / "golden_results"
SIM = {"enabled": True, "n_prefill": 1, "n_decode": 2, "max_num_seqs": 8, "n_requests": 300,
       "load_factor": 1.1, "seeds": [0, 1], "short_threshold": "q50", "long_threshold": "q90"}


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    """Golden results, with mlp_probe's two seeds given scheduling figures of a noisy oracle."""
    results = tmp_path_factory.mktemp("results")
    shutil.copytree(GOLDEN, results, dirs_exist_ok=True)
    rng = np.random.default_rng(0)
    true = rng.lognormal(3.5, 0.8, 400).round() + 1
    prompt = np.full(400, 20)
    scheds = {}
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        noisy = true * np.exp(rng.normal(0, 0.3, true.size))
        r["scheduling"] = scheds[r["seed"]] = schedule(true, noisy, prompt, "mlp_probe", SIM)
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    out = tmp_path_factory.mktemp("board")
    return build_leaderboard(results, out).read_text(encoding="utf-8"), out, scheds


def _sched_rows(md: str) -> dict[str, list[str]]:
    section = md.split("### Scheduling", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("| ")][1:]  # skip the header
    return {ln.split(" | ")[0].lstrip("| "): ln.strip("| ").split(" | ") for ln in lines}


def test_reference_rows_and_predictor_share(board) -> None:
    md, _, scheds = board
    rows = _sched_rows(md)
    assert set(rows) == {"*baseline* (ref)", "*oracle* (ref)", "*constant* (ref)", "mlp_probe"}
    assert rows["*oracle* (ref)"][7] == "100%"  # the oracle captures all of its own gain
    assert rows["*baseline* (ref)"][1] == "rr+fcfs"
    # the predictor row is the mean over its two seeds of the simulator's captured share
    shares = [next(h for h in s["headline"] if h["row"] == "mlp_probe")["captured_share"]
              for s in scheds.values()]
    assert rows["mlp_probe"][7] == f"{100 * np.mean(shares):.0f}%"
    assert rows["mlp_probe"][9] == "2"
    # a noisy oracle schedules short requests better than the prediction-free baseline
    assert float(rows["mlp_probe"][2]) < float(rows["*baseline* (ref)"][2])


def test_quality_plot_written(board) -> None:
    md, out, _ = board
    plot = out / "plot-toyworld__toy-sched-quality.png"
    assert plot.read_bytes()[:4] == b"\x89PNG"
    assert plot.name in md
