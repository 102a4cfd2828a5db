"""The cache keys and result identities of the shipped presets, pinned.

Every stage key hashes values read from the run config, and a result's file name hashes its
config: a change in how the config is read (a refactor of the config's types, a default moved)
must not move them, or every cache and every published result is orphaned. For each case the
test composes the presets as `lenbench` does, walks `prepare_world` with no model work (model
conversion and training, generation and feature extraction are stand-ins; `Stage.__init__` is
watched so each stage's key is recorded wherever it is built), and takes the identity of the
first predictor's result as `lenbench` would write it. The figures in tests/data/config_keys.json
were recorded before the config was typed, again when world v2 (now real_smollm2) took its cap
and repetition penalty, and again when its shipped world was complete, since the generate key holds
the shipped files' digest. Renaming the presets (real_smollm2 -> real_smollm2_v1, real_smollm2_v2
-> real_smollm2, with real_smollm2_v2 kept as its alias) moved no figure, only the case names.
Scheduling protocol 5 (the sim preset's load sweep and plain SJF, and SimConfig's sweep fields)
moved every result identity and no stage key. The generate stage's execution keys (executor and
the ray_* settings) added four fields to the recorded config and moved no key or identity.
`python tests/test_config_keys.py --write` records them again, only for a change that means to
move keys. Typing the composed config must also
give back the very mapping it was built from, which results record.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from lenbench.cli import CONF_DIR
from lenbench.configs import RunConfig, load_preset
from lenbench.stages import Stage

EXPECTED = Path(__file__).resolve().parent / "data" / "config_keys.json"
TRACE = "trace.jsonl"  # written by `_trace` in the case's folder; the key sees name, size, mtime
TEXT_ONLY = "predictor.suite=[constant,prompt_length,tfidf_ridge]"
CASES: dict[str, list[str]] = {
    "default": [],
    "smoke": ["experiment=smoke"],
    "real_smollm2": ["experiment=real_smollm2"],
    "real_smollm2_v1": ["experiment=real_smollm2_v1"],
    "real_smollm2_v2": ["experiment=real_smollm2_v2"],  # the alias: the same keys as real_smollm2
    "real_gemma3": ["experiment=real_gemma3"],
    "outlets_paper": ["experiment=outlets_paper"],
    "openai": ["generation=openai"],
    "llamacpp": ["experiment=real_smollm2_v1", "generation=llamacpp"],
    "vllm": ["model=llama-3.2-1b-instruct", "generation=vllm", "generation.dtype=float16"],
    "hf_chat_kwargs": ["model=qwen3-30b-a3b-nothink", "generation.max_length_exclusive=900"],
    "jsonl_import": ["dataset=jsonl", f"dataset.path={TRACE}", "dataset.model_name=acme-7b",
                     TEXT_ONLY],
    "jsonl_import_capped": ["dataset=jsonl", f"dataset.path={TRACE}",
                            "dataset.model_name=acme-7b", "dataset.max_length=500", TEXT_ONLY],
}


class _Stop(BaseException):  # noqa: N818 - not an error: the walk stops where it has seen enough
    """Raised by the stand-ins once the keys wanted are recorded."""


def _trace(folder: Path) -> None:
    lines = [{"prompt": f"Write {i} lines about cats.", "length": 10 + 7 * i} for i in range(40)]
    path = folder / TRACE
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    os.utime(path, ns=(1_700_000_000_000_000_000,) * 2)


def _compose(overrides: list[str], cache: Path):
    return compose("config", overrides=[*overrides, f"paths.cache_dir={cache}", "device=cpu",
                                        "progress=false", "threads=1", "paths.results_dir=res"])


def _no_model_work(monkeypatch: pytest.MonkeyPatch, stages: list[tuple[str, str]]) -> None:
    """Stand-ins for everything that would build a model, generate or extract: a GGUF is taken
    to be the preset's file (its sha256), a toy model is not trained, the generate stage is
    marked done with one label row, and the features stage stops the walk."""
    from lenbench.contract.labels import LABEL_COLUMNS
    from lenbench.models import gguf

    original = Stage.__init__

    def watched(self, cache_dir, name, config, parent=None):
        original(self, cache_dir, name, config, parent)
        stages.append((name, self.key))
        if name == "generate":  # the model's key, also where no stage builds the model
            stages.append(("model_key", config["model"]))
        if name == "generate" and not self.done:
            self.path.mkdir(parents=True, exist_ok=True)
            row = {c: None for c in LABEL_COLUMNS}
            row.update(prompt_id="p", sample_idx=0, split="test", L=3, prompt_token_ids=[1],
                       output_token_ids=[2, 3, 4], censored=False, finish_reason="stop")
            pd.DataFrame([row], columns=LABEL_COLUMNS).to_parquet(self.path / "labels.parquet")
            (self.path / "card.json").write_text("{}")
            (self.path / "stage.json").write_text("{}")
        if name == "features":
            raise _Stop

    monkeypatch.setattr(Stage, "__init__", watched)
    shas = {}  # each GGUF preset's first file -> the sha256 the preset expects of it
    for preset in sorted(Path(CONF_DIR, "model").glob("*.yaml")):
        files = load_preset("model", preset.stem).get("gguf") or {}
        if files.get("files"):
            shas[files["files"][0]] = files["sha256"]

    def preset_file(path=None, files=(), install=None) -> gguf.GGUFParts:
        return gguf.GGUFParts((Path(str(path or files[0])),), {})

    monkeypatch.setattr(gguf, "locate_gguf", preset_file)
    monkeypatch.setattr(gguf, "sha256_of", lambda paths: shas[str(paths[0])])
    monkeypatch.setattr(gguf, "convert_gguf", lambda *a, **k: {})
    monkeypatch.setattr("lenbench.models.toy.build_toy_model", lambda *a, **k: {})


def _identity(monkeypatch: pytest.MonkeyPatch, cfg) -> dict[str, Any]:
    """The first predictor's result identity and stored config, as `lenbench` writes them."""
    import lenbench.evaluate
    import lenbench.pipeline
    import lenbench.transfer
    from lenbench.cli import run
    from lenbench.pipeline import World

    seen: dict[str, Any] = {}
    world = World(labels=pd.DataFrame(), features=None, generation_card={}, target_path="",
                  dataset={"name": "w", "key": "k", "n_train": 1, "n_val": 1, "n_test": 1,
                           "n_test_prompts": 1, "mean_L": 1.0},
                  model={"name": "m", "key": "k", "path": None})

    def evaluate(predictor, name, predictor_cfg, world, run_cfg, seed, audit_seed=None):
        result = lenbench.evaluate._base_result(world, name, "predictor", run_cfg, seed,
                                                predictor_cfg)
        seen.update(config_hash=result["config_hash"], config=result["config"])
        raise _Stop

    monkeypatch.setattr(lenbench.pipeline, "prepare_world", lambda *a, **k: world)
    monkeypatch.setattr(lenbench.transfer, "prepare_transfer", lambda *a, **k: world)
    monkeypatch.setattr(lenbench.evaluate, "evaluate_predictor", evaluate)
    monkeypatch.setattr("lenbench.runtime.process.configure_threads", lambda n: None)
    # in this process, where `evaluate` records what it saw (a fork's record would stay there)
    monkeypatch.setattr("lenbench.runtime.predictor_jobs.predictor_jobs", lambda *a, **k: 1)
    with pytest.raises(_Stop):
        run(cfg)
    config = {k: v for k, v in seen["config"].items() if k != "paths"}  # a temporary folder
    return {"config_hash": seen["config_hash"], "config": json.loads(json.dumps(config))}


def _stage_keys(run: RunConfig, need_features: bool, needs: list) -> dict[str, str]:
    from lenbench.pipeline import prepare_world

    stages: list[tuple[str, str]] = []
    with pytest.MonkeyPatch.context() as mp:
        _no_model_work(mp, stages)
        with contextlib.suppress(_Stop):
            prepare_world(run, need_features=need_features, progress=False, needs=needs)
    return dict(stages)


def characterize(name: str, folder: Path) -> dict[str, Any]:
    """Stage keys of the world (and of the transfer set), and the first result's identity."""
    from lenbench.cli import build_predictors, check_run_config
    from lenbench.transfer import transfer_run_config

    _trace(folder)
    here = Path.cwd()
    os.chdir(folder)  # the trace is named relative to where lenbench runs
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            cfg = _compose(CASES[name], folder / "cache")
            container, members = check_run_config(cfg)
            run = RunConfig.from_composed(container)
            assert run.to_dict() == container  # typing loses and adds nothing
            needs = [p.needs for _, _, p in build_predictors(members)]
            need_features = any(n.features for n in needs)
            out: dict[str, Any] = {"stages": _stage_keys(run, need_features, needs)}
            if run.transfer is not None:
                out["transfer_stages"] = _stage_keys(transfer_run_config(run), need_features,
                                                     needs)
            with pytest.MonkeyPatch.context() as mp:
                out["result"] = _identity(mp, cfg)
    finally:
        os.chdir(here)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_stage_keys_and_result_identity_are_pinned(name: str, tmp_path: Path) -> None:
    expected = json.loads(EXPECTED.read_text())[name]
    got = characterize(name, tmp_path)
    assert got["stages"] == expected["stages"]
    assert got.get("transfer_stages") == expected.get("transfer_stages")
    assert got["result"]["config_hash"] == expected["result"]["config_hash"]
    assert got["result"]["config"] == expected["result"]["config"]


def test_the_cases_cover_each_kind_of_stage() -> None:
    expected = json.loads(EXPECTED.read_text())
    assert set(expected) == set(CASES)
    kinds = {stage for case in expected.values() for stage in case["stages"]}
    assert kinds == {"promptset", "toymodel", "model", "model_key", "generate", "features",
                     "import"}
    assert load_preset("model", "smollm2-135m-instruct")["source"] == "gguf"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    import tempfile

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    figures = {}
    for case in sorted(CASES):
        with tempfile.TemporaryDirectory() as tmp:
            figures[case] = characterize(case, Path(tmp))
        print(case, figures[case]["stages"], figures[case]["result"]["config_hash"])
    EXPECTED.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")
