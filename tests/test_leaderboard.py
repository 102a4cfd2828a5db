"""The leaderboard built from the golden results folder (tests/data/golden_results).

The folder holds, for toyworld / toy: mlp_probe (dynamic) and bin_classifier (with an
"expectation" variant) at seeds 0 and 1, a noise_floor reference at seed 0, a failed constant run
and one invalid file (broken/, no metrics.static.mae).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers.leaderboard import GOLDEN, board_text, heading_block, synthetic_result

from lenbench.leaderboard import build_leaderboard, main
from lenbench.results import load_results, result_path, write_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("board")
    return board_text(build_leaderboard(GOLDEN, out))


def _table_rows(md: str) -> list[str]:
    """Predictor cells of the first table, in order."""
    lines = [ln for ln in md.splitlines() if ln.startswith("| ")]
    start = next(i for i, ln in enumerate(lines) if ln.startswith("| Predictor"))
    rows = []
    for ln in lines[start + 1:]:
        if ln.startswith("| Dataset"):
            break
        rows.append(ln)
    return rows


def test_mean_std_over_seeds(board: str) -> None:
    rows = {r.split(" | ")[0].lstrip("| "): r for r in _table_rows(board)}
    # mlp_probe static MAE 80, 84: mean 82, sample std sqrt(((80-82)^2 + (84-82)^2) / 1) = 2.83
    # its CIs [70, 90] and [74, 94] average to [72, 92]; dynamic MAE 60, 64 -> 62.0 ± 2.8
    # uncensored MAE 70 [60, 80], 74 [64, 84] -> 72.0 [62.0, 82.0]; C-index 0.7 [0.6, 0.8],
    # 0.8 [0.7, 0.9] -> 0.75 [0.65, 0.85]; runaway AUC 0.9 [0.8, 1.0], 0.8 [0.7, 0.9] -> 0.85
    # [0.75, 0.95]; within 25% 0.25 of 8 rows, 0.375 of 6 -> 31.25% (printed 31.2%) of 7
    # fit 2 s and 4 s -> 3.00; 12345 parameters -> 12.3k
    # it is the paired comparisons' reference (the Δ columns)
    assert rows["mlp_probe"] == (
        "| mlp_probe | 82.0 ± 2.8 | [72.0, 92.0] | (reference) | 72.0 [62.0, 82.0] "
        "| 0.75 [0.65, 0.85] | 0.85 [0.75, 0.95] | 31.2% of 7 "
        "| 62.0 ± 2.8 | (reference) | 3.00 | 0.6 | 12.3k | n/a | 2 |")
    # bin_classifier 90, 100: mean 95, std sqrt(25 + 25) = 7.07; static only -> "—" dynamic
    assert rows["bin_classifier"].startswith("| bin_classifier | 95.0 ± 7.1 | [85.0, 105.0] |")
    # no Δ: these files predate row identities, so they cannot be paired; no dynamic MAE
    assert rows["bin_classifier"].split(" | ")[3] == "—"
    assert rows["bin_classifier"].split(" | ")[8] == "—"
    # its expectation variant 85, 87: mean 86, std sqrt(1 + 1) = 1.41
    assert rows["bin_classifier (expectation)"].startswith(
        "| bin_classifier (expectation) | 86.0 ± 1.4 | [76.0, 96.0] |")
    # one seed: the bare value, no "±"; reference rows are marked
    # a golden file from before the in-sample bound: its single number is said to be one bound
    assert rows["*noise_floor* (ref) (leave-one-out only)"].startswith(
        "| *noise_floor* (ref) (leave-one-out only) | 50.0 | [40.0, 60.0] |")
    assert rows["*noise_floor* (ref) (leave-one-out only)"].endswith("| 1 |")


def test_rows_sorted_by_static_mae(board: str) -> None:
    names = [r.split(" | ")[0].lstrip("| ") for r in _table_rows(board)]
    assert names == ["*noise_floor* (ref) (leave-one-out only)", "mlp_probe",
                     "bin_classifier (expectation)", "bin_classifier"]


def test_failed_and_invalid_listed(board: str) -> None:
    failed = board.split("## Failed runs", 1)[1]
    assert "| toyworld | toy | constant | 0 | ValueError: train split is empty |" in failed
    assert "second line of detail" not in board  # only the message's first line
    invalid = board.split("### Invalid result files", 1)[1]
    assert "toyworld/toy/broken/000000000000.json" in invalid
    assert "'metrics.static.mae' is missing" in invalid
    assert "irreducible error" in board  # the legend explains the reference row


def test_plots_exist_and_are_linked(tmp_path: Path) -> None:
    readme = build_leaderboard(GOLDEN, tmp_path)
    md = board_text(readme)
    for name in ("plot-toyworld__toy-progress.png", "plot-toyworld__toy-scatter.png"):
        assert f"]({name})" in md
        assert (tmp_path / name).read_bytes().startswith(PNG_MAGIC)


def test_rebuild_is_byte_identical_and_removes_stale_plots(tmp_path: Path) -> None:
    first = build_leaderboard(GOLDEN, tmp_path / "a").read_bytes()
    (tmp_path / "a" / "plot-old__gone-progress.png").write_bytes(PNG_MAGIC)
    (tmp_path / "a" / "notes.txt").write_text("mine")
    second = build_leaderboard(GOLDEN, tmp_path / "a").read_bytes()
    elsewhere = build_leaderboard(GOLDEN, tmp_path / "b").read_bytes()
    assert first == second == elsewhere
    assert not (tmp_path / "a" / "plot-old__gone-progress.png").exists()
    assert (tmp_path / "a" / "notes.txt").exists()


def test_newer_rerun_of_a_seed_supersedes_the_older(tmp_path: Path) -> None:
    res = tmp_path / "res"
    shutil.copytree(GOLDEN, res)
    old = next(r for r in load_results(res)[0] if r.predictor.name == "mlp_probe" and r.seed == 0)
    new = json.loads((res / old.source).read_text(encoding="utf-8"))
    new["created_at"] = "2030-01-01T00:00:00Z"
    new["config_hash"] = "ffffffffffff"
    new["metrics"]["static"]["mae"] = 88.0  # seeds now 88, 84 -> 86.0 ± 2.8
    write_result(result_path(res, "toyworld", "toy", "mlp_probe", "ffffffffffff"), new)
    md = board_text(build_leaderboard(res, tmp_path / "out"))
    assert "| mlp_probe | 86.0 ± 2.8 |" in md
    assert "1 older result(s)" in md


def test_empty_results_folder(tmp_path: Path) -> None:
    (tmp_path / "res").mkdir()
    md = board_text(build_leaderboard(tmp_path / "res", tmp_path / "out"))
    assert "No successful results yet." in md
    assert "## Failed runs" in md


def test_main_writes_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--results", str(GOLDEN), "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert f"wrote {tmp_path / 'README.md'}" in captured.out
    assert "broken/000000000000.json" in captured.err


def test_main_missing_results_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--results", str(tmp_path / "missing"), "--out", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "README.md").exists()


def test_other_params_get_their_own_row(tmp_path: Path) -> None:
    res = tmp_path / "res"
    shutil.copytree(GOLDEN, res)
    first = next(r for r in load_results(res)[0] if r.predictor.name == "mlp_probe")
    other = json.loads((res / first.source).read_text(encoding="utf-8"))
    other["predictor"]["params"] = {"hidden": 64}
    other["config_hash"] = "eeeeeeeeeeee"
    other["scheduling"] = {"p99_short_s": 1.0}  # reaches the (empty) scheduling hook harmlessly
    write_result(result_path(res, "toyworld", "toy", "mlp_probe", "eeeeeeeeeeee"), other)
    names = [r.split(" | ")[0].lstrip("| ")
             for r in _table_rows(board_text(build_leaderboard(res, tmp_path / "out")))]
    labelled = [n for n in names if n.startswith("mlp_probe [params ")]
    assert len(labelled) == 2 and labelled[0] != labelled[1]  # never averaged together



def test_display_only_params_share_a_row(tmp_path: Path) -> None:
    """A rerun that differs only in `progress` supersedes the first instead of splitting the row."""
    res = tmp_path / "res"
    shutil.copytree(GOLDEN, res)
    first = next(r for r in load_results(res)[0] if r.predictor.name == "mlp_probe")
    other = json.loads((res / first.source).read_text(encoding="utf-8"))
    other["predictor"]["params"] = {**first.predictor.params, "progress": not
                                    first.predictor.params.get("progress", False)}
    other["config_hash"], other["created_at"] = "eeeeeeeeeeee", "2099-01-01T00:00:00Z"
    other["metrics"]["static"]["mae"] = 1234.5
    write_result(result_path(res, "toyworld", "toy", "mlp_probe", "eeeeeeeeeeee"), other)
    rows = _table_rows(board_text(build_leaderboard(res, tmp_path / "out")))
    names = [r.split(" | ")[0].lstrip("| ") for r in rows]
    assert names.count("mlp_probe") == 1 and not any("[params" in n for n in names)
    row = next(r for r in rows if r.startswith("| mlp_probe |"))
    assert float(row.split(" | ")[1].split(" ± ")[0]) > 600  # seed 0's newest run, 1234.5, counts


@pytest.mark.parametrize("other_model_key", [False, True])
def test_other_dataset_keys_on_the_same_labels_are_not_a_warning(tmp_path: Path,
                                                                  other_model_key) -> None:
    """A dataset key reached another way (a source file installed anew) with the same labels
    fingerprint scores the same rows; another model key may not, and still warns."""
    res = tmp_path / "res"
    shutil.copytree(GOLDEN, res)
    shutil.rmtree(res / "toyworld" / "toy" / "broken")
    for f in res.rglob("*.json"):
        d = json.loads(f.read_text(encoding="utf-8"))
        d["fingerprints"] = {"labels": "abcdef0123456789", "features": None}
        if "mlp_probe" in f.parts:
            d["dataset"]["key"] = "ds0002"
            if other_model_key:
                d["model"]["key"] = "m0002"
        f.write_text(json.dumps(d), encoding="utf-8")
    board = board_text(build_leaderboard(res, tmp_path / "out"))
    assert "dataset key `ds0001`, `ds0002` (the same labels, `abcdef01`)" in board
    assert ("more than one build" in board) == other_model_key

# ---------------------------------------------------------------------------------------------
# predictor details: Predictor.report() and the dynamic observed-steps table, on synthetic results


SPEC = {"tau": 2.5, "alpha": [0.8, 0.6, 0.4], "acc": [0.9, 0.7, 0.5],
        "expected_acceptance": [0.9, 0.63, 0.32], "n_rounds": 40,
        "random_init": {"tau": 1.0, "alpha": [0.0, 0.0, 0.0], "acc": [0.01, 0.0, 0.0],
                        "expected_acceptance": [0.01, 0.0, 0.0]}}


@pytest.fixture(scope="module")
def details(tmp_path_factory: pytest.TempPathFactory) -> str:
    res = tmp_path_factory.mktemp("details_res")
    for seed, (n_bad, tpw) in enumerate([(3, 1.25), (5, 1.25)]):
        synthetic_result(res, "pia", seed, {
            "n_asked": 40, "n_unparseable": n_bad, "tokens_per_word": tpw, "unit": "words",
            "examples": ["'About 150 words' -> 150", "'no idea' -> none"],
            "per_row": list(range(100)),  # long: stays in the file only
            "row_labels": {"predict": "raw, words", "calibrated": "calibrated, tokens/word = 1.25"},
            "nested": {"b": 2, "a": {"c": True}}})
    pia = next(iter((res / "toyworld" / "toy" / "pia").glob("*.json")))
    for path in (res / "toyworld" / "toy" / "pia").glob("*.json"):
        d = json.loads(path.read_text())
        d["metrics"]["variants"] = {"calibrated": d["metrics"]["static"]}
        write_result(path, d)
    assert pia.exists()
    synthetic_result(res, "plp", 0, {}, dynamic={"observed_steps": [0, 8, 16],
                                           "mae_by_observed_steps": [30.0, 25.0, None],
                                           "n_by_observed_steps": [8, 6, 0]},
               predict_ms_per_step=0.5)
    synthetic_result(res, "plp", 1, {}, dynamic={"observed_steps": [0, 8, 16],
                                           "mae_by_observed_steps": [34.0, 27.0, None],
                                           "n_by_observed_steps": [8, 6, 0]},
               predict_ms_per_step=0.7)
    synthetic_result(res, "outlets", 0, {"speculative": SPEC, "overhead_ms": 1.5})
    return board_text(build_leaderboard(res, tmp_path_factory.mktemp("details_out")))


def test_row_labels_come_from_the_report(details: str) -> None:
    names = [r.split(" | ")[0].lstrip("| ") for r in _table_rows(details)]
    assert "pia (raw, words)" in names and "pia (calibrated, tokens/word = 1.25)" in names
    assert "pia" not in names and "plp" in names  # no row_labels: the bare name


def test_report_entries_flattened_sorted_and_aggregated(details: str) -> None:
    assert "### Predictor details" in details
    pia = heading_block(details, "pia")
    keys = [ln.split(" | ")[0].lstrip("| ").strip("`") for ln in pia.splitlines()
            if ln.startswith("| `")]
    # sorted dotted keys; row_labels and the long per_row list are not printed
    assert keys == ["examples", "n_asked", "n_unparseable", "nested.a.c", "nested.b",
                    "tokens_per_word", "unit"]
    assert "| `n_unparseable` | 4 ± 1.4 |" in pia  # seeds 3, 5: mean ± sample std
    assert "| `n_asked` | 40 |" in pia and "| `tokens_per_word` | 1.25 |" in pia
    assert "| `nested.a.c` | true |" in pia and "| `unit` | words |" in pia
    assert "| `examples` | ['About 150 words' -> 150, 'no idea' -> none] |" in pia
    assert "Reported by the predictor (seeds 0, 1)." in pia
    assert "1 longer list(s) are in the result files only." in pia
    assert "#### plp" not in details  # an empty report has no block


def test_observed_steps_table(details: str) -> None:
    block = heading_block(details, "Dynamic MAE by observed steps")
    assert "| Predictor | t = 0 | t = 8 | t = 16 | ms/step |" in block
    assert "| plp | 32.0 ± 2.8 | 26.0 ± 1.4 | — | 0.6 |" in block
    assert "| *requests decoding at t* | 8 | 6 | 0 |  |" in block
    assert "mlp_probe" not in block  # golden dynamic results predate observed steps


def test_speculative_table(details: str) -> None:
    block = heading_block(details, "Speculative decoding quality")
    assert ("| Predictor | τ | α_1 | α_2 | α_3 | acc_0 | acc_1 | acc_2 | E[acc]_0 | E[acc]_1 "
            "| E[acc]_2 |") in block
    assert ("| outlets | 2.50 | 0.800 | 0.600 | 0.400 | 0.900 | 0.700 | 0.500 | 0.900 | 0.630 "
            "| 0.320 |") in block
    assert "| *outlets, random init* (ref) | 1.00 | 0.000 |" in block
    outlets = heading_block(details, "outlets")
    # the table's figures are not repeated; the rest of the speculative dict is
    assert "`speculative.n_rounds` | 40 |" in outlets and "`overhead_ms` | 1.5 |" in outlets
    assert "speculative.tau" not in outlets and "random_init" not in outlets


def test_deep_drafts_show_the_mean_over_depths(tmp_path: Path) -> None:
    spec = {"tau": 3.0, "alpha": [0.5] * 7 + [0.9], "acc": [0.6] * 8}
    synthetic_result(tmp_path / "res", "outlets", 0, {"speculative": spec})
    md = board_text(build_leaderboard(tmp_path / "res", tmp_path / "out"))
    block = heading_block(md, "Speculative decoding quality")
    assert "| Predictor | τ | mean α | mean acc |" in block
    assert "| outlets | 3.00 | 0.550 | 0.600 |" in block


def test_no_details_section_without_reports(tmp_path: Path) -> None:
    assert "Predictor details" not in board_text(build_leaderboard(GOLDEN, tmp_path))
