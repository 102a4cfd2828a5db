"""tfidf_ridge: learns length from prompt words, clips to [1, max_length], builds from its YAML."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.worlds import TASKS, synthetic
from omegaconf import OmegaConf

from baselines.tfidf_ridge import TfidfRidgePredictor
from lenbench.contract.instantiate import instantiate_predictor

YAML = Path(__file__).resolve().parent.parent / "conf" / "predictor" / "tfidf_ridge.yaml"
def test_beats_constant_median() -> None:
    train, test = synthetic(400, 0), synthetic(200, 1)
    model = TfidfRidgePredictor(max_length=2048)
    model.fit(train)
    pred = model.predict(test.hide_labels())
    truth = test.lengths.astype(float)
    mae = np.abs(pred - truth).mean()
    mae_constant = np.abs(np.median(train.lengths) - truth).mean()
    assert mae < 0.5 * mae_constant  # ~91 vs ~201 on this set
    by_task = {t: pred[[t in p.split() for p in test.prompts]].mean() for t in TASKS}
    assert by_task["haiku"] < by_task["define"] < by_task["explain"] < by_task["compare"] \
        < by_task["essay"]
    assert model.num_parameters() == len(model.vectorizer.vocabulary_) + 1


def test_clipped_to_one_and_max_length() -> None:
    train = synthetic(200, 0)
    clipped = TfidfRidgePredictor(max_length=100)
    clipped.fit(train)
    pred = clipped.predict(synthetic(100, 2))
    assert pred.min() >= 1.0 and pred.max() == pytest.approx(100.0)
    free = TfidfRidgePredictor()  # no budget: clipped to the longest length seen in training
    free.fit(train)
    assert free.predict(synthetic(100, 2)).max() <= train.lengths.max()
    assert TfidfRidgePredictor.needs.text and not TfidfRidgePredictor.needs.features


def test_builds_from_yaml_with_generation_budget() -> None:
    cfg = OmegaConf.create({"generation": {"max_new_tokens": 321},
                            "predictor": OmegaConf.load(YAML)})
    pred_cfg = OmegaConf.to_container(cfg.predictor, resolve=True)
    model = instantiate_predictor(pred_cfg)
    assert isinstance(model, TfidfRidgePredictor)
    assert model.max_length == 321 and model.ngram_max == 2 and pred_cfg["name"] == "tfidf_ridge"
