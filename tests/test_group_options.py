"""Every option of every config group, chosen alone over the defaults, composes and passes the
checks the CLI makes before any work: an option that only validates beside another (a batch
size an experiment happens to set) would fail a user who picks it on its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from lenbench.cli import CONF_DIR, check_run_config
from lenbench.validate import ConfigError

CONF = Path(CONF_DIR)
# Options that need a value only the user has: the intended error names it, and the option
# passes once it is given (the value is filled in by the test).
NEEDS = {
    "dataset=jsonl": ("dataset.path: required, but not set (add dataset.path=... to the command)",
                      "dataset.path={jsonl}"),
    "model=local": ("model.path: required, but not set (add model.path=... to the command)",
                    "model.path=org/name"),
}


def _groups() -> list[Path]:
    """The config groups: every folder of conf/ but Hydra's own settings (hydra/)."""
    return sorted(p for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")


def _options() -> list[str]:
    return [f"{g.name}={f.relative_to(g).with_suffix('').as_posix()}"
            for g in _groups() for f in sorted(g.rglob("*.yaml"))]


def _check(*overrides: str) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        check_run_config(compose("config", overrides=list(overrides)))


def test_every_group_is_enumerated():
    assert {g.name for g in _groups()} >= {"dataset", "model", "generation", "predictor", "sim",
                                           "eval", "features", "paths", "experiment"}
    assert set(NEEDS) <= set(_options())
    assert {"generation=llamacpp", "predictor=cpu/outlets"} <= set(_options())


@pytest.mark.parametrize("option", _options())
def test_each_option_composes_and_validates_alone(option, tmp_path):
    if option not in NEEDS:
        _check(option)
        return
    problem, fix = NEEDS[option]
    with pytest.raises(ConfigError) as err:
        _check(option)
    assert err.value.problems == [problem]
    jsonl = tmp_path / "prompts.jsonl"
    jsonl.write_text('{"prompt": "Name one colour."}\n')
    _check(option, fix.format(jsonl=jsonl))


@pytest.mark.parametrize("backend", ["hf", "llamacpp", "vllm"])
def test_a_null_batch_size_is_refused_only_where_it_is_read(backend):
    """Server backends batch their requests themselves; the hf decoder needs a number."""
    overrides = [f"generation={backend}", "generation.batch_size=null"]
    if backend != "hf":
        _check(*overrides)
        return
    with pytest.raises(ConfigError) as err:
        _check(*overrides)
    assert err.value.problems == ["generation.batch_size=None: the hf backend needs an integer "
                                  ">= 1 (rows decoded together)"]
