"""A bad config or input file fails before any model work: one line per problem, exit status 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.cli import REPO, run_lenbench
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lenbench.validate import config_problems


def problems(*overrides: str) -> list[str]:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=list(overrides))
    return config_problems(OmegaConf.to_container(cfg, resolve=True))


def test_the_shipped_presets_are_valid() -> None:
    assert problems() == []
    assert problems("experiment=real_smollm2") == []
    assert problems("experiment=real_smollm2_v1") == []
    assert problems("dataset=sharegpt_wheel", "model=gemma3-270m") == []


@pytest.mark.parametrize(("override", "field"), [
    ("dataset.limit=-5", "dataset.limit=-5: must be an integer >= 1"),
    ("generation.n_samples=0", "generation.n_samples=0: must be an integer >= 1"),
    ("generation.max_new_tokens=0", "generation.max_new_tokens=0: must be an integer >= 1"),
    ("generation.temperature=-1", "generation.temperature=-1.0: must be a number in [0, inf)"),
    ("generation.top_p=0", "generation.top_p=0.0: must be a number in (0, 1]"),
    ("eval.ci=95", "eval.ci=95.0: must be a number in (0, 1)"),
    ("eval.n_boot=-1", "eval.n_boot=-1: must be an integer >= 0"),
    ("threads=0", "threads=0: must be an integer >= 1"),
    ("features.step_stride=0", "features.step_stride=0: must be an integer >= 1"),
    ("device=gpu", "device='gpu': use auto, cpu, cuda or cuda:N"),
    ("generation.backend=tgi", "generation.backend='tgi': use one of"),
    ("features.roles=[mid,top]", "features.roles: unknown ['top']"),
    ("dataset.split={train:0.5,val:0.1,test:0.1}", "dataset.split="),
    ("dataset.max_words=0", "dataset.max_words=0: must be an integer >= 1"),
    ("generation.worker=3", "generation.worker=3: must be null or 0..0"),
    ("sim.queue=random", "sim: "),
])
def test_each_bad_value_is_one_line_naming_its_field(override: str, field: str) -> None:
    found = problems(override)
    assert len(found) == 1, found
    assert found[0].startswith(field), found


@pytest.mark.parametrize(("override", "field"), [
    ("generation.max_new_tokens=1.5", "generation.max_new_tokens"),
    ("generation.keep_censored=maybe", "generation.keep_censored"),
])
def test_a_wrong_type_fails_earlier_at_compose_time(override: str, field: str) -> None:
    """Types are the schemas' (lenbench/configs/): Hydra rejects these before validation."""
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException) as err:
        problems(override)
    assert field in f"{err.value} {err.value.__cause__}"


def test_every_problem_is_reported_at_once() -> None:
    found = problems("dataset.limit=-5", "generation.n_samples=0", "generation.top_p=2")
    assert [p.split("=")[0] for p in found] == ["dataset.limit", "generation.n_samples",
                                                "generation.top_p"]


def test_files_must_exist_be_non_empty_and_parse(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    not_json = tmp_path / "bad.jsonl"
    not_json.write_text("prompt,length\nhello,3\n")
    a_list = tmp_path / "list.jsonl"
    a_list.write_text('[{"prompt": "x"}]\n')
    good = tmp_path / "good.jsonl"
    good.write_text('{"prompt": "x", "length": 3}\n')
    assert problems("dataset=jsonl", f"dataset.path={tmp_path / 'nope.jsonl'}") == [
        f"dataset.path='{tmp_path / 'nope.jsonl'}': no such file or folder"]
    assert problems("dataset=jsonl", f"dataset.path={empty}")[0].endswith("the file is empty")
    assert "line 1 is not JSON" in problems("dataset=jsonl", f"dataset.path={not_json}")[0]
    assert "line 1 is a JSON list" in problems("dataset=jsonl", f"dataset.path={a_list}")[0]
    assert problems("dataset=jsonl", f"dataset.path={good}") == []
    # one bad line among good ones is a counted bad row for the source, not a config error
    first_bad = tmp_path / "first_bad.jsonl"
    first_bad.write_text('{"prompt": "x", "len\n{"prompt": "y", "length": 3}\n')
    assert problems("dataset=jsonl", f"dataset.path={first_bad}") == []
    assert problems("model=local", "model.path=/no/such/model.gguf") == [
        "model.path='/no/such/model.gguf': no such file or folder (a hub id looks like org/name)"]


@pytest.mark.parametrize("overrides", [
    ("dataset=jsonl", "dataset.path=/nonexistent/file.jsonl"),
    ("dataset=jsonl",),
    ("generation.n_samples=0",),
])
def test_the_cli_exits_2_before_any_model_work_without_a_traceback(tmp_path: Path,
                                                                    overrides) -> None:
    proc = run_lenbench(*overrides, f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.results_dir={tmp_path / 'res'}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("lenbench: ")]
    assert len(lines) == 2 and "stopped before any model work" in lines[1], proc.stderr
    # no model stage was built and no result written: the run stopped at validation
    assert not (tmp_path / "cache" / "model").exists() and not (tmp_path / "res").exists()


def test_a_file_with_no_usable_row_stops_before_the_model(tmp_path: Path) -> None:
    """Lengths given as strings: every row is a counted bad row, and the run stops at once."""
    f = tmp_path / "str.jsonl"
    f.write_text('{"prompt": "one", "length": "ten"}\n{"prompt": "two", "length": "five"}\n')
    proc = run_lenbench("dataset=jsonl", f"dataset.path={f}", f"paths.cache_dir={tmp_path / 'c'}",
                        f"paths.results_dir={tmp_path / 'res'}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "no usable prompt among 2 rows read; dropped by reason {'wrong_type': 2}" in proc.stderr
    assert "str.jsonl:1: 'length' must be a positive integer" in proc.stderr
    assert not (tmp_path / "c" / "model").exists()


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = run_lenbench("generation.n_samples=0", "debug=true",
                        f"paths.cache_dir={tmp_path / 'c'}", timeout=120)
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr or "ConfigError" in proc.stderr


def test_a_typo_in_the_toy_model_block_is_one_line_before_any_model_work() -> None:
    """`model.toy` is ToyModelConfig's fields: a preset's misspelt key is named up front."""
    found = problems("+model.toy.n_layer=3")
    assert len(found) == 1 and found[0].startswith("model.toy: unknown keys ['n_layer']"), found


@pytest.mark.parametrize("override", ["generation.temprature=0.5", "+generation.temprature=0.5"])
def test_an_unknown_key_is_one_line_naming_the_closest_key(tmp_path: Path, override: str) -> None:
    """Set or appended, a key no schema knows stops the run in two lines, exit status 2, with
    the key it was probably meant to be and no advice to append it."""
    proc = run_lenbench(override, f"paths.cache_dir={tmp_path / 'cache'}",
                        f"paths.results_dir={tmp_path / 'res'}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert lines == ["lenbench: generation.temprature: not a key of generation (did you mean "
                     "generation.temperature?)",
                     "lenbench: stopped before any model work (debug=true shows the traceback)"]
    assert not (tmp_path / "res").exists()


def test_unknown_keys_are_named_wherever_a_schema_types_the_node() -> None:
    from lenbench.validate import unknown_key_problems

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "++sim.qpss=2", "++eval.nboot=3", "++generation.zzz=1", "++predictor.anything=1",
            "++dataset.split.train=0.7"])
    found = unknown_key_problems(cfg)
    zzz = next(p for p in found if p.startswith("generation."))
    assert zzz.startswith("generation.zzz: not a key of generation (it has backend, ")
    assert sorted(p.split(":")[0] for p in found) == ["eval.nboot", "generation.zzz", "sim.qpss"]
    assert "did you mean sim.qps?" in next(p for p in found if p.startswith("sim."))
    assert "did you mean eval.n_boot?" in next(p for p in found if p.startswith("eval."))
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        assert unknown_key_problems(compose(config_name="config",
                                            overrides=["experiment=real_smollm2"])) == []


def test_the_command_line_opens_group_keys_to_the_checks() -> None:
    """`group.key=value` is set whether or not the preset lists the key (a constructor argument);
    groups with a choice (`predictor=knn`), appended and deleted keys and Hydra's own keys are
    left as written."""
    from lenbench.cli import open_group_overrides

    assert open_group_overrides([
        "predictor.k=3", "generation.temprature=0.5", "predictor=knn", "-m", "seed=1",
        "+dataset.limit=3", "~eval.n_boot", "hydra.searchpath=[file://x]", "--cfg", "job",
        "dataset@transfer=jsonl", "transfer.path=a.jsonl", "predictor.base.epochs=2",
    ]) == ["++predictor.k=3", "++generation.temprature=0.5", "predictor=knn", "-m", "seed=1",
           "+dataset.limit=3", "~eval.n_boot", "hydra.searchpath=[file://x]", "--cfg", "job",
           "dataset@transfer=jsonl", "transfer.path=a.jsonl", "++predictor.base.epochs=2"]


@pytest.mark.parametrize(("override", "first"), [
    ("generation.max_new_tokens=many", "lenbench: generation.max_new_tokens: Value 'many' of "
                                       "type 'str' could not be converted to Integer"),
    ("temprature=0.5", "lenbench: temprature: not a key of the config (it has dataset, "),
])
def test_what_hydra_refuses_is_worded_the_same_way(tmp_path: Path, override: str,
                                                  first: str) -> None:
    """A wrong type or a root key no schema has fails while Hydra composes the config: the same
    two lines and exit status 2, with no `++` the command line did not have."""
    proc = run_lenbench(override, f"paths.cache_dir={tmp_path / 'cache'}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 2 and lines[0].startswith(first), lines
    assert lines[1] == ("lenbench: stopped before any model work (HYDRA_FULL_ERROR=1 shows the "
                        "traceback)")
    assert "++" not in proc.stderr and "append" not in proc.stderr
