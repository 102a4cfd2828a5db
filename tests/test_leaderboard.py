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

from lenbench.leaderboard import build_leaderboard, main
from lenbench.results import load_results, result_path, write_result

GOLDEN = Path(__file__).parent / "data" / "golden_results"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def board(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("board")
    return build_leaderboard(GOLDEN, out).read_text(encoding="utf-8")


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
    # Kendall tau 0.5, 0.6 -> 0.550; within 25% 0.25, 0.375 -> 31.25% (printed 31.2%)
    # fit 2 s and 4 s -> 3.00; 12345 parameters -> 12.3k
    assert rows["mlp_probe"] == (
        "| mlp_probe | 82.0 ± 2.8 | [72.0, 92.0] | 0.550 | 0.650 | 31.2% | 62.0 ± 2.8 | 3.00 "
        "| 0.6 | 12.3k | 2 |")
    # bin_classifier 90, 100: mean 95, std sqrt(25 + 25) = 7.07; static only -> "—" dynamic
    assert rows["bin_classifier"].startswith("| bin_classifier | 95.0 ± 7.1 | [85.0, 105.0] |")
    assert rows["bin_classifier"].split(" | ")[6] == "—"
    # its expectation variant 85, 87: mean 86, std sqrt(1 + 1) = 1.41
    assert rows["bin_classifier (expectation)"].startswith(
        "| bin_classifier (expectation) | 86.0 ± 1.4 | [76.0, 96.0] |")
    # one seed: the bare value, no "±"; reference rows are marked
    assert rows["*noise_floor* (ref)"].startswith("| *noise_floor* (ref) | 50.0 | [40.0, 60.0] |")
    assert rows["*noise_floor* (ref)"].endswith("| 1 |")


def test_rows_sorted_by_static_mae(board: str) -> None:
    names = [r.split(" | ")[0].lstrip("| ") for r in _table_rows(board)]
    assert names == ["*noise_floor* (ref)", "mlp_probe", "bin_classifier (expectation)",
                     "bin_classifier"]


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
    md = readme.read_text(encoding="utf-8")
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
    old = next(r for r in load_results(res)[0]
               if r["predictor"]["name"] == "mlp_probe" and r["seed"] == 0)
    new = json.loads(json.dumps(old))
    del new["_source"]
    new["created_at"] = "2030-01-01T00:00:00Z"
    new["config_hash"] = "ffffffffffff"
    new["metrics"]["static"]["mae"] = 88.0  # seeds now 88, 84 -> 86.0 ± 2.8
    write_result(result_path(res, "toyworld", "toy", "mlp_probe", "ffffffffffff"), new)
    md = build_leaderboard(res, tmp_path / "out").read_text(encoding="utf-8")
    assert "| mlp_probe | 86.0 ± 2.8 |" in md
    assert "1 older result(s)" in md


def test_empty_results_folder(tmp_path: Path) -> None:
    (tmp_path / "res").mkdir()
    md = build_leaderboard(tmp_path / "res", tmp_path / "out").read_text(encoding="utf-8")
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
    other = next(r for r in load_results(res)[0] if r["predictor"]["name"] == "mlp_probe")
    del other["_source"]
    other["predictor"]["params"] = {"hidden": 64}
    other["config_hash"] = "eeeeeeeeeeee"
    other["scheduling"] = {"p99_short_s": 1.0}  # reaches the (empty) scheduling hook harmlessly
    write_result(result_path(res, "toyworld", "toy", "mlp_probe", "eeeeeeeeeeee"), other)
    names = [r.split(" | ")[0].lstrip("| ")
             for r in _table_rows(build_leaderboard(res, tmp_path / "out").read_text())]
    labelled = [n for n in names if n.startswith("mlp_probe [params ")]
    assert len(labelled) == 2 and labelled[0] != labelled[1]  # never averaged together
