"""Refusals on a built world: labels a server counted itself have no response tokens."""

from __future__ import annotations

import pytest

from lenbench.validate import ConfigError
from lenbench.world_checks import check_response_tokens


def test_server_counted_labels_refuse_feature_predictors() -> None:
    with pytest.raises(ConfigError, match="no response tokens to extract features from"):
        check_response_tokens({"generator": {"length_source": "usage"}})


@pytest.mark.parametrize("generator", ["HFGenerator", {"length_source": "token_ids"}, None])
def test_labels_with_tokens_pass(generator) -> None:
    check_response_tokens({"generator": generator})  # the class name, ids, or no record
