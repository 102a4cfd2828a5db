"""Typed configs: every preset composes into its schema, mistakes fail at compose time naming the
field, and no preset repeats a default its schema (a predictor's: its parent preset, else its
constructor) already holds."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
import yaml
from helpers.cli import run_lenbench
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from hydra.utils import get_class
from omegaconf import OmegaConf

from lenbench.cli import CONF_DIR
from lenbench.configs import SCHEMAS
from lenbench.contract.instantiate import (
    instantiate_predictor,
    predictor_arg_problems,
    suite_problems,
)

CONF = Path(CONF_DIR)
TYPED_GROUPS = sorted(SCHEMAS)
# options that need a value only the user has (a path marked ??? in the schema)
REQUIRED = {"model=local": ["model.path=/models/m"], "dataset=jsonl": ["dataset.path=/d.jsonl"]}


def _compose(*overrides: str, conf_dir: Path = CONF):
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return compose("config", overrides=list(overrides))


def _options(group: str) -> list[str]:
    return sorted(f"{group}={p.stem}" for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("option", [o for g in [*TYPED_GROUPS, "experiment"] for o in _options(g)])
def test_every_preset_composes_into_its_schema(option):
    cfg = _compose(option, *REQUIRED.get(option, []))
    for group in TYPED_GROUPS:
        built = OmegaConf.to_object(cfg[group])  # the dataclass itself, every field typed
        assert type(built) in SCHEMAS[group].values(), (option, group, type(built))
    assert isinstance(OmegaConf.to_object(cfg).threads, int)


@pytest.mark.parametrize("option", _options("predictor"))
def test_every_predictor_preset_instantiates(option):
    pred = OmegaConf.to_container(_compose(option).predictor, resolve=True)
    if "suite" in pred:  # a list of member presets, each checked on its own here
        assert all((CONF / "predictor" / f"{m}.yaml").exists() for m in pred["suite"])
        return
    assert instantiate_predictor(pred) is not None


@pytest.mark.parametrize("override,field", [
    ("dataset.limt=3", "limt"), ("generation.temprature=0.5", "temprature"),
    ("model.dtpye=float32", "dtpye"), ("features.batch_token=8", "batch_token"),
    ("eval.nboot=10", "nboot"), ("sim.n_decodes=2", "n_decodes"), ("paths.cache=/x", "cache"),
    ("generation.max_new_tokens=many", "max_new_tokens"), ("eval.noise_floor=maybe", "noise_floor"),
    ("dataset.limit=ten", "limit"), ("sim.qps=fast", "qps"), ("threads=two", "threads"),
])
def test_a_typo_or_a_wrong_type_fails_at_compose_time_naming_the_field(override, field):
    with pytest.raises(ConfigCompositionException) as err:
        _compose(override)
    text = f"{err.value} {err.value.__cause__}"
    assert field in text


def test_a_key_of_another_source_is_rejected():
    """`turns` is a ShareGPT/LMSYS key: on the toy world it would silently do nothing."""
    assert _compose("dataset=sharegpt", "dataset.turns=all").dataset.turns == "all"
    with pytest.raises(ConfigCompositionException, match="turns"):
        _compose("dataset=toyworld", "dataset.turns=all")


def test_a_mistake_in_a_users_own_preset_fails_naming_the_field(tmp_path):
    """Presets from a user's folder (hydra.searchpath) are checked like the shipped ones."""
    (tmp_path / "experiment").mkdir()
    good = "# @package _global_\ngeneration:\n  max_new_tokens: 64\n"
    (tmp_path / "experiment" / "mine.yaml").write_text(good)
    search = f"hydra.searchpath=[file://{tmp_path}]"
    assert _compose(search, "experiment=mine").generation.max_new_tokens == 64
    for bad, field in [("max_new_token: 64", "max_new_token"), ("max_new_tokens: lots",
                                                                 "max_new_tokens")]:
        (tmp_path / "experiment" / "mine.yaml").write_text(
            f"# @package _global_\ngeneration:\n  {bad}\n")
        with pytest.raises(ConfigCompositionException) as err:
            _compose(search, "experiment=mine")
        assert field in f"{err.value} {err.value.__cause__}"
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nthread: 2\n")
    with pytest.raises(ConfigCompositionException) as err:  # a top-level key: the root schema
        _compose(search, "experiment=mine")
    assert "thread" in f"{err.value} {err.value.__cause__}"


def _schema_of(path: Path) -> type | None:
    first = (yaml.safe_load(path.read_text()) or {}).get("defaults", [None])[0]
    if not isinstance(first, str) or not first.startswith("/schema/"):
        return None
    group, name = first.removeprefix("/schema/").removesuffix("@_here_").split("/")
    return SCHEMAS[group][name]


@pytest.mark.parametrize("path", sorted(p for g in TYPED_GROUPS for p in (CONF / g).glob("*.yaml")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_presets_set_only_what_differs_from_their_schema(path):
    """Every default is written once: in the schema, never again in a preset."""
    schema = _schema_of(path)
    data = yaml.safe_load(path.read_text()) or {}
    if schema is None:  # a preset extending another preset (e.g. qwen3-30b-a3b-nothink)
        assert data.get("defaults"), path
        return
    defaults = OmegaConf.to_container(OmegaConf.structured(schema))
    repeated = sorted(k for k, v in data.items() if k != "defaults" and defaults.get(k) == v)
    assert not repeated, f"{path.name} repeats its schema's defaults for {repeated}"


# Predictor presets have no schema: a preset's defaults are its parent preset's values, else its
# class's constructor defaults. A repeated value stays only where listed here, with why. Removing
# a key restating a constructor default would change the composed predictor config, which results
# hash into their file names, so those are kept (and new ones refused).
HASHED = ("restates the constructor's default, but is in the composed config, so in the config "
          "hash of the committed results (leaderboard/results/): removing it renames them")
PAPER = ("the paper's value, cited in the preset's header: pinned against changes to the "
         "toyworld preset it extends")
PINNED: dict[str, dict[str, str]] = {
    "bert_regressor": dict.fromkeys(["batch_size", "epochs", "head_hidden", "head_lr", "lr",
                                     "max_tokens", "model_path", "pooling", "weight_decay"],
                                    HASHED),
    "bin_classifier": dict.fromkeys(["batch_size", "epochs", "hidden", "layer", "lr", "n_bins",
                                     "weight_decay"], HASHED),
    "conformal": dict.fromkeys(["base_sees_val", "dynamic", "levels"], HASHED),
    "constant": {"statistic": HASHED},
    "egtp": dict.fromkeys(["batch_size", "ce_weight", "dropout", "epochs", "hidden", "layer", "lr",
                           "n_bins", "pooling", "weight_decay"], HASHED),
    "mlp_probe": dict.fromkeys(["batch_size", "dynamic", "epochs", "layer", "lr",
                                "max_train_steps", "weight_decay"], HASHED),
    "mlp_quantile": {"levels": HASHED},
    "opt_classifier": dict.fromkeys(["batch_size", "epochs", "lr", "max_tokens", "model_path",
                                     "n_bins", "proxy_ffn", "proxy_heads", "proxy_hidden",
                                     "proxy_layers", "tokenizer_path", "weight_decay"], HASHED),
    "outlets": dict.fromkeys(["attention", "batch_tokens", "gate", "head_input",
                              "overhead_batches", "overhead_context", "spec_depth",
                              "spec_max_new_tokens", "spec_prompts", "variant"], HASHED),
    "pia": dict.fromkeys(["batch_size", "max_new_tokens", "unit"], HASHED),
    "plp": dict.fromkeys(["aggregate", "batch_size", "ce_weight", "dropout", "epochs", "hidden",
                          "layer", "lr", "max_train_steps", "n_bins", "observed_steps",
                          "steps_per_request", "weight_decay"], HASHED),
    "tfidf_ridge": dict.fromkeys(["alpha", "max_features", "min_df", "ngram_max"], HASHED),
    "paper/bert_regressor": {"pooling": PAPER},
    "paper/outlets": dict.fromkeys([f"train.{k}" for k in (
        "betas", "clip", "max_len", "target_cache", "target_cache_max_bytes", "weight_decay")],
        PAPER),
}
PREDICTOR_PRESETS = sorted((CONF / "predictor").rglob("*.yaml"))


def _same(a, b) -> bool:
    """Equal as config values: a list equals a tuple default, 1 equals 1.0, true is not 1."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return isinstance(a, bool) == isinstance(b, bool) and a == b


def _repeats(own: dict, inherited: dict, prefix: str = "") -> set[str]:
    """The dotted keys of `own` whose value `inherited` already holds (deep, as Hydra merges)."""
    out = set()
    for key, value in own.items():
        if key not in inherited:
            continue
        if isinstance(value, dict) and isinstance(inherited[key], dict):
            out |= _repeats(value, inherited[key], f"{prefix}{key}.")
        elif _same(value, inherited[key]):
            out.add(prefix + key)
    return out


@pytest.fixture(scope="module")
def inherited_predictor_configs(tmp_path_factory) -> dict[str, dict]:
    """Each predictor preset as Hydra composes it without its own keys: what its parents give."""
    conf = tmp_path_factory.mktemp("conf") / "conf"
    shutil.copytree(CONF, conf)
    out = {}
    for path in PREDICTOR_PRESETS:
        option = path.relative_to(CONF / "predictor").with_suffix("").as_posix()
        parents = OmegaConf.load(path).get("defaults")
        if not parents:
            out[option] = {}
            continue
        bare = conf / "predictor" / f"{option}.yaml"
        bare.write_text(yaml.safe_dump({"defaults": OmegaConf.to_container(parents)}))
        composed = _compose(f"predictor={option}", conf_dir=conf).predictor
        out[option] = OmegaConf.to_container(composed, resolve=False)
        shutil.copy(path, bare)
    return out


@pytest.mark.parametrize("path", PREDICTOR_PRESETS,
                         ids=lambda p: p.relative_to(CONF / "predictor").with_suffix("").as_posix())
def test_predictor_presets_set_only_what_differs(path, inherited_predictor_configs):
    """A predictor preset repeats neither its parent preset's values nor, where no parent sets
    the key, its class's constructor defaults (PINNED lists the few kept, and must stay true)."""
    option = path.relative_to(CONF / "predictor").with_suffix("").as_posix()
    own = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    own.pop("defaults", None)
    if "suite" in own:
        return
    inherited = inherited_predictor_configs[option]
    found = _repeats(own, inherited)
    cls = get_class(own.get("_target_") or inherited["_target_"])
    defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
                if p.default is not inspect.Parameter.empty}
    found |= {k for k, v in own.items()
              if k not in inherited and k in defaults and _same(v, defaults[k])}
    pinned = set(PINNED.get(option, {}))
    assert not found - pinned, f"{option} repeats a default for {sorted(found - pinned)}"
    assert not pinned - found, f"PINNED lists {sorted(pinned - found)} for {option}: now unset"


@pytest.mark.parametrize("option", _options("predictor") + sorted(
    f"predictor={p.parent.name}/{p.stem}" for p in (CONF / "predictor").glob("*/*.yaml")))
def test_shipped_predictor_presets_fit_their_class_signature(option):
    pred = OmegaConf.to_container(_compose(option).predictor, resolve=True)
    assert predictor_arg_problems(pred) == [] and suite_problems(pred) == []


@pytest.mark.parametrize("overrides,expected", [
    (["predictor=mlp_probe", "predictor.epochs=abc"], "predictor.epochs: 'abc' is not an integer"),
    (["predictor=mlp_probe", "predictor.lr=fast"], "predictor.lr: 'fast' is not a number"),
    (["predictor=mlp_probe", "+predictor.hiden=3"], "predictor.hiden: not an argument of MLPProbe"),
    (["predictor=conformal", "predictor.base.epochs=[1]"], "predictor.base.epochs: [1] is not"),
])
def test_a_predictor_argument_mistake_is_named(overrides, expected):
    pred = OmegaConf.to_container(_compose(*overrides).predictor, resolve=True)
    problems = predictor_arg_problems(pred)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_a_suite_rejects_arguments_meant_for_its_members():
    pred = OmegaConf.to_container(_compose("+predictor.epochs=3").predictor, resolve=True)
    assert suite_problems(pred) and "predictor.epochs" in suite_problems(pred)[0]


def test_the_cli_stops_on_a_predictor_mistake_before_any_stage(tmp_path):
    proc = run_lenbench("predictor=mlp_probe", "predictor.epochs=abc",
                        f"paths.cache_dir={tmp_path / 'cache'}", timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "predictor.epochs: 'abc' is not an integer" in proc.stderr
    assert not (tmp_path / "cache" / "toymodel").exists()


def test_code_reads_a_groups_defaults_from_its_schema():
    """A partial config (a notebook's or a test's dict) is completed from the schemas, so code
    never restates a default; the composed run config gives the same values."""
    from dataclasses import asdict

    from lenbench.configs import RunConfig

    partial = RunConfig.from_composed({"eval": {"n_boot": 20}})
    assert asdict(partial.eval) == {**OmegaConf.to_container(_compose().eval), "n_boot": 20}
    assert asdict(partial.sim) == OmegaConf.to_container(
        OmegaConf.structured(SCHEMAS["sim"]["default"]))
    # a group left out takes the schema of the option the default run composes
    assert (type(partial.dataset).__name__, type(partial.model).__name__,
            type(partial.generation).__name__) == ("ToyworldDataset", "ToyModel",
                                                   "GenerationConfig")
    with pytest.raises(ValueError, match="n_boot"):
        RunConfig.from_composed({"eval": {"n_boot": "many"}})


@pytest.mark.parametrize("override,preset", [
    ("generation.backend=vllm", "generation=vllm"),
    ("model.source=gguf", "model=smollm2-135m-instruct"),
    ("dataset.source=alpaca", "dataset=alpaca"),
])
def test_switching_an_option_by_its_key_names_the_presets_that_bring_its_settings(override,
                                                                                 preset):
    """`generation.backend=vllm` on the hf preset keeps hf's settings, which vLLM's schema
    does not describe: typing says so in one line, naming the presets to choose instead."""
    from lenbench.configs import RunConfig

    composed = OmegaConf.to_container(_compose(override), resolve=True)
    with pytest.raises(ValueError, match="does not fit") as err:
        RunConfig.from_composed(composed)
    assert preset in str(err.value) and "\n" not in str(err.value)
    fixed = _compose(preset)  # the preset it names composes and types
    assert RunConfig.from_composed(OmegaConf.to_container(fixed, resolve=True))


def test_the_default_option_of_each_group_is_the_default_runs():
    """configs/run.py names the option a partial group falls back to: conf/config.yaml's own."""
    from lenbench.configs.run import DEFAULT_OPTION

    cfg = _compose()
    for group, (key, value) in DEFAULT_OPTION.items():
        assert cfg[group][key] == value, group
