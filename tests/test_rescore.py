"""Rescoring a result of an earlier protocol from its stored predictions gives the figures a fresh
run gives, keeps (and marks) what the stored rows cannot give, and refuses a file whose rows do
not reproduce its own MAE."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
from helpers.leaderboard import board_text
from helpers.worlds import CAP, CFG, make_world

from lenbench import Predictor
from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.evaluate import evaluate_predictor
from lenbench.leaderboard import build_leaderboard
from lenbench.results import PROTOCOL_VERSION, json_safe, load_results, result_path, write_result
from lenbench.results.rescore import NotRescored, main, rescore_result

NEW_STATIC = ("c_index", "c_index_ci", "n_comparable_pairs", "within_25_ci", "within_25_n",
              "mae_uncensored", "mae_uncensored_ci", "runaway_auc", "runaway_auc_ci",
              "n_runaway")
NEW_DIST = ("runaway_auc", "runaway_auc_ci", "q75_at_cap", "q90_at_cap")


class ByPrompt(Predictor):
    """Predicts from the prompt id (the world's lengths are a formula of it), with a quantile band
    around the point and a halved variant."""

    def fit(self, train, val=None) -> None:
        pass

    def predict(self, split) -> np.ndarray:
        ids = np.array([int(g[1:]) for g in split.group_ids])
        return 10.0 + (ids * 37) % 200 + 5.0 * (ids % 3)

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return {"half": self.predict(split) / 2}

    def predict_distribution(self, split) -> LengthDistribution:
        """Quantiles that stop at the cap (as conformal's do), so that the stored ones, clipped
        there, are the distribution itself."""
        point = self.predict(split)
        return LengthDistribution.from_quantiles(
            QUANTILE_LEVELS, np.minimum(point[:, None] * np.array([0.5, 0.8, 1.0, 1.3, 1.8]),
                                        CAP))


@pytest.fixture(scope="module")
def fresh() -> dict:
    world = make_world(2, censor_every=5)
    return json_safe(evaluate_predictor(ByPrompt(), "bp", {"name": "bp"}, world, CFG, seed=0))


def as_protocol_2(result: dict) -> dict:
    """The file an earlier protocol wrote for the same run: without the figures protocol 3 added,
    within ±25% by the old rule."""
    old = copy.deepcopy(result)
    old["protocol_version"] = 2
    static = old["metrics"]["static"]
    for key in NEW_STATIC:
        static.pop(key)
    static["within_25"] = 0.9  # whatever the old rule gave
    for key in NEW_DIST:
        old["metrics"]["distribution"]["static"].pop(key)
    old["predictions"].pop("p_cap")
    return old


def test_rescoring_gives_the_fresh_figures_and_keeps_the_variants(fresh: dict) -> None:
    assert fresh["metrics"]["static"]["n_censored"] > 0
    old = as_protocol_2(fresh)
    new, note = rescore_result(old)
    assert new["protocol_version"] == fresh["protocol_version"] == PROTOCOL_VERSION
    for key in (*NEW_STATIC, "within_25", "mae", "mae_ci", "kendall_tau"):
        assert new["metrics"]["static"][key] == pytest.approx(fresh["metrics"]["static"][key]), key
    for key in NEW_DIST:  # a quantile predictor: P(L >= cap) from its stored quantiles is its own
        assert new["metrics"]["distribution"]["static"][key] == pytest.approx(
            fresh["metrics"]["distribution"]["static"][key]), key
    np.testing.assert_allclose(new["predictions"]["p_cap"], fresh["predictions"]["p_cap"])
    # the variant stores no predictions: its block is the earlier protocol's, and said to be
    assert new["metrics"]["variants"] == old["metrics"]["variants"]
    assert note["kept"] == {"metrics.variants": 2} and note["p_cap"] == "stored quantiles"
    assert new["rescored"] == note and note["from_protocol"] == 2
    with pytest.raises(NotRescored, match=f"already protocol {PROTOCOL_VERSION}"):
        rescore_result(new)


def test_a_file_whose_rows_do_not_give_its_mae_is_left_alone(fresh: dict, tmp_path: Path,
                                                              capsys) -> None:
    old = as_protocol_2(fresh)
    old["predictions"]["pred"][0] += 50.0  # the stored rows no longer give the recorded MAE
    with pytest.raises(NotRescored, match="the stored rows give MAE"):
        rescore_result(old)
    path = write_result(result_path(tmp_path, "w", "m", "bp", "x"), old)
    before = path.read_bytes()
    assert main([str(tmp_path)]) == 0
    assert path.read_bytes() == before
    assert "left as it is (the stored rows give MAE" in capsys.readouterr().out


def test_the_tool_prints_old_and_new_and_the_board_marks_only_the_kept_rows(
        fresh: dict, tmp_path: Path, capsys) -> None:
    res = tmp_path / "results"
    path = write_result(result_path(res, "w", "m", "bp", "x"), as_protocol_2(fresh))
    assert main([str(res), "--dry-run"]) == 0
    assert json.loads(path.read_text())["protocol_version"] == 2  # a dry run writes nothing
    out = capsys.readouterr().out
    c_index = fresh["metrics"]["static"]["c_index"]
    assert f"| w/m/bp/x.json | C-index | — | {c_index:.3f} |" in out
    assert "| w/m/bp/x.json | Within ±25% | 0.900 |" in out
    assert "kept: metrics.variants (protocol 2)" in out
    assert main([str(res), "--out", str(tmp_path / "old-vs-new.md")]) == 0
    assert (tmp_path / "old-vs-new.md").read_text().startswith("| file | figure | old | new |")
    (result,), problems = load_results(res)
    assert not problems and result.protocol_version == PROTOCOL_VERSION
    assert result.kept_protocols == {"metrics.variants": 2}
    board = board_text(build_leaderboard(res, tmp_path / "board", site=False))
    world = board.split("\n## Verdict", 1)[-1].split("\n## ", 1)[-1]  # past the verdict
    main_table = world.split("| Predictor |", 1)[1].split("\n\n", 1)[0]
    names = sorted(ln.split(" | ")[0].lstrip("| ") for ln in main_table.splitlines()
                   if ln.startswith("| bp"))
    assert names == ["bp", "bp (half) ‡"]
    assert "were rescored from their stored predictions" in board
    # its P(L >= cap) was read from the stored quantiles: the distribution table says so
    distributions = board.split("### Distributions", 1)[1]
    dist = json.loads(path.read_text())["metrics"]["distribution"]["static"]
    assert f"| ≈ {dist['runaway_auc']:.2f} [" in distributions and dist["q90_at_cap"] > 0


def test_the_scheduling_block_is_kept_until_its_own_tool_rescores_it(fresh: dict) -> None:
    """This tool recomputes static figures only: a file whose static figures are current is left
    alone, and an older file's scheduling block, whose rules a later protocol changed, is kept
    and said to be, until `rescore_scheduling` recomputes it."""
    from helpers.leaderboard import schedule

    from lenbench.rescore_scheduling import rescore_result as rescore_scheduling_of

    sim = {"enabled": True, "n_prefill": 1, "n_decode": 1, "max_num_seqs": 4,
           "n_requests": 60, "seeds": [0], "score_metric": "e2e_mean_short"}
    true, pred = fresh["predictions"]["true"], fresh["predictions"]["pred"]
    prompt = np.full(len(true), 12)
    old = {**as_protocol_2(fresh), "scheduling": schedule(np.asarray(true), np.asarray(pred),
                                                          prompt, "bp", sim)}
    with pytest.raises(NotRescored, match="protocol 3: its static figures are current"):
        rescore_result({**old, "protocol_version": 3})
    new, note = rescore_result(old)
    assert note["kept"] == {"metrics.variants": 2, "scheduling": 2}
    assert new["scheduling"] == old["scheduling"] and new["protocol_version"] == PROTOCOL_VERSION
    done = rescore_scheduling_of(new, prompt)
    assert done["rescored"]["kept"] == {"metrics.variants": 2}
    assert done["scheduling"]["score_metric"] == "e2e_mean_all"
    assert done["protocol_version"] == PROTOCOL_VERSION
