"""The greedy-beside-sampled table: which sections pair, and what each cell says."""

from __future__ import annotations

import json

import numpy as np
from helpers.leaderboard import GOLDEN, board_text

from lenbench.leaderboard import build_leaderboard
from lenbench.results import result_path, write_result

PROMPTS = [f"p{i:03d}" for i in range(60)]


def _write(res, name: str, seed: int, labels: str, temperature: float, pred: np.ndarray,
           true: np.ndarray, prompts=PROMPTS, cap: int = 768) -> None:
    """A result of `name` on the world with labels `labels`, generated at `temperature`, whose
    MAE and C-index follow from its stored predictions."""
    base = json.loads(next((GOLDEN / "toyworld" / "toy" / "mlp_probe").glob("*.json"))
                      .read_text(encoding="utf-8"))
    r = json.loads(json.dumps(base))
    r["predictor"]["name"], r["seed"] = name, seed
    r["config_hash"] = f"{name[:4]}{seed:02d}{labels[:6]}".ljust(12, "0")[:12]
    r["fingerprints"] = {"labels": labels.ljust(16, "0")}
    r["generation"] = {"n_rows": len(true), "n_censored": 3,
                       "sampling": {"temperature": temperature, "top_p": 0.9,
                                    "repetition_penalty": 1.1, "max_new_tokens": cap}}
    r["metrics"]["dynamic"], r["predictor"]["dynamic"] = None, False
    mae = float(np.mean(np.abs(pred - true)))
    r["metrics"]["static"].update(mae=mae, mae_ci=[mae - 5, mae + 5], c_index=0.5 + seed / 100)
    r["predictions"] = {"true": true.tolist(), "pred": pred.tolist(), "prompt_id": list(prompts),
                        "censored": [False] * len(true)}
    write_result(result_path(res, "sharegpt_wheel", "smollm2", name, r["config_hash"]), r)


def _worlds(res, greedy_prompts=PROMPTS, greedy_cap: int = 768) -> None:
    rng = np.random.default_rng(0)
    for labels, temperature, prompts, cap in (("aaaa", 0.7, PROMPTS, 768),
                                              ("bbbb", 0.0, greedy_prompts, greedy_cap)):
        true = rng.integers(50, 500, len(prompts)).astype(float)
        for seed in (0, 1):
            _write(res, "constant", seed, labels, temperature, np.full(len(true), 250.0), true,
                   prompts, cap)
            _write(res, "probe", seed, labels, temperature,
                   true + rng.normal(0, 40, len(true)), true, prompts, cap)
        if temperature == 0:  # a predictor scored on the greedy world alone
            _write(res, "greedy_only", 0, labels, temperature, true + 10, true, prompts, cap)


def _section(md: str) -> str:
    return md.split("### Greedy beside sampled", 1)[1].split("\n## ", 1)[0]


def _cells(section: str, name: str) -> list[str]:
    line = next(ln for ln in section.splitlines() if ln.startswith(f"| {name} |"))
    return [c.strip() for c in line.strip("|").split("|")]


def test_the_same_prompts_greedy_and_sampled_get_one_table(tmp_path):
    res = tmp_path / "results"
    _worlds(res)
    md = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    section = _section(md)
    assert "The same 60 test prompts" in section and "temperature 0.7" in section
    probe = _cells(section, "probe")
    const = _cells(section, "constant")
    # MAE sampled, MAE greedy: each world's own mean over its two seeds
    assert probe[1] != probe[2] and "±" in probe[1] and "±" in probe[2]
    # the greedy share of the gap is (constant - probe) / constant: the floor is 0
    c_mae, p_mae = float(const[2].split(" ±")[0]), float(probe[2].split(" ±")[0])
    share = round(100 * (c_mae - p_mae) / c_mae)
    assert abs(int(probe[4].split("%")[0]) - share) <= 1
    assert const[4] == "0%"
    # C-index: the mean of seeds 0.50 and 0.51
    assert probe[5] == probe[6] == "0.51"
    assert probe[7] == "2 / 2"
    # a predictor of one world only: dashes where it was not scored
    only = _cells(section, "greedy_only")
    assert only[1] == "—" and only[3] == "—" and only[5] == "—" and only[7] == "0 / 1"
    assert "0 (by construction)" in section
    assert "What bounds a predictor on the greedy world" in section


def test_other_prompts_or_another_cap_do_not_pair(tmp_path):
    other = [f"q{i:03d}" for i in range(60)]
    for kwargs in ({"greedy_prompts": other}, {"greedy_cap": 512}):
        res = tmp_path / f"results-{len(kwargs)}-{next(iter(kwargs))}"
        _worlds(res, **kwargs)
        md = board_text(build_leaderboard(res, tmp_path / "board", site=False))
        assert "Greedy beside sampled" not in md, kwargs


def test_a_greedy_worlds_own_table_takes_its_floor_as_0(tmp_path):
    res = tmp_path / "results"
    _worlds(res)
    md = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    greedy = md.split("(greedy, cap 768)\n", 1)[1].split("\n## ", 1)[0]
    sampled = md.split("(temperature 0.7, cap 768)\n", 1)[1].split("\n## ", 1)[0]
    header = next(ln for ln in greedy.splitlines() if ln.startswith("| Predictor"))
    assert "Share of gap" in header  # (constant - row) / constant: the floor is 0
    assert "Share of gap" not in next(ln for ln in sampled.splitlines()
                                      if ln.startswith("| Predictor"))  # no floor estimate
