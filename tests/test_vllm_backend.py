"""The vLLM backend without vLLM: output mapping, sampling parameters, import guard, dispatch.

vLLM needs a CUDA machine, so these tests feed the backend objects shaped like vLLM's own
(`RequestOutput` with `.outputs[i]` = `CompletionOutput(token_ids, finish_reason, stop_reason)`)
and a stand-in `vllm` module, and check that L, finish_reason and censoring follow docs/protocol.md
exactly as the HF backend reports them.
"""

from __future__ import annotations

import sys
import types
from dataclasses import replace
from types import SimpleNamespace

import pytest

from lenbench.configs import RunConfig, group_config
from lenbench.generation.backends import GenerationTarget, label_key, make_generator
from lenbench.generation.hf import HFGenerator
from lenbench.generation.openai_backend import request_seed
from lenbench.generation.protocol import GenRequest, SamplingConfig
from lenbench.generation.vllm_backend import (
    VLLMGenerator,
    completion_result,
    import_vllm,
    request_output_results,
    sampling_kwargs,
)

EOS = [2, 7]  # e.g. Llama 3.x: <|eot_id|> and <|end_of_text|>


def completion(ids, reason, stop_reason=None):
    return SimpleNamespace(index=0, text="", token_ids=list(ids), finish_reason=reason,
                           stop_reason=stop_reason, cumulative_logprob=None, logprobs=None)


def request_output(rid, prompt, *completions):
    return SimpleNamespace(request_id=str(rid), prompt_token_ids=list(prompt),
                           outputs=list(completions), finished=True)


# ------------------------------------------------------------------------------------------------
# output mapping


def test_stop_counts_the_eos_token():
    r = completion_result(completion([5, 9, 2], "stop", None), EOS)
    assert r.output_ids == [5, 9, 2] and r.finish_reason == "stop"
    # a secondary EOS from generation_config arrives as a stop token id: stop_reason names it
    r = completion_result(completion([5, 7], "stop", 7), EOS)
    assert r.output_ids == [5, 7] and len(r.output_ids) == 2


def test_eos_as_first_token_and_at_the_limit():
    assert completion_result(completion([2], "stop"), EOS).output_ids == [2]  # L == 1
    # EOS as exactly the max_tokens-th token is a stop, not a censored length (as in hf.py)
    r = completion_result(completion([4, 4, 4, 7], "stop", 7), EOS)
    assert r.finish_reason == "stop" and len(r.output_ids) == 4


def test_length_is_censored_and_keeps_every_token():
    r = completion_result(completion([4, 5, 6, 8], "length"), EOS)
    assert r.finish_reason == "length" and r.output_ids == [4, 5, 6, 8]


def test_stripped_eos_is_put_back():
    # a version that drops the stop token from token_ids: stop_reason (an EOS id) restores it
    assert completion_result(completion([5, 9], "stop", 7), EOS).output_ids == [5, 9, 7]
    # stop_reason None = the tokenizer's own EOS: restored from default_eos
    assert completion_result(completion([5, 9], "stop", None), EOS, default_eos=2).output_ids \
        == [5, 9, 2]


@pytest.mark.parametrize("bad", [
    completion([5, 9], "stop", "###"),        # a stop string: not a length
    completion([5, 9], "stop", None),         # no EOS and no default to restore
    completion([5, 9], "abort"),
    completion([5, 9], None),
])
def test_unusable_finishes_are_refused(bad):
    with pytest.raises(ValueError, match="finish|stop"):
        completion_result(bad, EOS)


def test_request_outputs_in_order_with_stats():
    outs = [request_output(0, [1, 3], completion([5, 2], "stop")),
            request_output(1, [1, 4], completion([6, 6, 6], "length")),
            request_output(2, [1, 4], completion([7], "stop", 7))]
    results, stats = request_output_results(outs, 3, EOS)
    assert [(r.output_ids, r.finish_reason) for r in results] == [
        ([5, 2], "stop"), ([6, 6, 6], "length"), ([7], "stop")]
    assert stats.real_tokens == stats.decoded_slots == 6 and stats.real_token_fraction == 1.0
    with pytest.raises(ValueError, match="2 outputs for 3 requests"):
        request_output_results(outs[:2], 3, EOS)
    two = request_output(3, [1], completion([2], "stop"), completion([2], "stop"))
    with pytest.raises(ValueError, match="n=1"):
        request_output_results([two], 1, EOS)


def test_sampling_params_per_request():
    cfg = SamplingConfig(temperature=0.7, top_p=0.9, max_new_tokens=64)
    a = sampling_kwargs(GenRequest((1, 2), (0, 11, 0)), cfg, [7, 2, 7])
    b = sampling_kwargs(GenRequest((1, 2), (0, 11, 1)), cfg, EOS, {"top_k": 20})
    assert a == {"n": 1, "temperature": 0.7, "top_p": 0.9, "max_tokens": 64,
                 "seed": request_seed((0, 11, 0)), "stop_token_ids": [2, 7]}
    assert b["seed"] != a["seed"] and b["top_k"] == 20  # each sample its own stream


# ------------------------------------------------------------------------------------------------
# the generator against a stand-in vllm module


class FakeSamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class FakeLLM:
    """Answers each prompt with tokens derived from its seed; EOS after `seed % 5` tokens."""

    def __init__(self, **engine_args):
        self.engine_args = engine_args
        self.calls = []

    def generate(self, prompts, params, use_tqdm=True):
        self.calls.append((prompts, params))
        outs = []
        for i, (p, sp) in enumerate(zip(prompts, params)):
            n = sp.seed % 5
            ids = [10 + (sp.seed + k) % 50 for k in range(n)]
            if n + 1 > sp.max_tokens:
                c = completion(ids[:sp.max_tokens], "length")
            else:
                c = completion(ids + [sp.stop_token_ids[0]], "stop", None)
            outs.append(request_output(i, p["prompt_token_ids"], c))
        return outs


def fake_vllm() -> types.ModuleType:
    mod = types.ModuleType("vllm")
    mod.LLM = FakeLLM
    mod.SamplingParams = FakeSamplingParams
    mod.__version__ = "0.0-fake"
    return mod


def test_generator_sends_token_prompts_and_maps_outputs():
    gen = VLLMGenerator("/models/m", EOS, revision="abc", dtype="bfloat16",
                        tensor_parallel_size=2, max_model_len=4096, vllm_module=fake_vllm())
    reqs = [GenRequest((1, 5, 6), (0, 3, s)) for s in range(4)] + [GenRequest((1, 9), (0, 4, 0))]
    done = []
    results, _ = gen.generate(reqs, SamplingConfig(1.0, 1.0, 3),
                              on_done=lambda i, result: done.append((i, result)))
    prompts, params = gen.llm.calls[0]
    assert prompts[0] == {"prompt_token_ids": [1, 5, 6]}  # our rendered ids, no re-templating
    assert [p.seed for p in params] == [request_seed(r.seed) for r in reqs]
    assert all(p.n == 1 and p.stop_token_ids == EOS and p.max_tokens == 3 for p in params)
    for req, res in zip(reqs, results):
        n = request_seed(req.seed) % 5
        if n + 1 > 3:
            assert res.finish_reason == "length" and len(res.output_ids) == 3
        else:
            assert res.finish_reason == "stop" and len(res.output_ids) == n + 1
    assert sorted(i for i, _ in done) == list(range(len(reqs)))
    assert all(result is results[i] for i, result in done)  # each result as it finished
    assert gen.llm.engine_args == {"model": "/models/m", "tokenizer": "/models/m",
                                   "revision": "abc", "tokenizer_revision": "abc",
                                   "dtype": "bfloat16", "tensor_parallel_size": 2, "seed": 0,
                                   "max_model_len": 4096}
    assert gen.describe()["vllm_version"] == "0.0-fake"
    empty, empty_stats = gen.generate([], SamplingConfig())
    assert empty == [] and empty_stats.decoded_slots == 0 and len(gen.llm.calls) == 1


def _target(**kw) -> GenerationTarget:
    tok = SimpleNamespace(eos_token_id=2)
    return GenerationTarget(path="/models/m", revision=None, dtype="bfloat16", tokenizer=tok,
                            load=lambda: pytest.fail("the vllm backend must not load HF weights"),
                            **kw)


def _gen_cfg(*overrides: str):
    from hydra import compose, initialize_config_dir

    from lenbench.cli import CONF_DIR, resolved_config

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=["generation=vllm", *overrides])
    return RunConfig.from_composed(resolved_config(cfg)).generation


def test_make_generator_builds_vllm_from_the_config_group(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm())
    gen_cfg = _gen_cfg("generation.tensor_parallel_size=4", "generation.max_new_tokens=100",
                       "generation.max_prompt_tokens=900", "+generation.engine_kwargs.swap_space=8")
    gen = make_generator(gen_cfg, _target(), EOS)
    assert isinstance(gen, VLLMGenerator)
    args = gen.llm.engine_args
    assert args["tensor_parallel_size"] == 4 and args["max_model_len"] == 1000
    assert args["dtype"] == "bfloat16" and args["gpu_memory_utilization"] == 0.9
    assert args["swap_space"] == 8 and gen.default_eos == 2


def test_import_guard_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` raises ImportError
    with pytest.raises(ImportError, match=r'pip install -e "\.\[vllm\]"'):
        import_vllm()
    with pytest.raises(ImportError, match="optional vLLM extra"):
        make_generator(_gen_cfg(), _target(), EOS)


def test_dispatch_hf_openai_and_unknown(monkeypatch):
    from helpers.models import tiny_llama

    model = tiny_llama(n_layers=2, hidden=16, vocab=32)
    target = GenerationTarget("/m", None, "float32", None,
                              load=lambda: SimpleNamespace(model=model, tokenizer=None))
    hf = make_generator(group_config("generation", {"backend": "hf", "batch_size": 5}), target,
                        EOS)
    assert isinstance(hf, HFGenerator) and hf.batch_size == 5
    from lenbench.generation.openai_backend import OpenAIGenerator

    oa = make_generator(group_config("generation", {"backend": "openai",
                                                    "base_url": "http://127.0.0.1:9"}),
                        target, EOS)
    assert isinstance(oa, OpenAIGenerator)
    with pytest.raises(ValueError, match="generation.backend='tgi' is unknown"):
        make_generator(group_config("generation", {"backend": "tgi"}), target, EOS)


def test_only_label_changing_keys_enter_the_cache_key():
    base = _gen_cfg()
    assert label_key(base) == {}  # unset dtype / quantization / sampling_extra add nothing
    assert label_key(replace(base, tensor_parallel_size=8, gpu_memory_utilization=0.5,
                             max_num_seqs=64)) == {}
    assert label_key(replace(base, dtype="float16", sampling_extra={"top_k": 20})) == \
        {"dtype": "float16", "sampling_extra": {"top_k": 20}}
    openai = group_config("generation", {"backend": "openai", "model": "m", "concurrency": 64,
                                         "extra_body": None})
    assert label_key(openai) == {"model": "m"}
