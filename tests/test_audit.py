"""The audit of what was scored (lenbench/scoring/audit.py): fresh copies of the fitted predictor
must reproduce the scored outputs of every method on a full-size view of the test split with a
few rows perturbed. Predictors that cheat only where a small or separate audit would not look are
flagged: on large views only, in `predict_remaining_distribution` only, on unperturbed data only,
on the first call only, across rows; an honest predictor with every method passes, and the flag
reaches the result file and the leaderboard."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.models import tiny_llama
from helpers.worlds import CFG, TrainQuantiles, make_world, synthetic_world

from lenbench import QUANTILE_LEVELS, LengthDistribution, Needs, Predictor, TargetModel
from lenbench.contract.views import SplitView
from lenbench.evaluate import evaluate_predictor, save
from lenbench.results import validate_result
from lenbench.scoring.audit import audit_causality, fresh_copy
from lenbench.scoring.causality import _Stacked


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, SplitView]:
    """A synthetic feature store (step states carry t / 50 in their last dimension) with
    response tokens; the test split has about 60 rows."""
    labels, store = synthetic_world(tmp_path_factory.mktemp("world"), n=200)
    rng = np.random.default_rng(1)
    labels["output_token_ids"] = [rng.integers(3, 60, L).tolist() for L in labels["L"]]
    return {s: SplitView(s, labels, np.flatnonzero(labels["split"].to_numpy() == s), store)
            for s in ("train", "val", "test")}


def _true_remaining(split) -> np.ndarray:
    """L - t read from the dynamic view the forbidden way (the number of steps of a row)."""
    steps = split.steps
    return (np.bincount(steps.row)[steps.row] - steps.t).astype(np.float64)


def _next_token(split) -> np.ndarray:
    """An allowed dynamic reading: y_{t+1} at each step."""
    steps, n = split.steps, split.prompt_lengths
    seqs = [split.sequence_token_ids(r) for r in range(len(split))]
    return np.array([float(seqs[r][n[r] + t]) for r, t in zip(steps.row, steps.t)])


class Honest(Predictor):
    """Every method, each reading only what its step allows (prompt state, y_{t+1}, the
    step's own state); the static point adds noise from the global generators, which the audit
    replays."""

    needs = Needs(hidden=("last",), steps=True)

    def fit(self, train, val=None) -> None:
        self.scale = float(np.mean(train.lengths))

    def predict(self, split) -> np.ndarray:
        noise = np.random.random(len(split)) + torch.rand(len(split)).numpy()
        return self.scale * (1.5 + np.tanh(split.hidden("last")[:, 0])) + noise

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        return {"half": 0.5 * self.predict(split)}

    def predict_distribution(self, split) -> LengthDistribution:
        point = self.predict(split)
        return LengthDistribution.from_quantiles(
            QUANTILE_LEVELS, point[:, None] * np.linspace(0.5, 1.5, len(QUANTILE_LEVELS)))

    def predict_remaining(self, split) -> np.ndarray:
        return _next_token(split) + split.steps.hidden("last")[:, 0]

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        z = 1.0 / (1.0 + np.exp(-split.steps.hidden("last")[:, :2]))
        probs = np.concatenate([z, 1.0 - z], axis=1)
        return LengthDistribution.from_histogram([0, 10, 50, 100, 300], probs)


class LargeViewsOnly(Honest):
    """Reads L from the dynamic view only when the view has more than 16 rows."""

    def predict_remaining(self, split) -> np.ndarray:
        return _true_remaining(split) if len(split) > 16 else _next_token(split)


class DistributionOnly(Honest):
    """Causal point estimates; its remaining-length distribution is centred on L - t."""

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        rem = _true_remaining(split)
        return LengthDistribution.from_quantiles(
            QUANTILE_LEVELS, rem[:, None] + np.arange(len(QUANTILE_LEVELS)) - 2.0)


class UnperturbedOnly(Honest):
    """Reads L unless some step state of the view breaks the pattern of real ones (t / 50 in
    the last dimension): an audit view looks different, so it behaves there."""

    def predict_remaining(self, split) -> np.ndarray:
        steps = split.steps
        real = np.allclose(steps.hidden("last")[:, -1], steps.t / 50, atol=0.02)
        return _true_remaining(split) if real else _next_token(split)


class FirstCallOnly(Honest):
    """Reads L on its first dynamic call only (state kept on the predictor)."""

    def fit(self, train, val=None) -> None:
        super().fit(train, val)
        self.calls = 0

    def predict_remaining(self, split) -> np.ndarray:
        self.calls += 1
        return _true_remaining(split) if self.calls == 1 else _next_token(split)


class OtherRows(Honest):
    """Standardises the step states with the statistics of the whole view, so every estimate
    reads the later states of every row (an honest mistake: a scaler fitted on the test set)."""

    def predict_remaining(self, split) -> np.ndarray:
        x = split.steps.hidden("last")[:, 0].astype(np.float64)
        return _next_token(split) + 100.0 * (x - x.mean()) / x.std()


def test_an_honest_predictor_passes_on_every_method(world) -> None:
    result = audit_causality(_fit(Honest(), world), world["test"])
    assert result["passed"], result
    assert set(result["methods"]) == {"predict", "predict_variants.half", "predict_distribution",
                                      "predict_remaining", "predict_remaining_distribution"}
    assert all(m["compared"] > 0 for m in result["methods"].values())
    assert result["methods"]["predict"]["compared"] == len(world["test"])  # every row
    assert result["max_abs_change"] == 0.0  # replayed random state: the same draws
    assert result["methods"]["predict_remaining_distribution"]["unit"] == "probability"


def _fit(pred: Predictor, world) -> Predictor:
    pred.fit(world["train"], world["val"])
    return pred


def test_reading_L_on_large_views_only_is_flagged(world) -> None:
    test = world["test"]
    cheat = _fit(LargeViewsOnly(), world)
    assert len(test) > 16
    # the leak is real: on the scored split its dynamic MAE is 0.0
    np.testing.assert_array_equal(cheat.predict_remaining(test.hide_labels()),
                                  test.steps.remaining)
    # an audit of a separate small view sees a causal predictor
    small = test._copy(np.arange(16), labels_visible=True)
    assert audit_causality(cheat, small)["passed"]
    result = audit_causality(cheat, test)
    assert result["passed"] is False and result["failed"] == ["predict_remaining"], result
    changed = result["methods"]["predict_remaining"]["changed_values"]
    assert changed["perturbed_rows"] > 0 and changed["other_rows"] == 0


def test_reading_L_in_the_remaining_distribution_only_is_flagged(world) -> None:
    result = audit_causality(_fit(DistributionOnly(), world), world["test"])
    assert result["passed"] is False, result
    assert result["failed"] == ["predict_remaining_distribution"]
    assert result["methods"]["predict_remaining"]["passed"]


@pytest.mark.parametrize("cheat", [UnperturbedOnly, FirstCallOnly, OtherRows])
def test_cheats_that_a_separate_re_prediction_would_miss_are_flagged(world, cheat) -> None:
    pred = _fit(cheat(), world)
    result = audit_causality(pred, world["test"])
    assert result["passed"] is False and result["failed"] == ["predict_remaining"], result
    if cheat is OtherRows:  # unchanged rows moved: other rows' later states were read
        assert result["methods"]["predict_remaining"]["changed_values"]["other_rows"] > 0
    if cheat is FirstCallOnly:
        assert pred.calls == 0  # the audit ran on copies of the fitted state


def test_each_method_runs_once_on_a_view_of_the_full_size(world) -> None:
    seen = []

    class Counting(Honest):
        def predict(self, split):
            seen.append(("predict", len(split)))
            return super().predict(split)

        def predict_remaining(self, split):
            seen.append(("predict_remaining", len(split)))
            return super().predict_remaining(split)

    audit_causality(_fit(Counting(), world), world["test"])
    n = len(world["test"])
    # scored calls, then the audit's: predict also serves predict_variants and the distribution
    assert seen.count(("predict", n)) == 2 * 3 and seen.count(("predict_remaining", n)) == 2
    assert {size for _, size in seen} == {n}


def test_fresh_copies_share_the_target_and_copy_the_rest() -> None:
    target = tiny_llama(n_layers=2, hidden=16, vocab=32, seed=0)

    class Draft(Predictor):
        def fit(self, train, val=None):
            pass

        def predict(self, split):
            return np.ones(len(split))

    pred = Draft()
    pred.embed = torch.nn.Embedding.from_pretrained(target.get_input_embeddings().weight.detach())
    pred.head = torch.nn.Linear(16, 1)
    pred.target = TargetModel(target, tokenizer=None)
    copy = fresh_copy(pred, [pred.target])
    assert copy.target is pred.target and copy.target.model is target
    assert copy.embed.weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    assert copy.head.weight.data_ptr() != pred.head.weight.data_ptr()
    assert torch.equal(copy.head.weight, pred.head.weight)


def test_stacked_rows_index_like_one_array() -> None:
    base, extra = np.arange(12).reshape(6, 2), np.arange(100, 106).reshape(3, 2)
    whole = np.concatenate([base, extra])
    stacked = _Stacked(base, extra)
    assert stacked.shape == whole.shape and len(stacked) == 9
    for key in ([0, 7, 3, 8], np.array([8, 1]), slice(2, 9, 3), 7, -1, (np.array([6, 0]), 1),
                whole[:, 0] > 4):
        np.testing.assert_array_equal(stacked[key], whole[key])


class LargeViewDistribution(TrainQuantiles):
    """The harness's distributional test predictor, reading L from the number of steps in
    `predict_remaining_distribution` when the view is large."""

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        if len(split) <= 16:
            return super().predict_remaining_distribution(split)
        rem = 7.0 * np.bincount(split.steps.row)[split.steps.row] - split.steps.t
        return LengthDistribution.from_quantiles(QUANTILE_LEVELS, rem[:, None] + np.arange(5))


def test_the_harness_records_the_audit_and_the_leaderboard_marks_it(tmp_path) -> None:
    from lenbench.leaderboard import build_leaderboard

    world = make_world(2, censor_every=5)  # no response tokens, no step states: steps only
    honest = evaluate_predictor(TrainQuantiles(), "tq", {"name": "tq"}, world, CFG, seed=0)
    audit = honest["causality"]
    assert audit["passed"] and audit["n_rows"] == len(world.rows("test")), audit
    assert set(audit["methods"]) == {"predict", "predict_distribution",
                                     "predict_remaining_distribution"}
    assert audit["seconds"] >= 0 and audit["rows_with_new_length"] >= 14
    cheat = evaluate_predictor(LargeViewDistribution(), "peeker", {"name": "peeker"}, world, CFG,
                               seed=0)
    assert cheat["causality"]["failed"] == ["predict_remaining_distribution"]
    for result in (honest, cheat):
        path = save(result, tmp_path / "results")
        validate_result(json.loads(path.read_text()), str(path))
    board = build_leaderboard(tmp_path / "results", tmp_path / "board").read_text("utf-8")
    # the main table and the distributions table both mark it
    assert board.count("| peeker (non-causal) |") == 2 and board.count("| tq |") == 2
