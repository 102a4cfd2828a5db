"""Checks on a built world: labels a server counted itself have no response tokens, and the
load-time censoring warning counts every sample made (a dense subset's included)."""

from __future__ import annotations

import pytest

from lenbench.validate import ConfigError
from lenbench.world_checks import check_response_tokens, warn_censoring


def test_server_counted_labels_refuse_feature_predictors() -> None:
    with pytest.raises(ConfigError, match="no response tokens to extract features from"):
        check_response_tokens({"generator": {"length_source": "usage"}})


@pytest.mark.parametrize("generator", ["HFGenerator", {"length_source": "token_ids"}, None])
def test_labels_with_tokens_pass(generator) -> None:
    check_response_tokens({"generator": generator})  # the class name, ids, or no record


def test_the_load_time_warning_counts_the_dense_subset_too(caplog):
    sampling = {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 768}
    card = {"sampling": sampling, "n_prompts": 2250, "n_prompts_too_long": 15, "n_samples": 2,
            "dense_prompts": 200, "dense_n_samples": 8, "n_censored": 1286,
            "censored_rows": "kept (flagged)"}
    with caplog.at_level("WARNING"):
        warn_censoring(card)
    assert "1286 of 5670 samples (23%) hit max_new_tokens=768" in caplog.text
    assert "15 of 2250 prompts were longer" in caplog.text
