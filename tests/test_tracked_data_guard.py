"""The session's guard on the repository's tracked data (tests/helpers/tracked.py) sees a file a
test wrote into, and nothing else."""

from __future__ import annotations

import subprocess

from helpers.tracked import changed_since, tracked_state


def test_a_write_into_a_tracked_data_file_is_named(tmp_path) -> None:
    repo = tmp_path / "repo"
    (repo / "leaderboard" / "results").mkdir(parents=True)
    (repo / "leaderboard" / "results" / "r.json").write_text("{}")
    (repo / "leaderboard" / "README.md").write_text("# board\n")
    (repo / "src.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    before = tracked_state(repo, ("leaderboard",))
    assert sorted(before) == ["leaderboard/README.md", "leaderboard/results/r.json"]
    (repo / "src.py").write_text("x = 2\n")  # not guarded
    (repo / "leaderboard" / "untracked.json").write_text("{}")  # not tracked
    assert changed_since(before, repo, ("leaderboard",)) == []
    (repo / "leaderboard" / "results" / "r.json").write_text('{"a": 1}')
    assert changed_since(before, repo, ("leaderboard",)) == ["leaderboard/results/r.json"]
    assert changed_since(None, repo, ("leaderboard",)) == []
