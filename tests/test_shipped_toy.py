"""The toy model's shipped weights: the default toy config loads them without training, their
card describes them, a damaged file stops with one line naming it, and retraining is a choice
that logs its progress."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from lenbench.configs import preset_config
from lenbench.configs.model import ToyModel
from lenbench.configs.run import LenbenchConfig
from lenbench.models import loading
from lenbench.models.gguf import CARD_FILE
from lenbench.models.shipped_toy import (
    SHIPPED_TOY_DIR,
    retrained_toy_model,
    shipped_model_key,
    shipped_toy_model,
)
from lenbench.models.toy import ToyModelConfig, build_toy_model
from lenbench.worlds.shipped import ShippedWorldError, file_sha256

MAX_SHIPPED_BYTES = 15 * 2**20


def _card() -> dict:
    return json.loads((SHIPPED_TOY_DIR / CARD_FILE).read_text())


def _default_toy() -> ToyModel:
    return preset_config("model", "toy")


class _Trained(Exception):
    """Raised by the stand-in trainer: reaching it means the run would have trained."""


@pytest.fixture
def no_training(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise _Trained("the toy model was trained")

    monkeypatch.setattr("lenbench.models.toy.build_toy_model", refuse)


def test_the_default_toy_config_loads_the_shipped_weights_without_training(
        no_training: None, tmp_path: Path) -> None:
    path, key = loading.resolve_model(_default_toy(), tmp_path / "cache")
    assert Path(path) == SHIPPED_TOY_DIR
    assert key == shipped_model_key(_card())
    assert not (tmp_path / "cache" / "toymodel").exists()
    target = loading.load_target(path, "float32", "cpu")
    assert target.info["n_parameters"] == _card()["n_parameters"]
    assert target.model.config.num_hidden_layers == _default_toy().toy_config.n_layers


def test_retrain_and_other_toy_configs_train_here(no_training: None, tmp_path: Path) -> None:
    with pytest.raises(_Trained):
        loading.resolve_model(replace(_default_toy(), retrain=True), tmp_path / "a")
    default = _default_toy()
    other = replace(default, toy={**default.toy, "seed": 1})  # no weights shipped for this one
    with pytest.raises(_Trained):
        loading.resolve_model(other, tmp_path / "b")


def test_the_card_describes_the_shipped_weights() -> None:
    card = _card()
    assert card["toy_config"] == _default_toy().toy_config.to_dict()
    assert card["packages"]["torch"] and card["build"]["cpu"]["name"]
    assert card["build"]["threads"] == LenbenchConfig.threads  # as the default run trains
    assert card["license"] and card["version"] >= 1
    assert "model.safetensors" in card["files"]
    for name, entry in card["files"].items():
        size = (SHIPPED_TOY_DIR / name).stat().st_size
        assert size == entry["bytes"] < MAX_SHIPPED_BYTES
        assert file_sha256(SHIPPED_TOY_DIR / name) == entry["sha256"]


@pytest.mark.parametrize("damage", ["flip", "missing"])
def test_a_damaged_shipped_file_is_one_line_naming_it(tmp_path: Path, damage: str) -> None:
    folder = tmp_path / "model"
    shutil.copytree(SHIPPED_TOY_DIR, folder)
    weights = folder / "model.safetensors"
    if damage == "flip":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    else:
        weights.unlink()
    cfg = _default_toy().toy_config
    with pytest.raises(ShippedWorldError) as info:
        shipped_toy_model(cfg, folder)
    message = str(info.value)
    assert "\n" not in message and str(weights) in message
    assert ("sha256" in message) if damage == "flip" else ("missing" in message)


def test_a_damaged_shipped_file_stops_the_cli_with_one_line(tmp_path: Path) -> None:
    """`lenbench` on a damaged copy of the shipped weights: exit status 2, one line naming the
    file, no traceback, nothing trained."""
    import subprocess
    import sys

    from helpers.cli import REPO

    folder = tmp_path / "model"
    shutil.copytree(SHIPPED_TOY_DIR, folder)
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "model.safetensors").write_bytes(bytes(data))
    script = ("import sys; from pathlib import Path; import lenbench.models.shipped_toy as s; "
              f"s.SHIPPED_TOY_DIR = Path({str(folder)!r}); from lenbench.cli import main; "
              "sys.argv = ['lenbench', *sys.argv[1:]]; main()")
    proc = subprocess.run([sys.executable, "-c", script, "predictor=constant", "progress=false",
                           f"paths.cache_dir={tmp_path / 'cache'}",
                           f"paths.results_dir={tmp_path / 'results'}",
                           f"paths.leaderboard_dir={tmp_path / 'lb'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("lenbench: ")]
    assert "Traceback" not in proc.stderr
    assert str(folder / "model.safetensors") in errors[0] and "sha256" in errors[0]
    assert not (tmp_path / "cache" / "toymodel").exists()


def test_retraining_logs_progress_lines(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    cfg = ToyModelConfig.tiny(n_train_examples=200, train_steps=20, n_tokenizer_examples=200)
    with caplog.at_level(logging.INFO, logger="lenbench.models.toy"):
        build_toy_model(tmp_path, cfg, progress=False)
    lines = [r.getMessage() for r in caplog.records if r.name == "lenbench.models.toy"]
    progress = [m for m in lines if m.startswith("toy model training: ")]
    assert len(progress) >= 2, lines  # progress=false still writes lines a log file keeps
    assert progress[-1].startswith("toy model training: 20/20 steps (100%)")
    assert any(m.startswith("toy model: trained in") for m in lines)


def test_a_retrained_model_is_compared_with_the_shipped_one(
        caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    cfg = _default_toy().toy_config
    same = tmp_path / "same"
    shutil.copytree(SHIPPED_TOY_DIR, same)
    # the same model: the shipped folder and key, so the shipped world applies to it
    assert retrained_toy_model(same, "trained-key", cfg) == (str(SHIPPED_TOY_DIR),
                                                              shipped_model_key(_card()))
    other = tmp_path / "other"
    shutil.copytree(SHIPPED_TOY_DIR, other)
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(other / "model.safetensors")
    name = next(iter(tensors))
    tensors[name] = tensors[name] + torch.finfo(torch.float32).eps
    save_file(tensors, other / "model.safetensors")
    with caplog.at_level(logging.WARNING, logger="lenbench.models.shipped_toy"):
        assert retrained_toy_model(other, "trained-key", cfg) == (str(other), "trained-key")
    assert any("differ from the shipped ones" in r.getMessage() for r in caplog.records)
    # nothing is shipped for another config: nothing to compare with
    assert retrained_toy_model(same, "k", replace(cfg, seed=1)) == (str(same), "k")
