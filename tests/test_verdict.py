"""The verdict that opens the leaderboard: tiers from the paired test, plain-words advice, the
cost-against-accuracy plot, and sentences whose checks the findings checker verifies."""

from __future__ import annotations

import json

import numpy as np
from helpers.leaderboard import GOLDEN, board_text

from lenbench.leaderboard import build_leaderboard
from lenbench.leaderboard.claim_figures import Figures
from lenbench.leaderboard.claims import check_text
from lenbench.leaderboard.verdict import HEADING, which_predictor_when
from lenbench.results import result_path, write_result

N = 240  # test rows, two per prompt


def _write(res, name: str, seed: int, pred: np.ndarray, true: np.ndarray, model: str,
           ms: float, states: bool) -> None:
    base = json.loads(next((GOLDEN / "toyworld" / "toy" / "mlp_probe").glob("*.json"))
                      .read_text(encoding="utf-8"))
    r = json.loads(json.dumps(base))
    r["predictor"]["name"], r["seed"] = name, seed
    r["predictor"]["reads"] = {"text": not states, "target_states": states,
                               "target_model": False}
    r["model"]["name"] = model
    r["dataset"].update(name="chat", n_test=N, n_test_prompts=N // 2)
    r["config_hash"] = f"{name[:6]}{seed:02d}".ljust(12, "0")[:12]
    r["fingerprints"] = {"labels": "abcd" * 4}
    r["metrics"]["dynamic"], r["predictor"]["dynamic"] = None, False
    mae = float(np.mean(np.abs(pred - true)))
    r["metrics"]["static"].update(mae=mae, mae_ci=[mae - 5, mae + 5])
    r["timings"].update(predict_ms_per_request=ms, fit_s=12.0)
    r["predictions"] = {"true": true.tolist(), "pred": pred.tolist(),
                        "prompt_id": [f"p{i // 2:03d}" for i in range(N)],
                        "censored": [False] * N}
    write_result(result_path(res, "chat", model, name, r["config_hash"]), r)


def _world(res, model: str = "smollm2") -> None:
    rng = np.random.default_rng(0)
    true = rng.integers(50, 600, N).astype(float)
    for seed in (0, 1):
        noise = rng.normal(0, 1, N)
        _write(res, "sharp", seed, true + 20 * noise, true, model, 0.01, True)
        _write(res, "close", seed, true + 20 * noise + rng.normal(0, 3, N), true, model, 5.0,
               False)
        _write(res, "blunt", seed, true + 150 * rng.normal(0, 1, N), true, model, 0.02, False)
        _write(res, "constant", seed, np.full(N, 300.0), true, model, 0.0001, False)


def _verdict_rows(md: str) -> dict[str, list[str]]:
    section = md.split(f"## {HEADING}", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln]
    return {cells[0]: cells for ln in rows[1:]
            if (cells := [c.strip() for c in ln.strip("|").split("|")])}


def test_the_verdict_opens_the_page_with_tiers_advice_and_a_plot(tmp_path):
    res = tmp_path / "results"
    _world(res)
    out = tmp_path / "board"
    md = board_text(build_leaderboard(res, out, site=False))
    lines = md.splitlines()
    assert lines.index(f"## {HEADING}") < 10
    assert next(i for i, ln in enumerate(lines) if ln.startswith("![Cost against")) < 80
    assert (out / "plot-chat__smollm2-cost-accuracy.png").is_file()
    rows = _verdict_rows(md)
    assert list(rows)[:2] == ["sharp", "close"]
    assert rows["sharp"][1] == rows["close"][1] == "1"  # within the noise of each other
    assert rows["blunt"][1] == "2"  # far worse, with two seeds a side: its own tier
    assert "Among the most accurate" in rows["sharp"][-1]
    assert "hidden states" in rows["sharp"][-1] and "prompt alone" in rows["close"][-1]
    assert "yardstick" in rows["constant"][-1]
    assert rows["sharp"][5] == "0.01" and rows["close"][5] == "5.0"


def test_the_sentences_hold_and_a_planted_false_one_fails(tmp_path):
    res = tmp_path / "results"
    _world(res)
    md = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    text = which_predictor_when(md)
    figures = Figures(res)
    report = check_text(text, figures)
    assert report.claims >= 4 and not report.problems, report.problems
    assert "Cheapest of the most accurate: `sharp`" in text
    planted = text.replace("lowest * static.mae: sharp", "lowest * static.mae: close")
    assert check_text(planted, figures).problems


def test_a_toy_model_gets_no_verdict(tmp_path):
    res = tmp_path / "results"
    _world(res, model="toy")
    md = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    assert HEADING not in md
