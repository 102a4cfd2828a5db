"""SplitView and StaticView: rows and steps map to the split's rows; on the scored split the
dynamic view hides the labels and the static view (what predict() gets) holds nothing of the
response but y_1: no label table, no feature store, no step arrays, no length-revealing array."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from lenbench.contract.features import FeatureStore
from lenbench.contract.needs import Needs
from lenbench.contract.views import FeatureNotDeclared, LabelsHidden, SplitView, StaticView, Steps

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
        "output_token_ids": [[10 + i] + [20 + i] * (L[i] - 1) for i in range(5)],  # y_1 = 10 + i
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
    np.save(tmp_path / "static_mid_mean.npy",  # extracted, but declared by no Needs below
            np.repeat((10 * np.arange(5) + 1)[:, None], 4, 1).astype(np.float16))
    tok = np.concatenate([[0], np.cumsum([2, 3, 4, 5, 6] + L)])
    np.save(tmp_path / "entropy_offsets.npy", tok)
    np.save(tmp_path / "entropy.npy", np.arange(tok[-1], dtype=np.float32))
    (tmp_path / "meta.json").write_text(json.dumps(
        {"roles": ["mid"], "poolings": ["last", "mean"], "step_roles": ["mid"],
         "step_stride": 1}))
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


def test_dynamic_view_hides_the_labels(labels, store):
    """hide_labels(): what predict_remaining() gets. The dynamic protocol walks the true response,
    so steps, step states and sequence_token_ids stay readable (their causal use is audited by
    lenbench.scoring.causality); the labels and the response as a label do not."""
    test = _view(labels, store)
    hidden = test.hide_labels()
    with pytest.raises(LabelsHidden, match="'test'"):
        _ = hidden.lengths
    with pytest.raises(LabelsHidden):
        _ = hidden.steps.remaining
    with pytest.raises(LabelsHidden):
        _ = hidden.response_token_ids
    with pytest.raises(LabelsHidden):  # a censored row's L is the cap: the flag is a label
        _ = hidden.censored
    assert test.censored.tolist() == [False, False]  # labels without the column: none censored
    assert hidden.prompts == test.prompts
    assert hidden.hidden("mid")[:, 0].tolist() == [10, 30]
    assert hidden.steps.t.tolist() == [0, 0, 1]
    assert hidden.steps.hidden("mid")[:, 0].tolist() == [100, 300, 301]
    assert hidden.sequence_token_ids(1).tolist() == [1] * 5 + [13, 23]
    assert test.lengths.tolist() == [1, 2]  # the original view is unchanged
    assert issubclass(LabelsHidden, RuntimeError)


NEEDS = Needs(text=True, hidden=("mid",), pooling=("last",))


def test_static_view_holds_the_prompt_side(labels, store):
    test = _view(labels, store)
    static = test.static_view(NEEDS)
    assert isinstance(static, StaticView) and len(static) == 2 and static.name == "test"
    assert static.prompts == ["prompt 1", "prompt 3"]
    assert static.prompt_token_ids == [[1] * 3, [1] * 5]
    assert static.prompt_lengths.tolist() == [3, 5]
    assert static.group_ids.tolist() == ["b", "c"]
    assert static.families.tolist() == ["f1", "f2"]
    assert static.first_response_tokens.tolist() == [11, 13]  # y_1, known after prefill
    assert static.hidden("mid", "last")[:, 0].tolist() == [10, 30]
    assert static.hidden("mid").dtype == np.float32
    # entropy at the prompt positions 0..n-1 only: n values, the last being the prefill
    # distribution's (the one y_1 was sampled from); row 3 starts at token 17 (5 + 4 + 8)
    assert static.entropy(1).tolist() == list(range(17, 22))
    assert len(static.entropy(0)) == 3
    for name in ("lengths", "censored", "response_token_ids", "steps"):
        with pytest.raises(LabelsHidden, match="static view, which allows prompts"):
            getattr(static, name)
    with pytest.raises(LabelsHidden, match="predict_remaining"):
        static.sequence_token_ids(0)
    # what it hands out is a copy: writing to it changes nothing for the next read
    static.hidden("mid")[:] = -1
    static.group_ids[:] = "x"
    assert static.hidden("mid")[:, 0].tolist() == [10, 30]
    assert static.group_ids.tolist() == ["b", "c"]


def test_static_view_exposes_only_the_declared_features(labels, store):
    static = _view(labels, store).static_view(NEEDS)
    # static_mid_mean is in the store (another predictor of a suite may need it): not here
    with pytest.raises(FeatureNotDeclared, match=r"Needs\.pooling \(add 'mean'\)"):
        static.hidden("mid", "mean")
    with pytest.raises(FeatureNotDeclared, match=r"Needs\.hidden \(add 'low'\)"):
        static.hidden("low", "last")
    with pytest.raises(FeatureNotDeclared, match="target_model"):
        _ = static.target
    assert issubclass(FeatureNotDeclared, RuntimeError)
    # the prompt text goes to predictors that declare it; token ids need no declaration
    no_text = _view(labels, store).static_view(Needs(hidden=("mid",)))
    with pytest.raises(FeatureNotDeclared, match=r"Needs\(text=True\)"):
        _ = no_text.prompts
    assert no_text.prompt_token_ids == static.prompt_token_ids
    # the same predictor alone (a store with only its features) sees exactly the same
    both = _view(labels, store).static_view(Needs(hidden=("mid",), pooling=("last", "mean")))
    assert both.hidden("mid", "mean")[:, 0].tolist() == [11, 31]
    assert both.hidden("mid", "last").tolist() == static.hidden("mid", "last").tolist()
    # no features declared: no hidden states and no entropy, even though the store has them
    bare = _view(labels, store).static_view(Needs(text=True))
    with pytest.raises(FeatureNotDeclared, match="Needs.hidden"):
        bare.hidden("mid", "last")
    with pytest.raises(FeatureNotDeclared, match="Needs.hidden"):
        bare.entropy(0)
    assert bare.prompts == static.prompts
    # declared but not extracted: the store's own message, when it is read
    with pytest.raises(KeyError, match="not extracted"):
        _view(labels, store).static_view(Needs(hidden=("high",))).hidden("high", "last")
    # the target: handed to predictors that declare it, and only to them
    target = object()
    view = SplitView("test", labels, np.array([1, 3]), store, target)
    assert view.static_view(Needs(target_model=True)).target is target


def _world(folder, lengths: np.ndarray, seed: int) -> tuple[pd.DataFrame, FeatureStore]:
    """Five rows whose prompt side is fixed and whose responses, lengths, step states and
    response entropies come from `lengths` and `seed`; y_1 is fixed too."""
    rng = np.random.default_rng(seed)
    n = np.array([2, 3, 4, 5, 6])
    labels = pd.DataFrame({
        "prompt_id": list("abcde"), "sample_idx": 0, "split": "test", "family": "f",
        "text": [f"prompt {i}" for i in range(5)],
        "prompt_token_ids": [list(range(1, k + 1)) for k in n],
        "output_token_ids": [[40 + i] + rng.integers(50, 60, L - 1).tolist()
                             for i, L in enumerate(lengths)],
        "L": lengths, "finish_reason": "stop", "censored": False})
    folder.mkdir()
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    index = np.array([(i, t) for i in range(5) for t in range(lengths[i])], dtype=np.int32)
    np.save(folder / "steps_offsets.npy", offsets)
    np.save(folder / "steps_index.npy", index)
    np.save(folder / "steps_mid.npy", rng.normal(size=(len(index), 4)).astype(np.float16))
    np.save(folder / "static_mid_last.npy", np.arange(20).reshape(5, 4).astype(np.float16))
    tok = np.concatenate([[0], np.cumsum(n + lengths)])
    ent = np.concatenate([np.r_[np.arange(k) / 10 + i, rng.uniform(0, 5, L)]
                          for i, (k, L) in enumerate(zip(n, lengths))]).astype(np.float32)
    np.save(folder / "entropy_offsets.npy", tok)
    np.save(folder / "entropy.npy", ent)
    (folder / "meta.json").write_text(json.dumps(
        {"roles": ["mid"], "poolings": ["last"], "step_roles": ["mid"], "step_stride": 1}))
    return labels, FeatureStore(folder)


def _contents(obj, depth: int = 0, path: str = "view"):
    """(path, value) of every attribute reachable from obj, three levels deep."""
    yield path, obj
    if depth >= 3 or obj is None or isinstance(obj, (str, bytes, int, float, bool, np.generic)):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _contents(v, depth + 1, f"{path}[{k!r}]")
    elif isinstance(obj, (list, tuple)):
        for k, v in enumerate(obj):
            yield from _contents(v, depth + 1, f"{path}[{k}]")
    elif hasattr(obj, "__dict__") and not isinstance(obj, np.ndarray):
        for k, v in vars(obj).items():
            yield from _contents(v, depth + 1, f"{path}.{k}")


def _accessors(view: StaticView) -> dict:
    """Everything dir(view) offers (methods called on every row), or the error it raises."""
    out = {}
    for name in dir(view):
        if name.startswith("__"):
            continue
        try:
            value = getattr(view, name)
            if name == "hidden":
                value = value("mid", "last")
            elif name in ("entropy", "sequence_token_ids"):
                value = [value(i) for i in range(len(view))]
            elif callable(value):
                continue
        except (LabelsHidden, FeatureNotDeclared) as exc:
            value = type(exc)
        out[name] = value
    return out


def _same(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(np.asarray(a), np.asarray(b))
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and len(a) == len(b) \
            and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") and not isinstance(a, type):
        return type(a) is type(b) and _same(vars(a), vars(b))
    return a == b


def test_static_view_reveals_nothing_of_the_response(tmp_path):
    """Two worlds with the same prompts and y_1 but other responses, lengths, step states and
    response entropies: every attribute of the static view, public or private, and every
    accessor give the same value in both; none is a table, store, step array or a per-row array
    whose size follows L."""
    worlds = [_world(tmp_path / "a", np.array([3, 1, 4, 2, 5]), 0),
              _world(tmp_path / "b", np.array([9, 6, 1, 7, 2]), 1)]
    views = [SplitView("test", lab, np.arange(5), st).hide_labels().static_view(NEEDS)
             for lab, st in worlds]
    n = views[0].prompt_lengths
    for view in views:
        for path, value in _contents(view):
            assert not isinstance(value, (pd.DataFrame, pd.Series, pd.Index)), path
            assert not isinstance(value, (FeatureStore, SplitView, Steps, np.memmap)), path
            if isinstance(value, np.ndarray):
                assert value.base is None or not isinstance(value.base, np.memmap), path
                assert value.ndim == 0 or value.shape[0] in (5, n[0], n[1], n[2], n[3], n[4]), \
                    (path, value.shape)
        assert not hasattr(view, "_labels") and not hasattr(view, "_table")
        assert not hasattr(view, "_features") and not hasattr(view, "_rows")
        # the reviewer's leak (a): entropy over prompt + response; now prompt positions only
        assert [len(view.entropy(i)) for i in range(5)] == n.tolist()
    a, b = (dict(_contents(v)) for v in views)
    assert a.keys() == b.keys()
    for path in a:
        assert _same(a[path], b[path]), path
    assert _same(_accessors(views[0]), _accessors(views[1]))
    assert _accessors(views[0])["steps"] is LabelsHidden
    assert _accessors(views[0])["sequence_token_ids"] is LabelsHidden


def test_missing_features_say_what_to_declare(labels):
    view = _view(labels, None)
    with pytest.raises(RuntimeError, match="needs = Needs"):
        view.hidden("mid")


def test_empty_split(labels, store):
    view = SplitView("none", labels, np.array([], dtype=np.int64), store)
    assert len(view) == 0 and len(view.steps) == 0
    assert view.hidden("mid").shape == (0, 4)
    static = view.static_view(NEEDS)
    assert len(static) == 0 and static.hidden("mid").shape == (0, 4)
    assert static.prompts == [] and static.first_response_tokens.shape == (0,)


def test_a_view_holds_only_its_own_split_rows() -> None:
    """fit() gets the train view: the test rows' labels must not be reachable from it."""
    import pandas as pd

    labels = pd.DataFrame({"prompt_id": ["a", "b", "c"], "sample_idx": [0, 0, 0],
                           "split": ["train", "test", "train"], "family": [""] * 3,
                           "text": ["x", "y", "z"], "prompt_token_ids": [[1], [2], [3]],
                           "output_token_ids": [[5], [5, 6, 7], [5, 6]], "L": [1, 3, 2],
                           "finish_reason": ["stop"] * 3, "censored": [False] * 3})
    train = SplitView("train", labels, np.array([0, 2]))
    for view in (train, train.hide_labels()):
        frames = [v for v in vars(view).values() if isinstance(v, pd.DataFrame)]
        assert all(set(f["split"]) == {"train"} for f in frames) and frames
    assert train.lengths.tolist() == [1, 2]
