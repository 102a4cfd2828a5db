"""The leaderboard's scheduling table, built from results that carry simulator output: the score
(0% for a constant, 100% for the oracle by construction and at most that for a predictor) with
its interval pooled over predictor seeds, its paired difference to the reference predictor,
the class changes, the score at several aging weights, the caption, and records of older
simulators."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from helpers.leaderboard import board_text, schedule

from lenbench.leaderboard import build_leaderboard
from lenbench.results import result_path, write_result

GOLDEN = Path(__file__).parent / "data" / "golden_results"
# The toy preset's load, arrivals and guard on a smaller, faster cluster.
SIM = {"enabled": True, "n_prefill": 1, "n_decode": 2, "max_num_seqs": 8, "n_requests": 300,
       "load_factor": 0.85, "arrival_cv": 2.0, "starvation": "aging", "aging_alpha": 1.0,
       "seeds": [0, 1, 2], "short_threshold": "q50", "long_threshold": "q90",
       "score_alphas": [0, 1]}
CHANGES = ("e2e_mean_all", "e2e_mean_short", "e2e_p99_short", "e2e_mean_long", "e2e_p99_long",
           "e2e_mean_capped")
COLUMNS = ["Predictor", "Score [95% CI]", "Score Δ vs mlp_probe", "Gain (s)", "All mean",
           "Short mean", "Short P99", "Long mean", "Long P99", "Capped mean", "Capped P99",
           "C-index", "Runs"]


def _legacy(sched: dict) -> dict:
    """A record as older simulators wrote it: no score, no per-seed figures."""
    old = copy.deepcopy(sched)
    old.pop("queue_key")
    for key in ("score_metric", "score_definition", "score_interval"):
        old.pop(key)
    for entry in old["headline"]:
        entry.pop("per_seed")
        entry["captured_share"] = 0.5
    return old


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, dict]:
    """Golden results: mlp_probe's two seeds get scheduling figures of noisy oracles,
    bin_classifier's seed 0 those of a constant prediction and its seed 1 a legacy record."""
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
    for path in sorted((results / "toyworld/toy/bin_classifier").glob("*.json")):
        r = json.loads(path.read_text())
        flat = schedule(true, np.full(400, 33.3), prompt, "bin_classifier", SIM)
        r["scheduling"] = flat if r["seed"] == 0 else _legacy(flat)
        write_result(result_path(results, "toyworld", "toy", "bin_classifier",
                                 r["config_hash"]), r)
    out = tmp_path_factory.mktemp("board")
    return board_text(build_leaderboard(results, out)), out, scheds


def _section(md: str) -> str:
    return md.split("### Scheduling", 1)[1].split("\n## ", 1)[0]


def _sched_rows(md: str) -> tuple[list[str], dict[str, list[str]]]:
    main = _section(md).split("#### ", 1)[0]  # the main table only
    lines = [ln for ln in main.splitlines() if ln.startswith("| ")]
    header = lines[0].strip("| ").split(" | ")
    return header, {ln.split(" | ")[0].lstrip("| "): ln.strip("| ").split(" | ")
                    for ln in lines[1:]}


def _per_seed(scheds: dict, row: str, key: str) -> np.ndarray:
    """predictor seeds x simulator seeds of one figure of one row."""
    return np.array([next(h for h in s["headline"] if h["row"] == row)["per_seed"][key]
                     for s in scheds.values()], dtype=float)


def test_reference_rows_exact_by_construction(board) -> None:
    md, _, _ = board
    header, rows = _sched_rows(md)
    assert header == COLUMNS
    assert set(rows) == {"*baseline* (ref)", "*oracle* (ref)", "*constant* (ref)", "mlp_probe",
                         "bin_classifier"}
    assert rows["*oracle* (ref)"][1] == "100% [100, 100]"
    assert rows["*constant* (ref)"][1] == "0% [0, 0]"
    assert rows["*constant* (ref)"][4:9] == ["+0%"] * 5
    assert rows["*constant* (ref)"][9:11] == ["—", "—"]  # no request is cut at a cap here
    assert rows["*constant* (ref)"][3] == "+0.00"  # no gain, in seconds
    # a constant predictor of another value is the baseline run too: exactly 0%, no change
    assert rows["bin_classifier"][1] == "0% [0, 0]" and rows["bin_classifier"][4:9] == ["+0%"] * 5
    assert rows["bin_classifier"][12] == "1"  # only its scored run counts; the legacy one does not
    # the baseline row gives seconds; the others changes against it
    assert all(re.fullmatch(r"[\d,]+\.\d\d s", cell) for cell in rows["*baseline* (ref)"][4:9])
    assert rows["*baseline* (ref)"][1] == "—"
    assert rows["mlp_probe"][2] == "(reference)" and rows["*oracle* (ref)"][2] == "—"


def test_predictor_score_interval_and_changes(board) -> None:
    md, _, scheds = board
    _, rows = _sched_rows(md)
    cells = rows["mlp_probe"]
    base = _per_seed(scheds, "baseline", "e2e_mean_all")
    pred = _per_seed(scheds, "mlp_probe", "e2e_mean_all")
    best = _per_seed(scheds, "oracle", "e2e_mean_all")
    # pooled over predictor seeds, at most 1
    score = min((base - pred).mean() / (base - best).mean(), 1.0)
    match = re.fullmatch(r"(-?\d+)% \[(-?\d+), (-?\d+)\]", cells[1])
    assert match, cells[1]
    value, low, high = map(int, match.groups())
    assert value == round(100 * score) and low <= value <= high <= 100 and low < high
    gain = (_per_seed(scheds, "baseline", "e2e_mean_all") - pred).mean()
    assert cells[3] == f"{gain:+.2f}"  # the mean gain in seconds, pooled the same way
    for i, key in enumerate(CHANGES[:-1], start=4):  # all mean, short mean/P99, long mean/P99
        change = _per_seed(scheds, "mlp_probe", key).mean() / _per_seed(
            scheds, "baseline", key).mean() - 1
        assert cells[i] == f"{100 * change:+.0f}%", key
    assert cells[12] == "2"
    # a noisy oracle serves short requests better than the FCFS baseline
    assert cells[5].startswith("-")


def test_caption_says_what_the_score_is(board) -> None:
    md, _, _ = board
    text = _section(md)
    for phrase in ("Score = (baseline − predictor) / (baseline − oracle)",
                   "mean end-to-end latency of all requests", "baseline is lb+fcfs",
                   "same dispatcher with an FCFS queue", "aging (alpha 1 quantile/s)",
                   "load factor 0.85", "gamma arrivals (cv 2)", "simulator seeds [0, 1, 2]",
                   "Student-t", "delta method", "predictor seeds", "exactly 0%",
                   "exactly 100%", "rank quantiles", "rescaled copy of a predictor scores",
                   "mean gain counted up to the oracle's", "no predictor above it",
                   "twice its standard error", "no request was cut at a cap",
                   "Score Δ", "paired seed by seed"):
        assert phrase in text, phrase
    # the legacy record is counted, not scored
    assert "1 predictor result(s) were simulated before this score existed" in text


def test_only_legacy_records(tmp_path: Path) -> None:
    """Records of older simulators alone give a note, not a table with misleading rows."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(1)
    true = rng.lognormal(3.5, 0.8, 200).round() + 1
    sim = dict(SIM, n_requests=150, seeds=[0])
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = _legacy(schedule(true, true, np.full(200, 20), "mlp_probe", sim))
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    text = _section(board_text(build_leaderboard(results, tmp_path / "board")))
    assert "2 predictor result(s) were simulated before this score existed" in text
    assert "| Predictor |" not in text


def test_other_sim_config_is_not_pooled(tmp_path: Path) -> None:
    """Records of another simulated setting are counted in a note, not mixed into the rows."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(2)
    true = rng.lognormal(3.5, 0.8, 200).round() + 1
    sims = {0: dict(SIM, n_requests=150, seeds=[0, 1]),
            1: dict(SIM, n_requests=150, seeds=[0, 1], load_factor=0.6)}
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = schedule(true, true * 1.2, np.full(200, 20), "mlp_probe", sims[r["seed"]])
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    md = board_text(build_leaderboard(results, tmp_path / "board"))
    _, rows = _sched_rows(md)
    assert rows["mlp_probe"][12] == "1"
    assert "1 predictor result(s) simulated with another sim configuration" in _section(md)


def test_quality_plot_written(board) -> None:
    md, out, _ = board
    plot = out / "plot-toyworld__toy-sched-quality.png"
    assert plot.read_bytes()[:4] == b"\x89PNG"
    # the score against the main table's rank score, which the scheduling table shows too
    assert f"![Scheduling score vs C-index, toyworld / toy]({plot.name})" in md


def test_no_comparison_table_without_comparison_records(board) -> None:
    """Records simulated without sim.compare leave the section as it was."""
    md, _, _ = board
    assert "Scheduling comparison" not in md


def test_scheduling_comparison_table(tmp_path: Path) -> None:
    """With sim.compare, a table per world scores each predictor under static SJF, preemptive
    re-ranking and distributional ordering beside the oracle's SRPT bound; the Static SJF
    cell is the main table's score, and a predictor without dynamic or distributional outputs
    shows dashes there."""
    from lenbench.contract.distributions import LengthDistribution

    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(3)
    true = rng.lognormal(3.5, 0.8, 300).round() + 2
    prompt = np.full(300, 20)
    sim = dict(SIM, n_requests=300, compare=True, preempt_cost="swap")
    noisy = true * np.exp(rng.normal(0, 0.3, true.size))
    rows = np.repeat(np.arange(true.size), 4)
    steps_t = np.tile(np.arange(4) * 4, true.size)
    rem = np.maximum(true[rows] - steps_t, 1.0)
    dist = LengthDistribution.from_quantiles((0.1, 0.25, 0.5, 0.75, 0.9),
                                             noisy[:, None] * np.array([0.5, 0.8, 1, 1.2, 2]))
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = schedule(true, noisy, prompt, "mlp_probe", sim,
                                   remaining=(rows, steps_t, rem), distribution=dist)
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    for path in sorted((results / "toyworld/toy/bin_classifier").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = schedule(true, noisy * 1.5, prompt, "bin_classifier", sim)
        write_result(result_path(results, "toyworld", "toy", "bin_classifier",
                                 r["config_hash"]), r)
    md = board_text(build_leaderboard(results, tmp_path / "board"))
    _, main_rows = _sched_rows(md)
    part = _section(md).split("#### Scheduling comparison", 1)[1]
    lines = [ln for ln in part.splitlines() if ln.startswith("| ")]
    header = lines[0].strip("| ").split(" | ")
    assert header == ["Predictor", "Policy", "Score [95% CI]", "Long mean", "Long P99",
                      "Preemptions / request", "Runs"]
    cmp = {tuple(ln.strip("| ").split(" | ")[:2]): ln.strip("| ").split(" | ")[2:]
           for ln in lines[1:]}
    assert set(cmp) == {("*oracle* (ref)", "Static SJF"),
                        ("*oracle* (ref)", "Static preemptive (SRPT bound)"),
                        *(("mlp_probe", p) for p in ("Static SJF", "Static preemptive",
                                                     "Dynamic preemptive", "Distributional")),
                        ("bin_classifier", "Static SJF"), ("bin_classifier", "Static preemptive")}
    assert cmp[("*oracle* (ref)", "Static SJF")][0] == "100% [100, 100]"
    assert re.fullmatch(r"\d+% \[-?\d+, \d+\]",
                        cmp[("*oracle* (ref)", "Static preemptive (SRPT bound)")][0])
    for name in ("mlp_probe", "bin_classifier"):
        static = cmp[(name, "Static SJF")]
        assert static[0] == main_rows[name][1]  # the main score, pooled the same way
        assert static[1:3] == main_rows[name][7:9]  # and its long mean / P99 changes
        assert static[3] == "—" and static[4] == "2"
        assert re.fullmatch(r"\d+\.\d\d", cmp[(name, "Static preemptive")][3])
    for policy in ("Static SJF", "Static preemptive", "Dynamic preemptive", "Distributional"):
        cells = cmp[("mlp_probe", policy)]
        assert re.fullmatch(r"-?\d+% \[-?\d+, -?\d+\]", cells[0]), policy
        assert all(re.fullmatch(r"[+-]\d+%", c) for c in cells[1:3]), policy
    for phrase in ("SRPT on true lengths", "swap", "keep the predictions' units",
                   "Long mean / Long P99"):
        assert phrase in part, phrase


def test_token_keyed_records_are_not_pooled(tmp_path: Path) -> None:
    """A record of the simulator that keyed queues by predicted tokens (no "queue_key") is
    counted in the note, not scored beside rank-keyed ones."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(6)
    true = rng.lognormal(3.5, 0.8, 200).round() + 1
    sim = dict(SIM, n_requests=150, seeds=[0, 1])
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = schedule(true, true * 1.2, np.full(200, 20), "mlp_probe", sim)
        if r["seed"] == 1:
            r["scheduling"].pop("queue_key")
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    md = board_text(build_leaderboard(results, tmp_path / "board"))
    _, rows = _sched_rows(md)
    assert rows["mlp_probe"][12] == "1"
    assert ("1 predictor result(s) were simulated before this score existed (their queues were "
            "keyed by predicted tokens") in _section(md)


def test_no_score_cell_says_why(tmp_path: Path) -> None:
    """Where the oracle gains nothing (no queue forms at a tenth of saturation), the predictor's
    score cell is a dash with the reason, not a sign-flipped or noisy share."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(5)
    true = rng.lognormal(3.5, 0.8, 200).round() + 1
    sim = dict(SIM, n_requests=150, seeds=[0, 1], load_factor=0.1, arrival_cv=1.0)
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = schedule(true, true * 1.2, np.full(200, 20), "mlp_probe", sim)
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    _, rows = _sched_rows(board_text(build_leaderboard(results, tmp_path / "board")))
    assert re.fullmatch(r"— \((no oracle gain: [+-]\d+\.\d% of baseline|oracle gain "
                        r"[+-]\d+\.\d% of baseline, within 2 standard errors of 0 over 2 "
                        r"simulator seeds)\)", rows["mlp_probe"][1]), rows["mlp_probe"]
    assert rows["*oracle* (ref)"][1] == rows["mlp_probe"][1]


def test_schedule_comparison_keeps_existing_keys() -> None:
    rng = np.random.default_rng(4)
    true = rng.lognormal(3.5, 0.8, 200).round() + 2
    sim = dict(SIM, n_requests=150, seeds=[0])
    plain = schedule(true, true * 1.1, np.full(200, 20), "p", sim)
    both = schedule(true, true * 1.1, np.full(200, 20), "p", dict(sim, compare=True))
    assert set(both) == set(plain) | {"comparison"} and "by_alpha" in plain
    assert both["headline"][1]["score"] == plain["headline"][1]["score"]
    assert set(both["comparison"]["rows"]) == {"static_sjf", "static_preemptive",
                                               "oracle_preemptive"}


def test_caption_states_the_classes_below_the_cap(tmp_path: Path) -> None:
    """With 40% of the rows cut at a cap, the caption gives the long class's threshold (below
    the cap, from the lengths that ended before it) and its share, below the capped share."""
    results = tmp_path / "results"
    shutil.copytree(GOLDEN, results)
    rng = np.random.default_rng(7)
    raw = rng.lognormal(3.8, 0.8, 300).round() + 1
    true, cut = np.minimum(raw, 64), raw >= 64
    for path in sorted((results / "toyworld/toy/mlp_probe").glob("*.json")):
        r = json.loads(path.read_text())
        r["scheduling"] = schedule(true, true * 1.2, np.full(300, 20), "mlp_probe",
                                   dict(SIM, n_requests=300), censored=cut)
        write_result(result_path(results, "toyworld", "toy", "mlp_probe", r["config_hash"]), r)
    section = _section(board_text(build_leaderboard(results, tmp_path / "board")))
    caption = next(ln for ln in section.splitlines() if ln.startswith("Score = "))
    match = re.search(r"long = at least (\d+) tokens \(the 90th percentile of their lengths\) "
                      r"\((\d+\.\d)% of test rows\); capped = cut at the cap \((\d+\.\d)% of "
                      r"test rows\)", caption)
    assert match, caption
    threshold, long_share, capped_share = int(match[1]), float(match[2]), float(match[3])
    assert threshold < 64 and long_share < capped_share == pytest.approx(100 * cut.mean(), abs=0.1)
