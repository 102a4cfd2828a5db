"""Your runs beside the published ones: `lenbench-leaderboard --results A --results B` builds one
leaderboard from both folders, with links that reach each file."""

from __future__ import annotations

import re
import shutil

from helpers.leaderboard import GOLDEN, board_text, synthetic_result

from lenbench.leaderboard import main


def test_two_results_folders_make_one_table_with_working_links(tmp_path, capsys):
    published, mine = tmp_path / "published", tmp_path / "work" / "results"
    shutil.copytree(GOLDEN, published)
    synthetic_result(mine, "word_median", 0)
    out = tmp_path / "board"
    assert main(["--results", str(published), "--results", str(mine), "--out", str(out)]) == 0
    md = board_text(out / "README.md")
    table = md.split("| Predictor", 1)[1].split("\n\n", 1)[0]
    assert "| word_median |" in table and "| mlp_probe |" in table  # one table, both folders
    printed = capsys.readouterr().out
    assert str(published) in printed and str(mine) in printed
    page = next(out.glob("world-*.html")).read_text(encoding="utf-8")
    links = re.findall(r'href="([^"]+\.json)"', page)
    assert links and any("word_median" in link for link in links)
    for link in links:
        assert (out / link).resolve().is_file(), link


def test_a_missing_second_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "board"
    code = main(["--results", str(GOLDEN), "--results", str(tmp_path / "nope"),
                 "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "nope" in capsys.readouterr().err
