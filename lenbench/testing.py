"""Small synthetic splits for a predictor's own tests, installed with lenbench.

A predictor written outside lenbench is tested the way the harness runs it, on data small enough
for a unit test (a second or two), without a model or a cache:

    from lenbench.testing import fit_and_score, synthetic_splits

    def test_my_predictor_beats_the_train_median(tmp_path):
        scored = fit_and_score(MyPredictor(alpha=0.5), synthetic_splits(tmp_path))
        assert scored.static_mae < 0.8 * scored.median_mae

`synthetic_splits` writes a features folder and returns the train, val and test `SplitView`s
the harness would hand over: prompts whose length is set by one task word among filler words
(`prompts`, `prompt_token_ids`, a family per task), several sampled responses per prompt (the
same prompt, other lengths), hidden states of every role and pooling in which the task can be
read, per-step states for dynamic predictors (the prompt state, with t / max_length in the last
dimension) and per-token entropies. `fit_and_score` fits on train and val, predicts the test
split through its static view (and its dynamic view, and a distribution, where the predictor
has them) and checks one value per row, as the harness does.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from lenbench.contract.distributions import LengthDistribution
from lenbench.contract.features import (
    POOLINGS,
    ROLES,
    STEP_POOLINGS,
    FeatureStore,
    static_file,
    step_file,
)
from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.contract.predictor import Predictor
from lenbench.contract.step_index import StepIndexStore
from lenbench.contract.views import SplitView

__all__ = ["FILLER", "TASKS", "Scored", "Splits", "as_declared", "fit_and_score",
           "synthetic_splits"]

# The word that sets a prompt's typical length, and that length in tokens; the rest is filler.
TASKS = {"haiku": 12, "define": 30, "explain": 90, "compare": 160, "essay": 240}
FILLER = ("please", "the", "a", "of", "my", "about", "quick", "brief", "new", "topic", "for",
          "this", "that", "kind")
_VOCAB = {word: i + 2 for i, word in enumerate([*TASKS, *FILLER])}  # 0: padding, 1: BOS


@dataclass
class Splits:
    """The train, val and test views of one synthetic world (labels readable on each: give
    `test.static_view(needs)` to `predict`, `test.hide_labels()` to `predict_remaining`)."""

    train: SplitView
    val: SplitView
    test: SplitView
    max_length: int


def _prompts(rng: np.random.Generator, n: int) -> tuple[list[str], list[str]]:
    tasks = list(rng.choice(list(TASKS), size=n))
    texts = []
    for task in tasks:
        words = [task, *rng.choice(FILLER, size=int(rng.integers(2, 9)))]
        rng.shuffle(words)
        texts.append(" ".join(words))
    return tasks, texts


def _labels(rng: np.random.Generator, tasks: list[str], texts: list[str], samples: int,
            max_length: int) -> pd.DataFrame:
    n = len(tasks)
    order = rng.permutation(n)
    split_of = np.empty(n, dtype=object)
    split_of[order[: int(0.6 * n)]] = "train"
    split_of[order[int(0.6 * n): int(0.8 * n)]] = "val"
    split_of[order[int(0.8 * n):]] = "test"
    rows = []
    for p, (task, text) in enumerate(zip(tasks, texts)):
        ids = [1, *(_VOCAB[w] for w in text.split())]
        for s in range(samples):
            length = int(min(max_length, max(1, round(TASKS[task] * rng.lognormal(0.0, 0.25)))))
            rows.append({"prompt_id": f"p{p:05d}", "sample_idx": s, "split": split_of[p],
                         "family": task, "text": text, "prompt_token_ids": ids,
                         "output_token_ids": rng.integers(2, 200, size=length).tolist(),
                         "L": length, "finish_reason": "stop", "censored": False})
    return pd.DataFrame(rows, columns=LABEL_COLUMNS)


def _features(folder: Path, labels: pd.DataFrame, hidden_size: int, max_length: int,
              rng: np.random.Generator) -> FeatureStore:
    """A features folder as the features stage writes it (lenbench/contract/features.py)."""
    folder.mkdir(parents=True, exist_ok=True)
    task_index = {task: i for i, task in enumerate(TASKS)}
    n = len(labels)
    prompt_state = np.zeros((n, hidden_size), dtype=np.float32)
    for i, family in enumerate(labels["family"]):
        prompt_state[i, task_index[family] % (hidden_size - 1)] = 2.0
    lengths = labels["L"].to_numpy()
    step_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    step_index = np.array([(i, t) for i in range(n) for t in range(lengths[i])],
                          dtype=np.int64).reshape(-1, 2)
    for r, role in enumerate(ROLES):
        state = prompt_state + rng.normal(0.0, 0.3 + 0.1 * r, size=prompt_state.shape)
        state[:, -1] = 0.0
        for pooling in POOLINGS:
            np.save(folder / static_file(role, pooling), state.astype(np.float16))
        steps = state[step_index[:, 0]]
        steps[:, -1] = step_index[:, 1] / max_length
        for pooling in STEP_POOLINGS:
            np.save(folder / step_file(role, pooling), steps.astype(np.float16))
    n_tokens = labels["prompt_token_ids"].map(len).to_numpy() + lengths
    token_offsets = np.concatenate([[0], np.cumsum(n_tokens)]).astype(np.int64)
    np.save(folder / "entropy.npy", rng.uniform(0.0, 3.0, token_offsets[-1]).astype(np.float32))
    np.save(folder / "entropy_offsets.npy", token_offsets)
    np.save(folder / "steps_offsets.npy", step_offsets)
    np.save(folder / "steps_index.npy", step_index)
    (folder / "meta.json").write_text(json.dumps(
        {"roles": list(ROLES), "poolings": list(POOLINGS), "step_roles": list(ROLES),
         "step_poolings": list(STEP_POOLINGS), "step_stride": 1}))
    return FeatureStore(folder)


def synthetic_splits(folder: str | Path, n_prompts: int = 200, samples_per_prompt: int = 2,
                     hidden_size: int = 16, max_length: int = 256, seed: int = 0) -> Splits:
    """A small synthetic world: its features written under `folder` (a test's `tmp_path`), its
    prompts split 60/20/20 into train, val and test (by prompt, as the harness splits)."""
    if n_prompts < 10 or samples_per_prompt < 1 or hidden_size < len(TASKS) + 1:
        raise ValueError(f"synthetic_splits needs n_prompts >= 10, samples_per_prompt >= 1 and "
                         f"hidden_size >= {len(TASKS) + 1}")
    rng = np.random.default_rng(seed)
    tasks, texts = _prompts(rng, n_prompts)
    labels = _labels(rng, tasks, texts, samples_per_prompt, max_length)
    store = _features(Path(folder), labels, hidden_size, max_length, rng)
    views = [SplitView(s, labels, np.flatnonzero(labels["split"].to_numpy() == s), store)
             for s in ("train", "val", "test")]
    return Splits(*views, max_length=max_length)


@dataclass
class Scored:
    """What `fit_and_score` measured on the test split: the predictions, their MAE beside the
    train median's, and where the predictor has them, the remaining-length predictions (one per
    step, `dynamic_mae` their plain mean error over steps; the harness averages per request
    first) and the predicted distributions."""

    static: np.ndarray
    static_mae: float
    median_mae: float
    remaining: np.ndarray | None = None
    dynamic_mae: float | None = None
    distribution: LengthDistribution | None = None


def _one_per(values, n: int, method: str) -> np.ndarray:
    out = np.asarray(values, dtype=np.float64).reshape(-1)
    if out.shape != (n,) or not np.isfinite(out).all():
        raise AssertionError(f"{method} must return {n} finite values, got shape "
                             f"{np.shape(values)}")
    return out


def as_declared(splits: Splits, needs) -> Splits:
    """The splits as the harness builds them for a run of predictors declaring `needs` alone:
    with steps but no target state declared, the views hold the steps and nothing of the
    target (no hidden states, no entropies), as in such a run."""
    if not needs.features or needs.forward:
        return splits

    def steps_only(view: SplitView) -> SplitView:
        out = copy.copy(view)
        out._features = StepIndexStore.of_store(view._features)
        return out

    return replace(splits, train=steps_only(splits.train), val=steps_only(splits.val),
                   test=steps_only(splits.test))


def fit_and_score(predictor: Predictor, splits: Splits, seed: int = 0) -> Scored:
    """Fit `predictor` on train and val and predict the test split through the views the
    harness hands over (`as_declared`), checking one finite value per row (per step for
    `predict_remaining`)."""
    splits = as_declared(splits, predictor.needs)
    predictor.seed = seed
    predictor.fit(splits.train, splits.val)
    test, truth = splits.test, splits.test.lengths.astype(np.float64)
    static = _one_per(predictor.predict(test.static_view(predictor.needs)), len(test), "predict")
    median = float(np.median(splits.train.lengths))
    scored = Scored(static, float(np.abs(static - truth).mean()),
                    float(np.abs(median - truth).mean()))
    if predictor.distributional:
        dist = predictor.predict_distribution(test.static_view(predictor.needs))
        if not isinstance(dist, LengthDistribution) or len(dist) != len(test):
            raise AssertionError(f"predict_distribution must return a LengthDistribution of "
                                 f"{len(test)} rows")
        scored.distribution = dist
    if predictor.dynamic:
        steps = test.steps
        remaining = _one_per(predictor.predict_remaining(test.hide_labels()), len(steps),
                             "predict_remaining")
        scored.remaining = remaining
        scored.dynamic_mae = float(np.abs(remaining - steps.remaining).mean())
    return scored
