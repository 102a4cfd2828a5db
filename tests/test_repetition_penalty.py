"""generation.repetition_penalty: every backend is told the same penalty, and it enters the
generate stage's key only when it changes the labels (existing worlds keep their keys)."""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lenbench.configs import CONF_DIR, RunConfig
from lenbench.generation.backends import sampling_config
from lenbench.generation.llamacpp_backend import LlamaCppGenerator
from lenbench.generation.openai_backend import OpenAIGenerator
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.generation.vllm_backend import sampling_kwargs
from lenbench.pipeline import generation_stage_config

REQ = GenRequest((5, 6), (0, 1, 0))
PLAIN = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=8)
PENALIZED = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=8, repetition_penalty=1.1)


def _config(*overrides: str) -> RunConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return RunConfig.from_composed(OmegaConf.to_container(cfg, resolve=True))


def _key(run: RunConfig) -> dict:
    return generation_stage_config(run.generation, run.model, "m")


def test_servers_are_sent_the_penalty():
    openai = OpenAIGenerator("http://127.0.0.1:9/v1", [1], model="m")
    assert openai.request_body(REQ, PENALIZED)["repetition_penalty"] == 1.1
    assert openai.request_body(REQ, PLAIN)["repetition_penalty"] == 1.0  # the server's own off
    llama = LlamaCppGenerator("http://127.0.0.1:9", [1])
    body = llama.request_body(REQ, PENALIZED)
    assert body["repeat_penalty"] == 1.1 and body["repeat_last_n"] == -1  # the whole context
    assert llama.request_body(REQ, PLAIN)["repeat_penalty"] == 1.0
    assert sampling_kwargs(REQ, PENALIZED, [1])["repetition_penalty"] == 1.1
    assert "repetition_penalty" not in sampling_kwargs(REQ, PLAIN, [1])  # vLLM's default: off


def test_stage_key_names_a_penalty_only_when_it_changes_labels():
    base = _config()
    none = _key(base)
    assert "repetition_penalty" not in none
    one = _config("generation.repetition_penalty=1.0")
    assert _key(one) == none
    on = _key(_config("generation.repetition_penalty=1.1"))
    assert on == {**none, "repetition_penalty": 1.1}
    assert sampling_config(base.generation).repetition_penalty == 1.0
    assert sampling_config(one.generation, 5) == SamplingConfig(
        base.generation.temperature, base.generation.top_p, 5, 1.0)


def _result_name(run: RunConfig) -> str:
    import pandas as pd

    from lenbench.evaluate import _base_result
    from lenbench.pipeline import World

    world = World(labels=pd.DataFrame(), features=None, generation_card={}, target_path="",
                  dataset={"name": "w", "key": "k", "n_train": 1, "n_val": 1, "n_test": 1,
                           "n_test_prompts": 1, "mean_L": 1.0},
                  model={"name": "m", "key": "k", "path": None})
    return _base_result(world, "constant", "predictor", run, 0, {"name": "constant"})["config_hash"]


def test_a_penalty_that_does_not_act_leaves_cards_and_result_names_as_they_were():
    assert "repetition_penalty" not in SamplingConfig(0.7, 0.9, 8, 1.0).record()
    assert PENALIZED.record() == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 8,
                                  "repetition_penalty": 1.1}
    unset = _result_name(_config())
    assert _result_name(_config("generation.repetition_penalty=1.0")) == unset
    assert _result_name(_config("generation.repetition_penalty=1.1")) != unset
