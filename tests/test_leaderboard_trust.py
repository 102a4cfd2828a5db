"""What makes a leaderboard table trustworthy: paired differences to a reference predictor,
one honest noise-floor row, results scored on different labels kept apart, clipping and small
splits said out loud."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
from helpers.leaderboard import board_text

from lenbench.leaderboard import build_leaderboard
from lenbench.results import result_path, write_result

GOLDEN = Path(__file__).parent / "data" / "golden_results" / "toyworld" / "toy"
TEMPLATE = json.loads(next((GOLDEN / "mlp_probe").glob("*.json")).read_text())


def result(name: str, true, pred, prompt_ids, fingerprint: str | None = "f" * 16,
           seed: int = 0, kind: str = "predictor", **static) -> dict:
    """A valid result for `name` whose metrics match its predictions."""
    r = copy.deepcopy(TEMPLATE)
    true, pred = np.asarray(true, float), np.asarray(pred, float)
    r["predictor"] = {"name": name, "target": f"x.{name}", "params": {}, "dynamic": False}
    r["kind"], r["seed"] = kind, seed
    r["config_hash"] = f"{name[:4]}{seed:08d}"
    r["dataset"] = {**r["dataset"], "n_test": len(true),
                    "n_test_prompts": len(set(prompt_ids))}
    mae = float(np.abs(pred - true).mean())
    r["metrics"] = {"static": {**TEMPLATE["metrics"]["static"], "mae": mae,
                               "mae_ci": [mae - 1, mae + 1], "n": len(true), **static},
                    "dynamic": None, "variants": {}}
    r["predictions"] = {"true": true.tolist(), "pred": pred.tolist(),
                        "prompt_id": list(prompt_ids), "censored": [False] * len(true)}
    if fingerprint is not None:
        r["fingerprints"] = {"labels": fingerprint, "features": None}
    return r


def write(folder: Path, *results: dict) -> Path:
    for r in results:
        fp = (r.get("fingerprints") or {}).get("labels")
        write_result(result_path(folder, "toyworld", "toy", r["predictor"]["name"],
                                 r["config_hash"], fp), r)
    return folder


def world(n_prompts: int = 40, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = [f"p{i}" for i in range(n_prompts) for _ in range(2)]
    true = rng.integers(20, 400, size=2 * n_prompts).astype(float)
    return true, ids, rng


def table_rows(board: str) -> dict[str, list[str]]:
    rows = {}
    for line in board.splitlines():
        if line.startswith("| ") and not line.startswith("| Predictor"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows.setdefault(cells[0], cells)
    return rows


def test_paired_difference_to_the_reference(tmp_path: Path) -> None:
    true, ids, rng = world()
    probe = true + rng.normal(0, 30, true.size)
    worse = probe + np.sign(probe - true) * 5  # 5 tokens further from the truth on every row
    same = true + rng.normal(0, 30, true.size)  # as good as the probe, other noise
    seeded = [result(name, true, pred, ids, seed=s) for s in (0, 1)
              for name, pred in (("mlp_probe", probe), ("worse", worse), ("other", same))]
    res = write(tmp_path / "res", *seeded, result("one_seed", true, worse, ids))
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    rows = table_rows(board)
    assert "Δ vs mlp_probe" in board
    assert rows["mlp_probe"][3] == "(reference)"
    assert rows["worse"][3].startswith("**+5.0** [+5.0, +5.0]")
    # the same difference from one seed: the prompts alone, never bold, marked
    assert rows["one_seed"][3] == "+5.0 [+5.0, +5.0]°"
    assert not rows["other"][3].startswith("**")  # its interval straddles 0
    low, high = (float(x) for x in rows["other"][3].split("[")[1].rstrip("]").split(", "))
    assert low < 0 < high


def test_results_on_other_labels_are_kept_apart(tmp_path: Path) -> None:
    """The same config scored on two builds of the labels: two files, two tables."""
    true, ids, _ = world()
    a = result("mlp_probe", true, true + 3, ids, fingerprint="a" * 16)
    b = result("mlp_probe", true + 1, true + 9, ids, fingerprint="b" * 16)
    legacy = result("constant", true, np.full(true.size, 200.0), ids, fingerprint=None)
    res = write(tmp_path / "res", a, b, legacy)
    assert len(list((res / "toyworld" / "toy" / "mlp_probe").glob("*.json"))) == 2
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    assert "## toyworld / toy (labels `aaaaaaaa`)" in board
    assert "## toyworld / toy (labels `bbbbbbbb`)" in board
    assert "## toyworld / toy (labels not fingerprinted)" in board
    sections = board.split("## toyworld / toy")[1:]
    assert sum("| mlp_probe |" in s for s in sections) == 2
    assert ["| 3.0 |" in s for s in sections[:2]] == [True, False]


def test_one_noise_floor_row_with_its_bounds(tmp_path: Path) -> None:
    true, ids, _ = world()
    floors = []
    for seed in (0, 1, 2):  # older runs wrote one per predictor seed
        f = result("noise_floor", true, true + 1, ids, seed=seed, kind="reference")
        f["metrics"]["noise_floor"] = {"in_sample": 12.7, "leave_one_out": 18.8,
                                       "interval": [11.0, 21.0], "n": 70, "n_prompts": 35,
                                       "n_censored": 6}
        f["created_at"] = f"2025-01-0{seed + 1}T00:00:00Z"
        floors.append(f)
    res = write(tmp_path / "res", *floors, result("mlp_probe", true, true + 5, ids))
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    rows = table_rows(board)
    floor = rows["*noise_floor* (ref)"]
    assert floor[1] == "12.7 – 18.8" and floor[2] == "[11.0, 21.0]" and floor[-1] == "1"
    assert ("*noise_floor* is scored on 70 of the 80 test rows (the rows of 35 prompts with at "
            "least two samples, 6 of them censored)") in board


def test_clipping_and_a_small_split_are_said(tmp_path: Path) -> None:
    true, ids, _ = world(n_prompts=10)
    res = write(tmp_path / "res", result("mlp_probe", true, true, ids, n_clipped_low=0,
                                         n_clipped_high=4))
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    assert "**Too few test prompts to rank predictors** (10 < 30)" in board
    assert "mlp_probe (totals: 0 below 1, 4 above the cap)" in board
