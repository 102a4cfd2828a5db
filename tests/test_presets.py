"""Config presets compose, carry the documented values, and the README's recipes compose.

Real models, vLLM and SLURM are not available to the tests; what is checked here is that every
preset and every command in the README's "Real models, vLLM and clusters" section composes with
Hydra's compose API into the values the text promises, and that the chat-template variables of a
model preset reach the rendered prompt ids and the generate stage's cache key.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import shlex

import pytest
from helpers.cli import REPO
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lenbench.cli import CONF_DIR
from lenbench.configs import RunConfig
from lenbench.models.chat import render_prompt
from lenbench.pipeline import generation_stage_config


def _compose(*overrides: str, hydra_cfg: bool = False):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra_cfg)


@pytest.mark.parametrize("name,path,thinking", [
    ("llama-3.2-1b-instruct", "meta-llama/Llama-3.2-1B-Instruct", None),
    ("llama-3.1-8b-instruct", "meta-llama/Llama-3.1-8B-Instruct", None),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", True),
    ("qwen3-30b-a3b-nothink", "Qwen/Qwen3-30B-A3B", False),
])
def test_model_presets(name, path, thinking):
    m = OmegaConf.to_container(_compose(f"model={name}").model, resolve=True)
    assert m["name"] == name and m["source"] == "hf" and m["path"] == path
    assert re.fullmatch(r"[0-9a-f]{40}", m["revision"]), "a pinned hub commit"
    assert m["dtype"] == "bfloat16"
    kwargs = m["chat_template_kwargs"]
    if thinking is None:  # Llama 3.x: a fixed date keeps prompts identical from day to day
        assert kwargs == {"date_string": "26 Jul 2024"}
    else:
        assert kwargs == {"enable_thinking": thinking}
    # a local copy overrides the path and keeps the rest
    local = _compose(f"model={name}", "model.path=/models/copy").model
    assert local.path == "/models/copy" and local.chat_template_kwargs == kwargs


def test_outlets_paper_preset():
    cfg = _compose("experiment=outlets_paper", "dataset=sharegpt", "model=llama-3.1-8b-instruct",
                   "generation=vllm")
    g = cfg.generation
    assert g.backend == "vllm"  # the backend chosen beside the preset is kept ...
    # ... and the preset's protocol wins over the backend's defaults
    assert (g.temperature, g.n_samples, g.max_new_tokens, g.keep_censored,
            g.max_length_exclusive) == (0.0, 1, 2048, False, 2048)
    assert cfg.dataset.turns == "first"
    assert dict(cfg.dataset.split) == {"train": 0.8, "val": 0.0, "test": 0.2}
    assert cfg.sim.n_requests == 1914 and cfg.sim.n_decode == 3  # OUTLETS App. C study
    # the default world composes with it too (sources ignore keys they don't take)
    assert _compose("experiment=outlets_paper").generation.max_length_exclusive == 2048


def test_one_to_many_preset():
    cfg = _compose("experiment=one_to_many")
    assert (cfg.generation.temperature, cfg.generation.top_p) == (1.0, 1.0)
    assert cfg.generation.n_samples >= 2 and cfg.eval.noise_floor is True


def test_vllm_group_inherits_the_shared_keys():
    hf = _compose().generation
    vllm = _compose("generation=vllm").generation
    for key in ("temperature", "top_p", "max_new_tokens", "n_samples", "seed",
                "max_prompt_tokens", "keep_censored", "workers", "worker"):
        assert vllm[key] == hf[key], key
    assert vllm.backend == "vllm" and vllm.tensor_parallel_size == 1


@pytest.mark.parametrize("launcher,plugin,target", [
    ("local", "hydra_plugins.hydra_joblib_launcher", "JoblibLauncher"),
    ("slurm", "hydra_plugins.hydra_submitit_launcher", "SlurmLauncher"),
    ("slurm_gpu", "hydra_plugins.hydra_submitit_launcher", "SlurmLauncher"),
])
def test_launchers_compose(launcher, plugin, target):
    pytest.importorskip(plugin, reason='the launcher plugins are the ".[cluster]" extra')
    cfg = _compose(f"hydra/launcher={launcher}", hydra_cfg=True)
    assert cfg.hydra.launcher._target_.endswith(target)
    if launcher == "local":
        assert cfg.hydra.launcher.n_jobs == 2
    else:
        assert cfg.hydra.launcher.gpus_per_node == (1 if launcher == "slurm_gpu" else 0)


# ------------------------------------------------------------------------------------------------
# chat-template variables


def test_template_kwargs_reach_prompts_and_cache_key(toy_tiny):
    tok = copy.deepcopy(toy_tiny.tokenizer)
    tok.chat_template = ("{% if enable_thinking is defined and not enable_thinking %}"
                         "no think: {% endif %}{{ messages[0]['content'] }}")
    plain = render_prompt(tok, "list three fruits")
    off = render_prompt(tok, "list three fruits", {"enable_thinking": False})
    assert off != plain
    assert "think" in tok.decode(off) and "think" not in tok.decode(plain)
    assert render_prompt(tok, "list three fruits", {"enable_thinking": True}) == plain

    def key(*overrides: str) -> dict:
        run = RunConfig.from_composed(OmegaConf.to_container(_compose(*overrides), resolve=True))
        return generation_stage_config(run.generation, run.model, "m")

    key_on, key_off = key("model=qwen3-30b-a3b"), key("model=qwen3-30b-a3b-nothink")
    assert key_on["chat_template_kwargs"] == {"enable_thinking": True}
    assert key_on != key_off
    # throughput settings and the worker layout are not in the key; the length filter is, if set
    assert key("model=qwen3-30b-a3b", "generation.batch_size=7", "generation.workers=4",
               "generation.worker=2") == key_on
    assert "max_length_exclusive" not in key_on
    assert key("model=qwen3-30b-a3b",
               "generation.max_length_exclusive=100")["max_length_exclusive"] == 100


# ------------------------------------------------------------------------------------------------
# the README's recipes


def _readme_commands() -> list[list[str]]:
    """Every `lenbench ...` command in the README's section on real models and clusters."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Real models, vLLM and clusters", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
            match = re.search(r"(?:^|[\s;])lenbench\s(.*?)(?:&|;|$)", line)
            if match:
                line = re.sub(r"\$\{?\w+\}?", "0", match.group(1))  # shell variables
                commands.append(shlex.split(line))
    inline = re.findall(r"`lenbench ([^`]*)`", section)
    return commands + [shlex.split(c) for c in inline if "=" in c]


def _have_launchers() -> bool:
    try:
        return all(importlib.util.find_spec(f"hydra_plugins.hydra_{p}_launcher") is not None
                   for p in ("joblib", "submitit"))
    except ModuleNotFoundError:  # no hydra_plugins package at all
        return False


def test_readme_recipes_compose():
    commands = _readme_commands()
    assert len(commands) >= 5
    plugins_missing = False
    for args in commands:
        overrides = []
        for arg in args:
            if arg == "-m":
                continue
            key, _, value = arg.partition("=")
            if "," in value and not value.startswith("["):  # a sweep: compose its first point
                value = value.split(",")[0]
            overrides.append(f"{key}={value}")
        if any(o.startswith("hydra/launcher=") for o in overrides) and not _have_launchers():
            plugins_missing = True
            overrides = [o for o in overrides if not o.startswith("hydra")]
        cfg = _compose(*overrides, hydra_cfg=True)
        OmegaConf.to_container(cfg, resolve=False)  # every value present
        if "model=llama-3.1-8b-instruct" in overrides:
            assert cfg.model.path == "meta-llama/Llama-3.1-8B-Instruct"
        if "generation=vllm" in overrides:
            assert cfg.generation.backend == "vllm"
    if plugins_missing:
        pytest.skip('launcher plugins (".[cluster]") not installed: composed without them')


@pytest.mark.slow
def test_local_joblib_multirun_runs_two_jobs(session_cache, toy_tiny_path, tmp_path):
    """`-m hydra/launcher=local` really launches (hydra-joblib-launcher with this hydra-core)."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher",
                        reason='the launcher plugins are the ".[cluster]" extra')
    from helpers.cli import run_lenbench

    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "toymodel").symlink_to(session_cache / "toymodel", target_is_directory=True)
    proc = run_lenbench("hydra/launcher=local", "model=toy_tiny", "dataset.n_prompts=20",
                        "generation.n_samples=1", "generation.max_new_tokens=16",
                        "predictor=constant,prompt_length", "sim.enabled=false", "threads=1",
                        "progress=false", f"paths.cache_dir={cache}",
                        f"paths.results_dir={tmp_path / 'results'}",
                        f"paths.leaderboard_dir={tmp_path / 'lb'}", multirun=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Joblib.Parallel(n_jobs=2" in proc.stdout + proc.stderr
    written = sorted(p.parent.name for p in (tmp_path / "results").rglob("*.json"))
    assert written == ["constant", "prompt_length"]
    assert (tmp_path / "lb" / "README.md").exists()  # rebuilt once at the end of the sweep


def test_experiment_top_level_keys_override_the_root_config():
    """An experiment's top-level values win over config.yaml's (its `_self_` comes first)."""
    assert _compose().threads == 1
    assert _compose("experiment=real_smollm2").threads == 2
    assert _compose("experiment=real_smollm2", "threads=1").threads == 1


def test_world_v2_trains_outlets_to_convergence():
    """World v2's suite runs OUTLETS and its three ablations with early stopping on validation,
    not cpu/outlets_base's fixed 200 steps; each reports under its usual name and variant."""
    suite = _compose("experiment=real_smollm2").predictor.suite
    converged = [m for m in suite if m.startswith("cpu/converged/")]
    assert len(converged) == 4
    variants, cpu = set(), _compose("predictor=cpu/outlets").predictor.train
    for member in converged:
        p = _compose("experiment=real_smollm2", f"predictor={member}").predictor
        assert p.name == member.rsplit("/", 1)[-1]
        assert p.train.max_steps is None and p.train.patience > 0 and p.train.epochs > 2
        assert p.train.batch_tokens == cpu.batch_tokens
        variants.add(p.variant)
    assert variants == {"outlets", "lp_only", "sd_only", "no_decoder"}
    assert "patience" not in _compose("predictor=cpu/outlets").predictor.train  # v1: 200 steps
