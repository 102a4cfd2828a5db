"""The leaderboard's value-of-prediction table and plot, the headline's load in the caption with
the oracle's gain in seconds, and a world where no load gives the oracle a gain: no score."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.leaderboard import board_text, schedule

from lenbench.leaderboard import build_leaderboard
from lenbench.results import PROTOCOL_VERSION, result_path, write_result

GOLDEN = Path(__file__).parent / "data" / "golden_results"
SIM = {"enabled": True, "n_prefill": 1, "n_decode": 2, "max_num_seqs": 8, "n_requests": 300,
       "load_factor": 0.85, "arrival_cv": 2.0, "starvation": "none", "seeds": [0, 1, 2],
       "short_threshold": "q50", "long_threshold": "q90", "score_alphas": [0, 1],
       "sweep_loads": [0.5, 1.0, 1.3], "sweep_seeds": 2, "sweep_noisy_c": [0.7, 0.9],
       "headline_min_gain": 0.2}


def _board(tmp: Path, sim: dict) -> tuple[str, dict, Path]:
    results = tmp / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(1)
    true = rng.lognormal(3.5, 0.8, 400).round() + 1
    prompt = rng.integers(5, 50, 400)
    scheds = {}
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        noisy = true * np.exp(rng.normal(0, 0.4, true.size))
        r["scheduling"] = scheds[r["seed"]] = schedule(true, noisy, prompt, "mlp_probe", sim)
        r["protocol_version"] = PROTOCOL_VERSION
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    out = tmp / "board"
    return board_text(build_leaderboard(results, out)), scheds, out


def _table(md: str, heading: str) -> list[list[str]]:
    part = md.split(heading, 1)[1]
    rows, started = [], False
    for ln in part.splitlines():
        if ln.startswith("|"):
            started = True
            if ln.startswith("| "):  # not the alignment line
                rows.append(ln.strip("| ").split(" | "))
        elif started:
            break
    assert rows
    return rows


def test_sweep_table_plot_and_headline_load(tmp_path: Path) -> None:
    md, scheds, out = _board(tmp_path, SIM)
    sweep = scheds[0]["sweep"]
    head = sweep["headline_load"]
    assert head is not None
    rows = _table(md, "#### Value of prediction by load")
    header = rows[0]
    assert header[:2] == ["Curve", "C-index"]
    assert header[2:] == [f"{lf:g}" + (" (headline)" if lf == head else "") for lf in
                          (0.5, 1.0, 1.3)]
    names = [r[0] for r in rows[1:]]
    assert names == ["*fcfs* (ref)", "*short prompt first* (ref)", "*noisy C=0.7* (ref)",
                     "*noisy C=0.9* (ref)", "*oracle* (ref)", "mlp_probe",
                     "*oracle's gain over FCFS*"]
    # the predictor's cells are its mean over its two seeds' curves
    cells = rows[1 + names.index("mlp_probe")][2:]
    for i, cell in enumerate(cells):
        want = np.mean([s["sweep"]["rows"]["mlp_probe"][i]["figures"]["e2e_mean_all"]
                        for s in scheds.values()])
        assert cell == f"{want:.2f}"
    gain = rows[1 + names.index("*oracle's gain over FCFS*")][2:]
    assert all(re.fullmatch(r"-?\d+\.\d\d s \(-?\d+%\)", g) for g in gain)
    assert (out / "plot-toyworld__toy-load-curves.png").stat().st_size > 10_000
    # the headline table's intro gives the load, the rule and the oracle's gain in seconds
    section = md.split("### Scheduling", 1)[1]
    assert f"load factor {head:.2f}" in section and "by at least 20%" in section
    heads = {h["row"]: h for h in scheds[0]["headline"]}
    base, best = heads["baseline"]["e2e_mean_all"], heads["oracle"]["e2e_mean_all"]
    assert f"from {base:.2f} s to {best:.2f} s" in section
    assert "Overload" in section or "overload" in section


@pytest.mark.parametrize("loads", [[0.1, 0.2]])
def test_no_load_where_queues_form_gives_no_score(tmp_path: Path, loads: list) -> None:
    md, scheds, _ = _board(tmp_path, dict(SIM, sweep_loads=loads))
    assert all(s["score_withheld"] for s in scheds.values())
    section = md.split("### Scheduling", 1)[1].split("\n## ", 1)[0]
    assert "**No scheduling score for this world:** no load from 0.1 to 0.2" in section
    main = _table(section, "| Predictor")
    body = {r[0]: r for r in main[1:]}
    assert body["mlp_probe"][1] == "—" and body["*oracle* (ref)"][1] == "—"
    assert "Score Δ" not in " ".join(main[0])  # nothing to pair
    assert "The starvation guard" not in section  # no guard table for withheld scores
    assert "#### Value of prediction by load" in section  # the curves say why
