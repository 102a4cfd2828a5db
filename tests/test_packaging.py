"""A non-editable install carries the Hydra configs and the shipped worlds: the wheel holds every
YAML of conf/ and every file of the toy world."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.cli import REPO


@pytest.mark.slow
def test_the_wheel_ships_every_config(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy of what the wheel is built from: nothing is written in REPO
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "lenbench", "baselines"):
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                        if (REPO / name).is_dir() else {}))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path), str(src)],
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wheel = next(tmp_path.glob("lenbench-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.removeprefix("lenbench/conf/") for n in names if n.startswith("lenbench/conf/")}
    expected = {str(p.relative_to(REPO / "lenbench" / "conf"))
                for p in (REPO / "lenbench" / "conf").rglob("*.yaml")}
    assert expected and expected <= shipped
    assert "lenbench/cli.py" in names and "baselines/outlets.py" in names
    assert "lenbench/configs/__init__.py" in names  # the schemas every preset starts from
    assert "lenbench/testing.py" in names  # synthetic splits for a predictor's own tests
    # the default run's world: the toy model's weights and the toy world's samples, with cards
    world = REPO / "lenbench" / "worlds" / "toyworld"
    shipped = {str(p.relative_to(REPO)) for p in world.rglob("*") if p.is_file()}
    assert "lenbench/worlds/toyworld/model/model.safetensors" in shipped
    assert "lenbench/worlds/toyworld/samples.parquet" in shipped
    assert shipped <= names
