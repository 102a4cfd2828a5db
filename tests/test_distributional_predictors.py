"""Predictors that return length distributions: shapes, consistency with the point, coverage,
and causality of the dynamic ones, on small synthetic feature stores."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from baselines.bin_classifier import BinClassifier
from baselines.egtp import EGTP
from baselines.mlp_probe import MLPProbe, MLPQuantileProbe
from baselines.opt_classifier import OPTClassifier
from baselines.plp import PLP
from lenbench import Predictor
from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.contract.features import FeatureStore
from lenbench.contract.views import SplitView
from lenbench.heads.quantile_loss import MonotoneQuantiles, pinball_loss
from lenbench.scoring.audit import audit_causality

HIDDEN, SIGMA = 16, 0.3


def lognormal_world(folder: Path, n: int = 2000, seed: int = 0) -> dict[str, SplitView]:
    """Views of a feature store where log L = mu(x) + N(0, SIGMA^2): the spread is known and the
    same for every prompt, so a quantile head can learn it. Step states are the prompt state with
    t / 50 in the last dimension (0 in the prompt state). Role "mid", poolings last and entropy."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, HIDDEN)).astype(np.float32)
    x[:, -1] = 0.0
    mu = np.log(30.0) + 0.5 * x[:, 0] + 0.3 * x[:, 1]
    L = np.clip(np.round(np.exp(mu + rng.normal(0, SIGMA, n))), 2, 200).astype(np.int64)
    split = np.array(["train", "val", "test"])[rng.choice(3, n, p=[0.6, 0.1, 0.3])]
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "sample_idx": 0,
                           "split": split, "family": "", "text": [f"p{i}" for i in range(n)],
                           "prompt_token_ids": [[1, 2]] * n,
                           "output_token_ids": [list(rng.integers(3, 60, k)) for k in L],
                           "L": L})
    index = np.array([(i, t) for i in range(n) for t in range(L[i])], dtype=np.int32)
    steps = x[index[:, 0]].copy()
    steps[:, -1] = index[:, 1] / 50
    np.save(folder / "steps_offsets.npy", np.concatenate([[0], np.cumsum(L)]))
    np.save(folder / "steps_index.npy", index)
    for pooling in ("last", "entropy"):
        np.save(folder / f"static_mid_{pooling}.npy", x.astype(np.float16))
    np.save(folder / "steps_mid.npy", steps.astype(np.float16))
    np.save(folder / "steps_mid_entropy.npy", steps.astype(np.float16))
    tokens = np.concatenate([[0], np.cumsum(2 + L)])
    np.save(folder / "entropy_offsets.npy", tokens)
    np.save(folder / "entropy.npy", np.zeros(tokens[-1], dtype=np.float32))
    (folder / "meta.json").write_text(json.dumps(
        {"roles": ["mid"], "poolings": ["last", "entropy"], "step_roles": ["mid"],
         "step_poolings": ["last", "entropy"], "step_stride": 1}))
    store = FeatureStore(folder)
    return {s: SplitView(s, labels, np.flatnonzero(split == s), store)
            for s in ("train", "val", "test")}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SplitView]:
    return lognormal_world(tmp_path_factory.mktemp("lognormal"))


def check_dynamic(model: Predictor, test: SplitView) -> LengthDistribution:
    """One remaining-length distribution per step, causal at the low, middle and high levels."""
    hidden = test.hide_labels()
    dist = model.predict_remaining_distribution(hidden)
    assert isinstance(dist, LengthDistribution) and len(dist) == len(test.steps)
    q = dist.quantile(QUANTILE_LEVELS)
    assert (np.diff(q, axis=1) >= -1e-9).all()
    audit = audit_causality(model, hidden)  # every quantile of every scored distribution
    assert audit["passed"] and audit["steps_compared"] > 0, audit
    assert audit["methods"]["predict_remaining_distribution"]["compared"] > 0
    return dist


def test_bin_classifier_histogram_is_its_softmax(world) -> None:
    model = BinClassifier(max_length=200, n_bins=20, layer="mid", epochs=15, progress=False)
    model.fit(world["train"], world["val"])
    hidden = world["test"].hide_labels()
    dist = model.predict_distribution(hidden)
    assert dist.is_histogram and len(dist) == len(world["test"])
    # 20 bins up to max_length, then the one-token bin of lengths at or beyond it
    np.testing.assert_allclose(dist.edges, np.r_[np.arange(21) * 10.0, 201.0])
    np.testing.assert_allclose(dist.probs, model._probs(hidden), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(dist.probs.sum(1), 1.0)
    # the histogram's mean is the expectation variant (whose top centre is max_length, half a
    # token below the top bin's midpoint); its argmax bin holds the point prediction
    np.testing.assert_allclose(dist.mean() - 0.5 * dist.probs[:, -1],
                               model.predict_variants(hidden)["expectation"], rtol=1e-6)
    pred = model.predict(hidden)
    top = dist.probs.argmax(1)
    assert (dist.edges[top] <= pred).all() and (pred <= dist.edges[top + 1]).all()


def test_egtp_histogram_mean_is_its_prediction(world) -> None:
    model = EGTP(layer="mid", pooling="entropy", max_length=200, n_bins=20, hidden=32,
                 epochs=20, batch_size=64, lr=3e-3, progress=False)
    model.fit(world["train"], world["val"])
    hidden = world["test"].hide_labels()
    dist = model.predict_distribution(hidden)
    assert dist.is_histogram and len(dist) == len(world["test"])
    np.testing.assert_allclose(dist.edges, np.r_[np.linspace(0, 200, 21), 201.0])
    np.testing.assert_allclose(dist.probs.sum(1), 1.0)
    pred = model.predict(hidden)
    above = pred > 1.0  # predict floors at one token
    mean = dist.mean() - 0.5 * dist.probs[:, -1]  # the top class's centre is max_length
    np.testing.assert_allclose(mean[above], pred[above], rtol=1e-6)
    # a learnt spread: the central 80% interval holds most test lengths, not all of [0, 200]
    q = dist.quantile([0.1, 0.9])
    inside = (q[:, 0] <= world["test"].lengths) & (world["test"].lengths <= q[:, 1])
    assert inside.mean() > 0.6 and np.median(q[:, 1] - q[:, 0]) < 100


def test_plp_static_and_remaining_histograms(world) -> None:
    model = PLP(layer="mid", max_length=200, n_bins=20, hidden=32, epochs=10,
                steps_per_request=8, progress=False)
    model.fit(world["train"], world["val"])
    assert model.distributional and model.dynamic_distributional
    test = world["test"]
    hidden = test.hide_labels()
    static = model.predict_distribution(hidden)
    assert len(static) == len(test)
    pred = model.predict(hidden)
    mean = static.mean() - 0.5 * static.probs[:, -1]  # the top class's centre is max_length
    np.testing.assert_allclose(mean[pred > 1], pred[pred > 1], rtol=1e-6)
    dist = check_dynamic(model, test)
    rem = model.predict_remaining(hidden)
    mean = dist.mean() - 0.5 * dist.probs[:, -1]
    np.testing.assert_allclose(mean[rem > 1], rem[rem > 1], rtol=1e-6)
    # remaining length, not total: per request the median falls from t = 0 to the last step
    steps = test.steps
    med = dist.quantile([0.5])[:, 0]
    first = np.array([med[steps.row == r][0] for r in range(len(test))])
    last = np.array([med[steps.row == r][-1] for r in range(len(test))])
    long = test.lengths >= 20
    assert np.mean(last[long] < first[long]) > 0.9


def test_opt_classifier_histogram_mean_is_the_expectation_variant() -> None:
    rng = np.random.default_rng(0)
    words = {"haiku": 12, "define": 40, "essay": 150}
    tasks = rng.choice(list(words), 60)
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(60)],
                           "text": [f"{t} please {rng.choice(['now', 'soon'])}" for t in tasks],
                           "L": [words[t] for t in tasks], "family": "",
                           "prompt_token_ids": [[0]] * 60})
    split = SplitView("train", labels, np.arange(60))
    model = OPTClassifier(max_length=200, n_bins=10, epochs=1, batch_size=16, progress=False)
    model.fit(split)
    hidden = split.hide_labels()
    dist = model.predict_distribution(hidden)
    assert dist.is_histogram and len(dist) == 60
    np.testing.assert_allclose(dist.edges, np.r_[np.arange(11) * 20.0, 201.0])
    np.testing.assert_allclose(dist.mean() - 0.5 * dist.probs[:, -1],
                               model.predict_variants(hidden)["expectation"], rtol=1e-6)


def test_monotone_layer_never_crosses_and_pinball_finds_the_quantile() -> None:
    raw = torch.randn(1000, 5)
    assert (MonotoneQuantiles()(raw).diff(dim=-1) > 0).all()
    # far-negative increments underflow to ties, never to a crossing
    assert (MonotoneQuantiles()(raw * 50).diff(dim=-1) >= 0).all()
    assert (raw.diff(dim=-1) < 0).any()  # the unconstrained outputs do cross
    # the pinball loss of a constant is smallest at the sample's own quantiles
    y = torch.from_numpy(np.random.default_rng(0).lognormal(0, 1, 4001))
    levels = (0.1, 0.5, 0.9)
    best = torch.quantile(y, torch.tensor(levels, dtype=y.dtype))
    at_best = pinball_loss(best.expand(len(y), 3), y, levels)
    for shift in (-0.2, 0.2):
        assert pinball_loss((best + shift).expand(len(y), 3), y, levels) > at_best
    # a mask averages over the kept positions only
    mask = torch.zeros(len(y), dtype=torch.bool)
    mask[:10] = True
    masked = pinball_loss(best.expand(len(y), 3), y, levels, mask)
    assert masked == pytest.approx(float(pinball_loss(best.expand(10, 3), y[:10], levels)))
    with pytest.raises(ValueError, match="levels"):
        pinball_loss(torch.zeros(4, 2), torch.zeros(4), levels)


def test_quantile_probe_covers_80_percent_and_its_point_is_the_median(world) -> None:
    model = MLPQuantileProbe(layer="mid", epochs=60, lr=3e-3, max_length=200, progress=False)
    assert model.distributional and model.dynamic_distributional and model.dynamic
    model.fit(world["train"], world["val"])
    train, test = world["train"], world["test"]
    for split in (train, test):
        hidden = split.hide_labels()
        dist = model.predict_distribution(hidden)
        assert not dist.is_histogram and len(dist) == len(split)
        np.testing.assert_allclose(dist.levels, QUANTILE_LEVELS)
        # the head's own outputs are ordered (from_quantiles would otherwise sort them)
        raw = model._apply(model.static, hidden.hidden("mid"), 200)
        assert (np.diff(raw, axis=1) >= 0).all() and raw.min() >= 1 and raw.max() <= 200
        np.testing.assert_allclose(model.predict(hidden), raw[:, 2])
        lo, hi = dist.values[:, 0], dist.values[:, -1]
        coverage = np.mean((lo <= split.lengths) & (split.lengths <= hi))
        assert 0.7 <= coverage <= 0.9, (split.name, coverage)
        half = np.mean((dist.values[:, 1] <= split.lengths) & (split.lengths <= dist.values[:, 3]))
        assert 0.38 <= half <= 0.62, (split.name, half)
    # the median beats the train median as a point, like the MSE probe
    truth = test.lengths
    mae = np.abs(model.predict(test.hide_labels()) - truth).mean()
    assert mae < 0.8 * np.abs(np.median(train.lengths) - truth).mean()

    dist = check_dynamic(model, test)
    hidden = test.hide_labels()
    steps = test.steps
    np.testing.assert_allclose(model.predict_remaining(hidden), dist.quantile([0.5])[:, 0])
    raw = model._apply(model.dynamic_head, steps.hidden("mid"), 200 - steps.t)
    assert (np.diff(raw, axis=1) >= 0).all() and (raw.max(1) <= np.maximum(200 - steps.t, 1)).all()
    coverage = np.mean((dist.values[:, 0] <= steps.remaining)
                       & (steps.remaining <= dist.values[:, -1]))
    assert 0.6 <= coverage <= 0.95, coverage


def test_static_only_quantile_probe_offers_no_remaining_distribution(world) -> None:
    model = MLPQuantileProbe(layer="mid", dynamic=False, epochs=2, progress=False)
    assert model.distributional and not model.dynamic and not model.dynamic_distributional
    assert not model.needs.steps
    with pytest.raises(ValueError, match="levels"):
        MLPQuantileProbe(levels=(0.5, 0.25))


def test_point_probe_is_unchanged_by_the_shared_head_code(world) -> None:
    """The MSE probe still predicts one clipped value per row and per step."""
    model = MLPProbe(layer="mid", epochs=5, max_length=60, progress=False)
    model.fit(world["train"], world["val"])
    hidden = world["test"].hide_labels()
    pred, rem = model.predict(hidden), model.predict_remaining(hidden)
    steps = world["test"].steps
    assert pred.shape == (len(world["test"]),) and rem.shape == (len(steps),)
    assert pred.min() >= 1 and pred.max() <= 60
    assert (rem <= np.maximum(60 - steps.t, 1)).all() and not model.distributional
