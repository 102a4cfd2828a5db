"""The audit of what was scored (lenbench/scoring/audit.py): a fresh copy of the fitted
predictor must reproduce the scored outputs of every method on a random share of the test rows,
perturbed. Predictors that cheat only where a small or separate audit would not look are
flagged: on views larger than the audit's only, in `predict_remaining_distribution` only, on
unperturbed data only, on the first call only, across rows; an honest predictor with every
method passes, and the flag reaches the result file and the leaderboard. Sparse leaks and the
audit's power: tests/test_audit_power.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers.audit import Honest, audit_world, fitted, next_token, true_remaining
from helpers.leaderboard import board_text
from helpers.models import tiny_llama
from helpers.worlds import CFG, TrainQuantiles, make_world

from lenbench import QUANTILE_LEVELS, LengthDistribution, Predictor, TargetModel
from lenbench.contract.views import SplitView
from lenbench.evaluate import evaluate_predictor, save
from lenbench.results import validate_result
from lenbench.scoring.audit import audit_causality, fresh_copy
from lenbench.scoring.perturbed_store import PerturbedStore, RowChange


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, SplitView]:
    """helpers.audit's synthetic world: about 540 test rows."""
    return audit_world(tmp_path_factory.mktemp("world"))


class LargeViewsOnly(Honest):
    """Reads L from the dynamic view only when the view has more than 16 rows."""

    def predict_remaining(self, split) -> np.ndarray:
        return true_remaining(split) if len(split) > 16 else next_token(split)


class DistributionOnly(Honest):
    """Causal point estimates; its remaining-length distribution is centred on L - t."""

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        rem = true_remaining(split)
        return LengthDistribution.from_quantiles(
            QUANTILE_LEVELS, rem[:, None] + np.arange(len(QUANTILE_LEVELS)) - 2.0)


class UnperturbedOnly(Honest):
    """Reads L unless some step state of the view breaks the pattern of real ones (t / 50 in
    the last dimension): an audit view looks different, so it behaves there."""

    def predict_remaining(self, split) -> np.ndarray:
        steps = split.steps
        real = np.allclose(steps.hidden("last")[:, -1], steps.t / 50, atol=0.02)
        return true_remaining(split) if real else next_token(split)


class FirstCallOnly(Honest):
    """Reads L on its first dynamic call only (state kept on the predictor)."""

    def fit(self, train, val=None) -> None:
        super().fit(train, val)
        self.calls = 0

    def predict_remaining(self, split) -> np.ndarray:
        self.calls += 1
        return true_remaining(split) if self.calls == 1 else next_token(split)


class OtherRows(Honest):
    """Standardises the step states with the statistics of the whole view, so every estimate
    reads the later states of every row (an honest mistake: a scaler fitted on the test set)."""

    def predict_remaining(self, split) -> np.ndarray:
        x = split.steps.hidden("last")[:, 0].astype(np.float64)
        return next_token(split) + 100.0 * (x - x.mean()) / x.std()


def test_an_honest_predictor_passes_on_every_method(world) -> None:
    test = world["test"]
    result = audit_causality(fitted(Honest(), world), test, audit_seed=1)
    assert result["passed"], result
    assert set(result["methods"]) == {"predict", "predict_variants.half", "predict_distribution",
                                      "predict_remaining", "predict_remaining_distribution"}
    assert all(m["compared"] > 0 and m["moved"] == 0 for m in result["methods"].values())
    # the drawn rows: 100 for the power target, under a quarter of the rows and the steps
    assert result["checked_rows"] == 100 and result["limited_by"] == "power target"
    assert result["methods"]["predict"]["compared"] == 100 < 0.25 * len(test)
    assert result["steps_share"] <= 0.25 and result["power"] >= 0.95
    assert result["max_abs_change"] == 0.0  # replayed random state: the same draws
    assert result["methods"]["predict_remaining_distribution"]["unit"] == "probability"


def test_reading_L_on_views_larger_than_the_audits_only_is_flagged(world) -> None:
    test = world["test"]
    cheat = fitted(LargeViewsOnly(), world)
    assert len(test) > 16
    # the leak is real: on the scored split its dynamic MAE is 0.0
    np.testing.assert_array_equal(cheat.predict_remaining(test.hide_labels()),
                                  test.steps.remaining)
    # an audit of a small view (4 of 16 rows checked) sees a causal predictor
    small = test._copy(np.arange(16), labels_visible=True)
    assert audit_causality(cheat, small, audit_seed=0)["passed"]
    result = audit_causality(cheat, test, audit_seed=0)  # 100 rows checked: more than 16
    assert result["passed"] is False and result["failed"] == ["predict_remaining"], result
    assert result["methods"]["predict_remaining"]["moved"] > 0


def test_reading_L_in_the_remaining_distribution_only_is_flagged(world) -> None:
    result = audit_causality(fitted(DistributionOnly(), world), world["test"], audit_seed=2)
    assert result["passed"] is False, result
    assert result["failed"] == ["predict_remaining_distribution"]
    assert result["methods"]["predict_remaining"]["passed"]


@pytest.mark.parametrize("cheat", [UnperturbedOnly, FirstCallOnly, OtherRows])
def test_cheats_that_a_separate_re_prediction_would_miss_are_flagged(world, cheat) -> None:
    pred = fitted(cheat(), world)
    result = audit_causality(pred, world["test"], audit_seed=3)
    assert result["passed"] is False and result["failed"] == ["predict_remaining"], result
    entry = result["methods"]["predict_remaining"]
    if cheat is OtherRows:  # the view's statistics moved the kept steps of every row
        assert entry["moved"] > 0.9 * entry["compared"]
    if cheat is FirstCallOnly:
        assert pred.calls == 0  # the audit ran on copies of the fitted state


def test_each_method_runs_once_more_on_the_drawn_rows_only(world) -> None:
    seen = []

    class Counting(Honest):
        def predict(self, split):
            seen.append(("predict", len(split)))
            return super().predict(split)

        def predict_remaining(self, split):
            seen.append(("predict_remaining", len(split)))
            return super().predict_remaining(split)

    result = audit_causality(fitted(Counting(), world), world["test"], audit_seed=4)
    n, k = len(world["test"]), result["checked_rows"]
    # predict also serves predict_variants and the distribution: three calls per pass
    assert seen.count(("predict", n)) == 3 and seen.count(("predict", k)) == 3
    assert seen.count(("predict_remaining", n)) == 1
    assert seen.count(("predict_remaining", k)) == 1
    assert {size for _, size in seen} == {n, k} and k < n / 4


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
    # a substitute stands in for its original wherever the predictor holds it
    store, changed = object(), object()
    pred.kept = {"store": store, "again": [store]}
    copy = fresh_copy(pred, [pred.target], substitutes=[(store, changed)])
    assert copy.kept["store"] is changed and copy.kept["again"][0] is changed
    assert pred.kept["store"] is store


class _Steps:
    """A store of 4 rows with 3, 0, 2 and 4 steps (state = 10 * row + t), for PerturbedStore."""

    step_offsets = np.array([0, 3, 3, 5, 9])

    def __init__(self):
        self.index = np.array([(0, 0), (0, 1), (0, 2), (2, 0), (2, 1), (3, 0), (3, 1), (3, 2),
                               (3, 3)])
        self.states = (10.0 * self.index[:, :1] + self.index[:, 1:]).repeat(2, 1)

    def step_index(self):
        return self.index

    def steps(self, role, pooling="last"):
        return self.states


def test_a_perturbed_store_rewrites_rows_in_place_and_indexes_like_one_array() -> None:
    base = _Steps()
    # row 0 keeps 2 steps and gets 3 more (t = 2, 3, 4); row 3 keeps 1 and gets none
    store = PerturbedStore(base, [RowChange(0, 2, np.array([2, 3, 4]), None),
                                  RowChange(3, 1, np.array([], dtype=np.int64), None)], 0)
    assert store.step_offsets.tolist() == [0, 5, 5, 7, 8]
    index = np.array([(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (2, 0), (2, 1), (3, 0)])
    kept = [0, 1, None, None, None, 3, 4, 5]  # where each step comes from in the base arrays
    for key in ([0, 7, 3, 6], np.array([7, 1]), slice(1, 8, 3), 6, -1, (np.array([5, 0]), 1),
                index[:, 1] > 0):
        np.testing.assert_array_equal(store.step_index()[key], index[key])
    states = store.steps("x")
    assert states.shape == (8, 2) and len(states) == 8
    for at, source in enumerate(kept):
        if source is not None:  # kept steps are the base's; the new ones are noise
            np.testing.assert_array_equal(states[at], base.states[source])
    noise = states[[2, 3, 4]]
    assert not np.isin(noise, base.states).any() and np.array_equal(noise, states[2:5])
    with pytest.raises(IndexError):
        states[[8]]


class PeekingDistribution(TrainQuantiles):
    """The harness's distributional test predictor, reading L from the number of steps in
    `predict_remaining_distribution`."""

    def predict_remaining_distribution(self, split) -> LengthDistribution:
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
    # 60 test rows: a quarter of them at most, and the power that reached, recorded
    assert 2 <= audit["checked_rows"] <= 15 and audit["limited_by"] == "cost cap"
    assert audit["power"] == pytest.approx(1 - 0.97 ** audit["rows_with_new_length"])
    assert audit["power"] < 0.95
    assert audit["seconds"] >= audit["repredict_seconds"] > 0 and audit["scored_seconds"] > 0
    assert audit["extra_cost"] == pytest.approx(audit["seconds"] / audit["scored_seconds"])
    cheat = evaluate_predictor(PeekingDistribution(), "peeker", {"name": "peeker"}, world, CFG,
                               seed=0)
    assert cheat["causality"]["failed"] == ["predict_remaining_distribution"]
    for result in (honest, cheat):
        path = save(result, tmp_path / "results")
        validate_result(json.loads(path.read_text()), str(path))
    board = board_text(build_leaderboard(tmp_path / "results", tmp_path / "board"))
    # the main table and the distributions table both mark it
    sections = board.split("\n## ")[2:] if "## Verdict" in board else board.split("\n## ")[1:]
    board = "\n## ".join(sections)  # the world's tables, not the verdict that opens the page
    assert board.count("| peeker (non-causal) |") == 2 and board.count("| tq |") == 2
