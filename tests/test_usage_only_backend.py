"""The openai backend on servers that return no token ids: lengths from usage.completion_tokens.

The toy server's usage-only shapes stand in for llama-server's /v1 and similar servers, so the
fallback is tested without them: greedy L, finish_reason and censoring must equal the hf
backend's whether the server's count includes the EOS or not (the probe finds out which); a
server with neither ids nor usage, or with counts that fit no convention, is refused; every
request asks for one sample, so a per-request count is a per-sample count.
"""

from __future__ import annotations

import pytest
from helpers.servers import generate_with, openai_client

from lenbench.generation.length_counts import (
    CountedResult,
    CountError,
    Observation,
    cap_verdict,
    decide,
    observe,
    result_length,
    usage_result,
)
from lenbench.generation.openai_backend import OpenAIGenerator, ServerError
from lenbench.generation.protocol import SamplingConfig

# the mixed model (greedy answers that stop on either EOS or hit the cap) and its toy server
pytest_plugins = ["test_openai_backend"]

COLUMNS = ["prompt_id", "sample_idx", "split", "text", "prompt_token_ids", "L", "finish_reason",
           "censored"]


def _probe_texts(hf, reason):
    """Prompts whose greedy answer ends with `reason` under this model."""
    texts = list(dict.fromkeys(hf.loc[hf["finish_reason"] == reason, "text"]))[:2]
    assert texts, f"the mixed model has no greedy answer ending with {reason!r}"
    return texts


@pytest.fixture
def shaped(mixed_server):
    backend, url = mixed_server
    yield backend, url
    backend.shape, backend.usage_bias = "ids", 0


@pytest.mark.parametrize("shape,counts_eos", [("usage-with-eos", True),
                                              ("usage-without-eos", False)])
def test_usage_only_labels_equal_hf_in_both_conventions(mixed, shaped, prompt_table, tmp_path,
                                                        shape, counts_eos):
    _, target, want = mixed
    backend, url = shaped
    backend.shape = shape
    client = openai_client(target, url, probe_prompts=_probe_texts(want, "stop"))
    got, card = generate_with(target, prompt_table, tmp_path / shape, client)
    assert got[COLUMNS].reset_index(drop=True).equals(want[COLUMNS].reset_index(drop=True)), \
        got[COLUMNS].compare(want[COLUMNS])
    assert all(len(ids) == 0 for ids in got["output_token_ids"])  # not known, not made up
    described = card["generator"]
    assert described["length_source"] == "usage"
    assert described["eos_probe"]["count_includes_eos"] is counts_eos
    assert described["eos_probe"]["decided_by"] == "probe"
    # without ids the capped re-asks decide (a random model's text rarely re-tokenises exactly)
    stops = [o for o in described["eos_probe"]["observations"] if o["finish_reason"] == "stop"]
    assert stops and all(o["basis"].startswith(("text and cap", "cap")) for o in stops)
    assert "empty" in described["output_token_ids"]


def test_every_request_asks_for_one_sample(mixed, shaped, prompt_table, tmp_path, monkeypatch):
    _, target, want = mixed
    backend, url = shaped
    backend.shape = "usage-with-eos"
    bodies = []
    original = OpenAIGenerator._http

    def recording(self, method, path, body=None):
        if body is not None:
            bodies.append(body)
        return original(self, method, path, body)

    monkeypatch.setattr(OpenAIGenerator, "_http", recording)
    client = openai_client(target, url, probe_prompts=_probe_texts(want, "stop"))
    client.probe()
    n_probe = len(bodies)
    labels, _ = generate_with(target, prompt_table.head(3), tmp_path / "n1", client,
                     SamplingConfig(temperature=1.0, top_p=0.9, max_new_tokens=8))
    assert len(bodies) == n_probe + 3 and all(b["n"] == 1 for b in bodies)
    assert len({b["seed"] for b in bodies[n_probe:]}) == 3  # each sample its own seed
    assert all(1 <= L <= 8 for L in labels["L"])


def test_server_with_neither_ids_nor_usage_is_refused(mixed, shaped, prompt_table, tmp_path):
    _, target, want = mixed
    backend, url = shaped
    backend.shape = "text-only"
    client = openai_client(target, url, probe_prompts=_probe_texts(want, "stop"))
    with pytest.raises(ServerError, match="neither output token ids nor usage.completion_tokens"):
        generate_with(target, prompt_table, tmp_path / "none", client)
    assert not list((tmp_path / "none").glob("shard-*.parquet"))


@pytest.mark.parametrize("reason", ["stop", "length"])
def test_miscounting_server_is_refused(mixed, shaped, prompt_table, tmp_path, reason):
    _, target, want = mixed
    backend, url = shaped
    backend.shape, backend.usage_bias = "usage-with-eos", 2
    client = openai_client(target, url, probe_prompts=_probe_texts(want, reason))
    with pytest.raises(ServerError, match="cannot be reconciled"):
        generate_with(target, prompt_table, tmp_path / "bias", client)


def test_probe_without_a_stop_needs_the_convention_configured(mixed, shaped, prompt_table,
                                                              tmp_path):
    _, target, want = mixed
    backend, url = shaped
    backend.shape = "usage-without-eos"
    ends = _probe_texts(want, "length")
    with pytest.raises(ServerError, match="usage_counts_eos=true\\|false"):
        generate_with(target, prompt_table, tmp_path / "a",
                      openai_client(target, url, probe_prompts=ends))
    got, card = generate_with(target, prompt_table, tmp_path / "b",
                              openai_client(target, url, probe_prompts=ends,
                                            usage_counts_eos=False))
    assert got["L"].tolist() == want["L"].tolist()
    assert card["generator"]["eos_probe"]["decided_by"].startswith("generation.usage_counts_eos")
    # a setting the probe contradicts is refused
    stops = _probe_texts(want, "stop")
    with pytest.raises(ServerError, match="usage_counts_eos=True but the probe found"):
        generate_with(target, prompt_table, tmp_path / "c",
             openai_client(target, url, probe_prompts=stops, usage_counts_eos=True))


def test_ids_are_preferred_and_the_probe_checks_usage_against_them(mixed, shaped, prompt_table,
                                                                   tmp_path):
    _, target, want = mixed
    _, url = shaped
    client = openai_client(target, url, probe_prompts=_probe_texts(want, "stop"))
    got, card = generate_with(target, prompt_table, tmp_path / "ids", client)
    assert [list(x) for x in got["output_token_ids"]] == \
        [list(x) for x in want["output_token_ids"]]
    probe = card["generator"]["eos_probe"]
    assert card["generator"]["length_source"] == "token_ids"
    assert probe["count_includes_eos"] is True  # the toy server's usage counts the EOS
    assert all(o["ids"] == o["count"] for o in probe["observations"])


# ------------------------------------------------------------------------------------------------
# the arithmetic


def test_usage_result_counts_the_eos_once():
    assert usage_result("stop", 5, True, 8) == CountedResult([], "stop", 5)
    assert usage_result("stop", 5, False, 8).length == 6
    assert usage_result("length", 8, False, 8).length == 8  # no EOS at a cap
    assert result_length(usage_result("stop", 0, False, 8)) == 1  # EOS as the only token
    for bad in [("stop", 0, True, 8), ("length", 7, True, 8), ("stop", 9, True, 8),
                ("stop", None, True, 8), ("content_filter", 3, True, 8)]:
        with pytest.raises(CountError):
            usage_result(*bad)


def test_observe_and_decide():
    # text of 4 tokens, server says 5: the count includes the EOS
    assert observe(Observation("p", "stop", 5, 4), 64).counts_eos is True
    assert observe(Observation("p", "stop", 4, 4), 64).counts_eos is False
    # ids (EOS put back) are believed over the text
    assert observe(Observation("p", "stop", 6, 2, ids=6), 64).counts_eos is True
    with pytest.raises(CountError, match="reconciled"):
        observe(Observation("p", "stop", 7, 4), 64)
    with pytest.raises(CountError, match="reconciled"):
        observe(Observation("p", "length", 63, 60), 64)
    yes, no = Observation("a", "stop", 5, 4, counts_eos=True), \
        Observation("b", "stop", 4, 4, counts_eos=False)
    with pytest.raises(CountError, match="disagree"):
        decide([yes, no], None)
    assert decide([yes], None).counts_eos is True
    assert decide([], None).counts_eos is None


def test_cap_verdict():
    # counted 5 with the EOS: capped at 5 it stops again; capped at 4 it hits the cap
    assert cap_verdict(5, ("stop", 5), ("length", 4)) is True
    # counted 5 without the EOS (6 tokens in all): capped at 5 it hits the cap
    assert cap_verdict(5, ("length", 5), ("length", 4)) is False
    # a server that adds 2 to its counts stops under both caps
    with pytest.raises(CountError, match="reconciled"):
        cap_verdict(7, ("stop", 7), ("stop", 7))
    with pytest.raises(CountError, match="reconciled"):
        cap_verdict(5, ("stop", 4), ("length", 4))
