"""SplitView: the labels of the scored split are hidden; rows and steps map to the split's rows."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenbench.features.extract import FeatureStore
from lenbench.inputs import LabelsHidden, SplitView

# Five label rows; their steps (stride 1) in order. Feature values encode (row, t) so that any
# mix-up of rows or offsets shows: static[i] = 10 * i, steps[g] = 100 * row + t.
L = np.array([3, 1, 4, 2, 5])
SPLIT = ["train", "test", "train", "test", "val"]


@pytest.fixture()
def labels() -> pd.DataFrame:
    return pd.DataFrame({
        "prompt_id": ["a", "b", "a", "c", "d"],
        "sample_idx": [0, 0, 1, 0, 0],
        "split": SPLIT,
        "family": ["f0", "f1", "f0", "f2", "f3"],
        "text": [f"prompt {i}" for i in range(5)],
        "prompt_token_ids": [[1] * (i + 2) for i in range(5)],
        "L": L,
    })


@pytest.fixture()
def store(tmp_path) -> FeatureStore:
    offsets = np.concatenate([[0], np.cumsum(L)])
    index = np.array([(i, t) for i in range(len(L)) for t in range(L[i])], dtype=np.int32)
    np.save(tmp_path / "steps_offsets.npy", offsets)
    np.save(tmp_path / "steps_index.npy", index)
    np.save(tmp_path / "steps_mid.npy",
            np.repeat((100 * index[:, 0] + index[:, 1])[:, None], 4, 1).astype(np.float16))
    np.save(tmp_path / "static_mid_last.npy",
            np.repeat((10 * np.arange(5))[:, None], 4, 1).astype(np.float16))
    tok = np.concatenate([[0], np.cumsum([2, 3, 4, 5, 6] + L)])
    np.save(tmp_path / "entropy_offsets.npy", tok)
    np.save(tmp_path / "entropy.npy", np.arange(tok[-1], dtype=np.float32))
    (tmp_path / "meta.json").write_text(json.dumps(
        {"roles": ["mid"], "poolings": ["last"], "step_roles": ["mid"], "step_stride": 1}))
    return FeatureStore(tmp_path)


def _view(labels, store, split="test") -> SplitView:
    return SplitView(split, labels, np.flatnonzero(labels["split"].to_numpy() == split), store)


def test_rows_map_to_the_split(labels, store):
    test = _view(labels, store)
    assert len(test) == 2
    assert test.prompts == ["prompt 1", "prompt 3"]
    assert test.lengths.tolist() == [1, 2]
    assert test.group_ids.tolist() == ["b", "c"]
    assert test.families.tolist() == ["f1", "f2"]
    assert test.prompt_lengths.tolist() == [3, 5]
    assert test.prompt_token_ids == [[1] * 3, [1] * 5]
    assert test.hidden("mid", "last")[:, 0].tolist() == [10, 30]
    assert test.hidden("mid", "last").dtype == np.float32
    # row 3 (the 2nd test row) follows rows of n + L = 5, 4, 8 tokens and has 5 + 2 of its own
    assert test.entropy(1).tolist() == list(range(17, 24))


def test_steps_map_to_the_split(labels, store):
    train = _view(labels, store, "train")  # rows 0 (L=3) and 2 (L=4)
    steps = train.steps
    assert len(steps) == 7
    assert steps.row.tolist() == [0, 0, 0, 1, 1, 1, 1]  # local rows of the split
    assert steps.t.tolist() == [0, 1, 2, 0, 1, 2, 3]
    assert steps.remaining.tolist() == [3, 2, 1, 4, 3, 2, 1]
    assert steps.hidden("mid")[:, 0].tolist() == [0, 1, 2, 200, 201, 202, 203]
    test = _view(labels, store).steps
    assert test.row.tolist() == [0, 1, 1]
    assert test.hidden("mid")[:, 0].tolist() == [100, 300, 301]
    assert test.remaining.tolist() == [1, 2, 1]


def test_hidden_labels(labels, store):
    test = _view(labels, store)
    hidden = test.hide_labels()
    with pytest.raises(LabelsHidden, match="'test'"):
        _ = hidden.lengths
    with pytest.raises(LabelsHidden):
        _ = hidden.steps.remaining
    # everything else stays readable on the scored split
    assert hidden.prompts == test.prompts
    assert hidden.hidden("mid")[:, 0].tolist() == [10, 30]
    assert hidden.steps.t.tolist() == [0, 0, 1]
    assert hidden.steps.hidden("mid")[:, 0].tolist() == [100, 300, 301]
    assert test.lengths.tolist() == [1, 2]  # the original view is unchanged
    assert issubclass(LabelsHidden, RuntimeError)


def test_missing_features_say_what_to_declare(labels):
    view = _view(labels, None)
    with pytest.raises(RuntimeError, match="needs = Needs"):
        view.hidden("mid")


def test_empty_split(labels, store):
    view = SplitView("none", labels, np.array([], dtype=np.int64), store)
    assert len(view) == 0 and len(view.steps) == 0
    assert view.hidden("mid").shape == (0, 4)
