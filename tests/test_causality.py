"""The causality audit: dynamic estimates at step t may read the response up to y_{t+1}, no more.

It passes the causal baselines (mlp_probe, plp, OUTLETS on a tiny random Llama), flags
predictors that read the future in each of the ways the dynamic view allows (tokens after
y_{t+1}, the number of tokens or steps of a row, later step states, later entropies), leaves the
audited predictor and the random state as they were, and the leaderboard marks a failed audit.
The perturbed view holds some rows of the split, each changed after a cut step, in its view and
in the feature store (lenbench/scoring/causality.py); tests/test_audit.py holds the predictors
that cheat only where an audit might not look.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from helpers.leaderboard import board_text
from helpers.models import tiny_llama
from helpers.worlds import synthetic_world

from baselines.mlp_probe import MLPProbe
from baselines.plp import PLP
from lenbench import Needs, Predictor, TargetModel
from lenbench.contract.views import SplitView
from lenbench.scoring.audit import audit_causality
from lenbench.scoring.causality import perturb


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, SplitView]:
    """test_egtp's synthetic feature store (L follows the prompt state; step states carry t / 50
    in their last dimension), with response tokens added."""
    labels, store = synthetic_world(tmp_path_factory.mktemp("world"), n=200)
    rng = np.random.default_rng(1)
    labels["output_token_ids"] = [rng.integers(3, 60, L).tolist() for L in labels["L"]]
    return {s: SplitView(s, labels, np.flatnonzero(labels["split"].to_numpy() == s), store)
            for s in ("train", "val", "test")}


class _Dynamic(Predictor):
    """A dynamic predictor whose estimate at each step is `rule(split, row, t)`."""

    needs = Needs(hidden=("last",), steps=True)

    def fit(self, train, val=None) -> None:
        pass

    def predict(self, split) -> np.ndarray:
        return np.full(len(split), 10.0)

    def rule(self, split, row: int, t: int) -> float:
        raise NotImplementedError

    def predict_remaining(self, split) -> np.ndarray:
        steps = split.steps
        return np.array([self.rule(split, r, t) for r, t in zip(steps.row, steps.t)],
                        dtype=np.float64)


class ReadsNextToken(_Dynamic):
    """Allowed: y_{t+1}, the token the draft reads at step t."""

    def rule(self, split, row, t):
        seq = split.sequence_token_ids(row)
        return float(seq[split.prompt_lengths[row] + t])


class ReadsTokenAfterNext(_Dynamic):
    """Not allowed: y_{t+2}."""

    def rule(self, split, row, t):
        seq, n = split.sequence_token_ids(row), split.prompt_lengths[row]
        return float(seq[n + t + 1]) if n + t + 1 < len(seq) else 0.0


class CountsTokens(_Dynamic):
    """Not allowed: the reviewer's cheat, L - t from the length of the whole sequence."""

    def rule(self, split, row, t):
        return float(len(split.sequence_token_ids(row)) - split.prompt_lengths[row] - t)


class CountsSteps(_Dynamic):
    """Not allowed: the number of steps of a row (stride 1: L)."""

    def predict_remaining(self, split):
        steps = split.steps
        return (np.bincount(steps.row)[steps.row] - steps.t).astype(np.float64)


class ReadsLastState(_Dynamic):
    """Not allowed: the state of the row's last step (here it carries (L - 1) / 50)."""

    def predict_remaining(self, split):
        steps = split.steps
        x = steps.hidden("last")
        last = {r: x[np.flatnonzero(steps.row == r)[-1], -1] for r in np.unique(steps.row)}
        return np.array([50 * last[r] + 1 - t for r, t in zip(steps.row, steps.t)])


class ReadsEntropy(_Dynamic):
    """Allowed up to position n-1+t (`upto` 0); position n+t (`upto` 1) is not."""

    upto = 0

    def rule(self, split, row, t):
        ent = split.entropy(row)
        return float(ent[: split.prompt_lengths[row] + t + self.upto].sum())


class ReadsNextEntropy(ReadsEntropy):
    upto = 1


class KeepsTheSplit(ReadsNextToken):
    def predict_remaining(self, split):
        self.scored = split
        return super().predict_remaining(split)


def test_causal_rules_pass_and_each_kind_of_peeking_fails(world) -> None:
    test = world["test"].hide_labels()
    for causal in (ReadsNextToken(), ReadsEntropy()):
        result = audit_causality(causal, test, n_rows=16, audit_seed=0)
        assert result["passed"] and result["max_abs_change"] == 0.0, (type(causal), result)
        assert result["checked_rows"] == 16 and result["steps_compared"] >= 16
        assert result["n_rows"] == len(test) and result["fresh_copies"]
    for cheat in (ReadsTokenAfterNext(), CountsTokens(), CountsSteps(), ReadsLastState(),
                  ReadsNextEntropy()):
        result = audit_causality(cheat, test, audit_seed=0)
        assert result["passed"] is False and result["max_abs_change"] > 0, (type(cheat), result)
    # the cheats score perfectly without the audit: the leak is real
    steps = world["test"].steps
    assert np.array_equal(CountsTokens().predict_remaining(test), steps.remaining)
    np.testing.assert_allclose(ReadsLastState().predict_remaining(test), steps.remaining,
                               atol=0.5)


def test_the_perturbation_keeps_what_step_c_allows_and_changes_the_rest(world) -> None:
    view = world["test"].hide_labels()
    drawn = np.array([40, 3, 17, 8, 29, 11, 52, 0, 33, 21, 45, 6, 14, 37, 25, 49])
    pert = perturb(view, drawn, np.random.default_rng(3))
    changed = pert.view
    assert pert.rows.tolist() == sorted(drawn) and len(changed) == len(pert.cuts) == 16
    assert changed.group_ids.tolist() == view.group_ids[pert.rows].tolist()  # in scored order
    s0, s1 = view.steps, changed.steps
    for j, i in enumerate(pert.rows):
        a, b = view.sequence_token_ids(i), changed.sequence_token_ids(j)
        x0, x1 = s0.hidden("last")[s0.row == i], s1.hidden("last")[s1.row == j]
        e0, e1 = view.entropy(i), changed.entropy(j)
        n, c = view.prompt_lengths[i], pert.cuts[j]
        np.testing.assert_array_equal(view.hidden("last", "entropy")[i],
                                      changed.hidden("last", "entropy")[j])
        assert len(b) - n == pert.new_length[j] and len(a) - n == pert.old_length[j]
        assert np.array_equal(a[: n + c + 1], b[: n + c + 1])  # prompt, y_1 .. y_{c+1}
        m = min(len(a), len(b))
        assert (a[n + c + 1: m] != b[n + c + 1: m]).all()  # every later token differs
        keep = s0.t[s0.row == i] <= c
        assert np.array_equal(x0[keep], x1[: keep.sum()])
        same = np.isclose(x0[~keep][: len(x1) - keep.sum()], x1[keep.sum():][: (~keep).sum()])
        assert same.size == 0 or same.mean() < 0.05  # later states are noise
        assert s1.t[s1.row == j].tolist() == list(range(len(b) - n))  # steps follow L'
        assert np.array_equal(e0[: n + c], e1[: n + c]) and len(e1) == len(b)
    # lengths are traded in pairs: the drawn rows' sequence lengths (and step count) are kept
    totals = [len(v.sequence_token_ids(i)) for v, rows in ((view, pert.rows),
                                                           (changed, range(16))) for i in rows]
    assert sorted(totals[:16]) == sorted(totals[16:])
    assert len(s1) == int(np.isin(s0.row, pert.rows).sum())
    assert (pert.new_length != pert.old_length).sum() >= 14
    assert view.first_response_tokens[pert.rows].tolist() == \
        changed.first_response_tokens.tolist()
    with pytest.raises(Exception, match="hidden"):
        _ = changed.lengths
    # the store as the audit sees it: the drawn rows changed in place, every other row as it was
    store, base = pert.store, view._features
    others = np.setdiff1d(np.arange(len(base.step_offsets) - 1), view._rows[pert.rows])
    for g in others[::7]:
        lo, hi = base.step_offsets[g], base.step_offsets[g + 1]
        lo2, hi2 = store.step_offsets[g], store.step_offsets[g + 1]
        np.testing.assert_array_equal(store.steps("last")[lo2:hi2], base.steps("last")[lo:hi])
        np.testing.assert_array_equal(store.step_index()[lo2:hi2, 1],
                                      base.step_index()[lo:hi, 1])
        np.testing.assert_array_equal(store.entropy(g), base.entropy(g))
    for j, g in enumerate(view._rows[pert.rows]):
        count = store.step_offsets[g + 1] - store.step_offsets[g]
        assert count == pert.new_length[j] and len(store.entropy(g)) == 2 + pert.new_length[j]


def test_audit_leaves_the_predictor_and_the_random_state_alone(world) -> None:
    pred = KeepsTheSplit()
    pred.scored = "the harness's view"
    np.random.seed(5)
    torch.manual_seed(5)
    before = (np.random.random(), torch.rand(1).item())
    np.random.seed(5)
    torch.manual_seed(5)
    assert audit_causality(pred, world["test"], audit_seed=0)["passed"]
    assert pred.scored == "the harness's view"
    assert (np.random.random(), torch.rand(1).item()) == before


def test_a_predictor_that_breaks_on_the_perturbed_view_fails(world) -> None:
    class Fragile(ReadsNextToken):
        def predict_remaining(self, split):
            if [split.sequence_token_ids(i).tolist() for i in range(len(split))] != self.seen:
                raise IndexError("surprised")
            return super().predict_remaining(split)

    pred = Fragile()
    test = world["test"]
    pred.seen = [test.sequence_token_ids(i).tolist() for i in range(len(test))]
    result = audit_causality(pred, test, audit_seed=0)
    assert result["passed"] is False and "IndexError: surprised" in result["error"]
    assert result["failed"] == ["predict_remaining"]


def test_mlp_probe_and_plp_pass(world) -> None:
    for pred in (MLPProbe(layer="last", epochs=3, progress=False),
                 PLP(max_length=200, epochs=3, steps_per_request=8, progress=False)):
        pred.fit(world["train"], world["val"])
        result = audit_causality(pred, world["test"].hide_labels(), audit_seed=0)
        assert result["passed"] and result["steps_compared"] > 0, (type(pred), result)
        # float noise only, far inside the audit's 1e-3-token tolerance: the perturbed pass
        # batches rows differently, and some CPUs' matmul kernels round by batch shape (an
        # Intel Xeon with AMX gave 9.4e-6 tokens, an AMD EPYC exactly 0)
        assert result["max_abs_change"] < 1e-4


def test_outlets_passes_on_a_tiny_model(tmp_path: Path) -> None:
    """OUTLETS runs its own draft on sequence_token_ids: causal attention and y_{t+1} inputs."""
    from baselines.outlets import Outlets
    from lenbench.configs.run import FeaturesConfig
    from lenbench.contract.features import FeatureStore
    from lenbench.features.extract import extract_features

    model = tiny_llama(n_layers=8, hidden=32, vocab=64, seed=0)
    rng = np.random.default_rng(0)
    shapes = [(int(rng.integers(3, 9)), int(rng.integers(2, 14))) for _ in range(24)]
    labels = pd.DataFrame({
        "prompt_id": [f"p{i}" for i in range(24)], "sample_idx": 0, "family": "",
        "split": ["train", "train", "test"] * 8, "text": [f"p{i}" for i in range(24)],
        "prompt_token_ids": [rng.integers(1, 64, n).tolist() for n, _ in shapes],
        "output_token_ids": [rng.integers(1, 64, L).tolist() for _, L in shapes],
        "L": [L for _, L in shapes]})
    folder = tmp_path / "features"
    folder.mkdir()
    extract_features(labels, model, folder, FeaturesConfig(roles=["mid"], poolings=["last"],
                                                           step_roles=["mid"]), progress=False)
    store, target = FeatureStore(folder), TargetModel(model, None)
    split = labels["split"].to_numpy()
    train, test = (SplitView(s, labels, np.flatnonzero(split == s), store, target)
                   for s in ("train", "test"))
    pred = Outlets(draft_vocab_size=48, max_length=64, progress=False,
                   train={"epochs": 1, "max_steps": 4, "warmup_steps": 1, "batch_tokens": 256,
                          "target_cache": "off"})
    pred.fit(train)
    with torch.no_grad():  # four steps leave z near 0 (every estimate clipped to 1): spread it
        pred.draft.length_head[-1].weight.mul_(30.0)
        pred.draft.length_head[-1].bias.add_(2.5)
    rem = pred.predict_remaining(test.hide_labels())
    pred._scored = None
    assert len(np.unique(rem)) > len(rem) // 2  # estimates differ from step to step
    result = audit_causality(pred, test.hide_labels(), n_rows=8, audit_seed=0)
    assert result["passed"] and result["checked_rows"] == 8, result  # every test row
    assert result["max_abs_change"] < 1e-3
    assert pred._scored is None  # the audit ran on a copy: report() still reads the real split
    # the same draft made to look one token further ahead is caught
    peek = Outlets(draft_vocab_size=48, max_length=64, progress=False)
    peek.draft, peek.train_cfg = pred.draft, pred.train_cfg

    def one_ahead(split, seqs, positions):
        return Outlets._predict_log(peek, split, seqs, [p + 1 for p in positions])

    peek._predict_log = one_ahead
    assert audit_causality(peek, test.hide_labels(), audit_seed=0)["passed"] is False


def test_leaderboard_marks_a_failed_audit(tmp_path: Path) -> None:
    from helpers.leaderboard import heading_block, synthetic_result

    from lenbench.leaderboard import build_leaderboard
    from lenbench.results import write_result

    res = tmp_path / "results"
    extra = {"observed_steps": [0, 8], "mae_by_observed_steps": [30.0, 25.0],
             "n_by_observed_steps": [8, 6]}
    for name, passed in (("plp", True), ("peeker", False)):
        synthetic_result(res, name, 0, {}, dynamic=extra)
        path = next((res / "toyworld" / "toy" / name).glob("*.json"))
        d = json.loads(path.read_text())
        d["causality"] = {"passed": passed, "checked_rows": 8}
        write_result(path, d)
    board = board_text(build_leaderboard(res, tmp_path / "board"))
    block = heading_block(board, "Dynamic MAE by observed steps")
    assert "| peeker (non-causal) | 30.0 | 25.0 |" in block
    assert "| plp | 30.0 | 25.0 |" in block
