"""A run whose predictors read no target state gets the steps to score without the features
stage's teacher-forced pass, laid out exactly as that stage lays them out."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from lenbench import Needs, Predictor
from lenbench.configs import RunConfig
from lenbench.contract.features import FeatureStore
from lenbench.contract.step_index import StepIndexStore, row_step_offsets, step_index
from lenbench.contract.views import FeatureNotDeclared
from lenbench.evaluate import views
from lenbench.pipeline import prepare_world
from lenbench.testing import fit_and_score, synthetic_splits


def test_needs_say_when_the_target_must_run() -> None:
    assert not Needs(steps=True, target_model=True).forward
    assert Needs(steps=True, target_model=True).features  # the steps are still needed
    assert Needs(hidden=("mid",)).forward and Needs(steps=True, entropy=True).forward
    assert Needs(entropy=True).features and not Needs(text=True).features


@pytest.mark.parametrize("stride", [1, 2, 5])
def test_step_layout_follows_the_lengths(stride: int) -> None:
    lengths = np.array([7, 1, 10, 5, 6])
    offsets = row_step_offsets(lengths, stride)
    index = step_index(lengths, stride)
    assert np.diff(offsets).tolist() == [-(-int(L) // stride) for L in lengths]
    for row, L in enumerate(lengths):
        part = index[offsets[row]: offsets[row + 1]]
        assert (part[:, 0] == row).all() and part[:, 1].tolist() == list(range(0, L, stride))
    with pytest.raises(ValueError, match="step_stride"):
        StepIndexStore.from_lengths(lengths, 0)


def _world(e2e, needs: list[Needs]):
    from helpers.cli import E2E_UPSTREAM, REPO

    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[*E2E_UPSTREAM, *e2e.paths(), "progress=false"])
    run = RunConfig.from_composed(OmegaConf.to_container(cfg, resolve=True))
    return prepare_world(run, need_features=True, progress=False, needs=needs)


def test_steps_alone_run_no_target_and_match_the_features_stage(e2e) -> None:
    stages = sorted((e2e.cache_dir / "features").iterdir())
    index_only = _world(e2e, [Needs(steps=True, target_model=True)])
    assert isinstance(index_only.features, StepIndexStore)
    assert index_only.target.cache_info().currsize == 0  # the target was never loaded
    assert index_only.keys["features"] is None and index_only.fingerprints["features"] is None
    assert sorted((e2e.cache_dir / "features").iterdir()) == stages  # no stage was written

    full = _world(e2e, [Needs(hidden=("mid",), steps=True)])  # the e2e suite's stage, reused
    assert isinstance(full.features, FeatureStore)
    np.testing.assert_array_equal(index_only.features.step_offsets, full.features.step_offsets)
    np.testing.assert_array_equal(index_only.features.step_index(), full.features.step_index())
    # declared entropies bring the forward's store, though no hidden state is read
    assert isinstance(_world(e2e, [Needs(steps=True, entropy=True)]).features, FeatureStore)


def test_views_without_target_states_say_what_to_declare(e2e) -> None:
    world = _world(e2e, [Needs(steps=True, target_model=True)])
    train, _, test = views(world, None)
    stride = world.features.meta["step_stride"]
    assert len(test.steps.t) == int(np.ceil(test.lengths / stride).sum())
    np.testing.assert_array_equal(test.steps.remaining, test.lengths[test.steps.row] - test.steps.t)
    with pytest.raises(KeyError, match="entropy=True"):
        train.entropy(0)
    with pytest.raises(KeyError, match=r"hidden=\(\.\.\.\)"):
        train.hidden("mid")
    static = test.static_view(Needs(steps=True, target_model=True))
    assert len(static) == len(test)  # no entropies to copy, and none asked for


class EntropyReader(Predictor):
    """Predicts each row's mean prompt entropy: it reads entropies and no hidden state."""

    dynamic = True

    def __init__(self, declared: bool):
        self.needs = Needs(steps=True, entropy=declared)

    def fit(self, train, val=None) -> None:
        self.scale = float(np.mean(train.lengths)) / max(float(np.mean(train.entropy(0))), 1e-6)

    def predict(self, split) -> np.ndarray:
        return np.array([self.scale * split.entropy(i).mean() for i in range(len(split))])

    def predict_remaining(self, split) -> np.ndarray:
        return np.full(len(split.steps), self.scale)


def test_a_predictor_reads_entropies_only_when_it_declares_them(tmp_path) -> None:
    splits = synthetic_splits(tmp_path, n_prompts=20)
    scored = fit_and_score(EntropyReader(declared=True), splits)
    assert scored.static.std() > 0 and len(scored.remaining) == len(splits.test.steps)
    with pytest.raises(KeyError, match="entropy=True"):  # as a run of it alone would
        fit_and_score(EntropyReader(declared=False), splits)
    # the static view follows the declaration, whatever the store holds (alone or in a suite)
    with pytest.raises(FeatureNotDeclared, match="entropy=True"):
        splits.test.static_view(Needs(steps=True)).entropy(0)
    assert len(splits.test.static_view(Needs(entropy=True)).entropy(0)) == \
        splits.test.prompt_lengths[0]
