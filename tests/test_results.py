"""Result files: atomic writes, validation messages that name the field, tolerant loading."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lenbench.results import (
    SCHEMA_VERSION,
    ResultError,
    computing_params,
    config_hash,
    environment_info,
    git_info,
    load_results,
    result_path,
    utc_now,
    validate_result,
    write_result,
)

GOLDEN = Path(__file__).parent / "data" / "golden_results"


def _ok_result() -> dict[str, Any]:
    path = GOLDEN / "toyworld" / "toy" / "mlp_probe"
    return json.loads(min(path.glob("*.json")).read_text())


def test_golden_results_are_valid() -> None:
    results, problems = load_results(GOLDEN)
    assert len(results) == 6  # 5 ok + 1 failed
    assert [p.split(":")[0] for p in problems] == ["toyworld/toy/broken/000000000000.json"]
    assert all(r.schema_version == SCHEMA_VERSION for r in results)


def test_write_result_replaces_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = result_path(tmp_path, "toyworld", "toy", "mlp_probe", "abc123")
    r = _ok_result()
    write_result(path, r)
    r["metrics"]["static"]["mae"] = 1.5
    write_result(path, r)
    assert json.loads(path.read_text())["metrics"]["static"]["mae"] == 1.5
    assert [p.name for p in path.parent.iterdir()] == ["abc123.json"]


def test_write_result_failure_keeps_old_file(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_result(path, {"a": 1})
    with pytest.raises(TypeError):
        write_result(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_result_serialises_numpy_and_nan(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_result(path, {"x": np.float32(0.5), "n": np.int64(3), "v": np.arange(3),
                        "bad": float("nan"), "p": tmp_path})
    assert json.loads(path.read_text()) == {"x": 0.5, "n": 3, "v": [0, 1, 2], "bad": None,
                                            "p": str(tmp_path)}


def test_result_path_is_deterministic_and_filesystem_safe(tmp_path: Path) -> None:
    p = result_path(tmp_path, "share/gpt", "meta-llama/Llama-3.2-1B", "..", "0123abcd4567")
    assert p == tmp_path / "share_gpt" / "meta-llama_Llama-3.2-1B" / "__" / "0123abcd4567.json"


def test_display_only_settings_leave_the_identity_at_every_depth() -> None:
    """A wrapped predictor's progress flag (conformal's `base`) is display-only too; a
    `progress` that is not a flag is somebody's real setting and stays."""
    on = {"alpha": 0.2, "progress": True, "base": {"_target_": "m", "progress": True, "k": 1}}
    off = {"alpha": 0.2, "progress": False, "base": {"_target_": "m", "progress": False, "k": 1}}
    assert config_hash(computing_params(on)) == config_hash(computing_params(off))
    assert computing_params(on) == {"alpha": 0.2, "base": {"_target_": "m", "k": 1}}
    assert computing_params({"progress": "by_step"}) == {"progress": "by_step"}
    assert config_hash(computing_params({**off, "alpha": 0.1})) != \
        config_hash(computing_params(off))


def test_config_hash_is_stable() -> None:
    a = config_hash({"seed": 0, "predictor": {"k": 10, "name": "knn"}})
    b = config_hash({"predictor": {"name": "knn", "k": 10}, "seed": 0})
    assert a == b and len(a) == 12 and int(a, 16) >= 0
    assert config_hash({"seed": 1, "predictor": {"k": 10, "name": "knn"}}) != a


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r["metrics"]["static"].pop("mae"), "metrics.static.mae"),
        (lambda r: r["metrics"]["static"].update(mae="12"), "metrics.static.mae"),
        (lambda r: r["metrics"]["static"].update(mae_ci=[1.0]), "metrics.static.mae_ci"),
        (lambda r: r["metrics"]["dynamic"].pop("mae_by_progress"),
         "metrics.dynamic.mae_by_progress"),
        (lambda r: r.update(seed="0"), "seed"),
        (lambda r: r["dataset"].pop("name"), "dataset.name"),
        (lambda r: r.pop("git"), "git"),
        (lambda r: r.update(status="done"), "status"),
        (lambda r: r.update(kind="baseline"), "kind"),
        (lambda r: r["metrics"].update(static=None, dynamic=None), "metrics"),
        (lambda r: r["predictions"]["pred"].pop(), "predictions"),
    ],
)
def test_validate_names_file_and_field(edit: Any, field: str) -> None:
    r = copy.deepcopy(_ok_result())
    edit(r)
    with pytest.raises(ResultError) as info:
        validate_result(r, source="runs/x.json")
    msg = str(info.value)
    assert msg.startswith("runs/x.json: ")
    assert f"'{field}'" in msg
    assert "fix:" in msg


def test_validate_schema_version_from_the_future() -> None:
    r = _ok_result()
    r["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ResultError, match="upgrade lenbench"):
        validate_result(r)


def test_failed_result_needs_error_not_metrics() -> None:
    failed = json.loads(next((GOLDEN / "toyworld" / "toy" / "constant").glob("*.json")).read_text())
    assert validate_result(failed)["status"] == "failed"
    failed["error"]["message"] = ""  # str(RuntimeError()) is empty; still a valid failure record
    failed["metrics"] = failed["timings"] = None
    assert validate_result(failed)["status"] == "failed"
    failed["error"] = None
    with pytest.raises(ResultError, match="'error'"):
        validate_result(failed)


def test_written_files_have_ordinary_permissions(tmp_path: Path) -> None:
    """Shared result folders: a result is as readable as any file the user creates."""
    import os

    old = os.umask(0o022)
    try:
        path = write_result(tmp_path / "r.json", {"a": 1})
        plain = tmp_path / "plain.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == plain.stat().st_mode & 0o777 == 0o644


def test_a_failed_plot_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run killed while rendering a plot must not leave a 0-byte PNG behind."""
    from matplotlib.figure import Figure

    from lenbench.leaderboard.plots import save_png

    def boom(self: Figure, target: Any, *args: Any, **kwargs: Any) -> None:
        """Start writing, then die, as a killed render does."""
        if hasattr(target, "write"):
            target.write(b"\x89PNG")
        else:
            Path(target).write_bytes(b"")
        raise KeyboardInterrupt

    fig = Figure()
    fig.subplots().plot([1, 2], [3, 4])
    monkeypatch.setattr(Figure, "savefig", boom)
    with pytest.raises(KeyboardInterrupt):
        save_png(fig, tmp_path / "plot.png")
    assert list(tmp_path.iterdir()) == []


def test_load_results_reports_bad_files_and_ignores_temp_files(tmp_path: Path) -> None:
    shutil.copytree(GOLDEN, tmp_path / "res")
    (tmp_path / "res" / "garbage.json").write_text("{not json")
    (tmp_path / "res" / "toyworld" / ".r.json.123.tmp").write_text("{")
    (tmp_path / "res" / ".hidden.json").write_text("{")
    results, problems = load_results(tmp_path / "res")
    assert len(results) == 6
    assert len(problems) == 2
    assert problems[0].startswith("garbage.json: not readable JSON")
    assert all(r.source.endswith(".json") for r in results)


def test_load_results_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_results(tmp_path / "nope")


def test_environment_and_git_info(tmp_path: Path) -> None:
    env = environment_info(device="cpu")
    expected = {"python", "platform", "torch", "transformers", "numpy", "device", "cpu_count"}
    assert expected <= set(env)
    assert env["device"] == "cpu"
    # the CPU and the instruction sets that change float results, as on a world's card
    assert set(env["cpu"]) == {"name", "machine", "flags"}
    assert set(env["cpu"]["flags"]) <= {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile",
                                        "fma"}
    assert git_info(tmp_path) == {"revision": None, "dirty": None}
    assert utc_now().endswith("Z")
