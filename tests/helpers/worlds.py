"""Small synthetic worlds for predictor tests: feature stores, split views, toy targets.

- `synthetic_world` / `views` / `run_predictor`: a feature store where L follows the prompt state,
  and one predictor through `lenbench` on the session's toy world (EGTP, PLP, BERT, OPT tests);
- `synthetic`: prompts whose length is set by one task word (tfidf_ridge, BERT, OPT tests);
- `tiny_world` / `draft_for` / `tiny_views`: a random tiny target with sequences, an OUTLETS draft
  for it, and split views over them;
- `make_world` / `TrainQuantiles` / `CFG`: an in-process World and a distributional predictor for
  evaluate_predictor.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from helpers.cli import E2E_UPSTREAM, run_lenbench
from helpers.models import tiny_llama
from lenbench import QUANTILE_LEVELS, LengthDistribution, Predictor
from lenbench.configs import RunConfig
from lenbench.configs.run import FeaturesConfig
from lenbench.contract.features import FeatureStore
from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.contract.step_index import StepIndexStore
from lenbench.contract.views import SplitView
from lenbench.outlets.modeling import DraftConfig, DraftModel
from lenbench.outlets.train import Sequence
from lenbench.outlets.vocab import build_draft_vocab
from lenbench.pipeline import World

# ---------------------------------------------------------------------------------------------
# a feature store where L is a smooth function of the prompt state (tests/test_egtp.py)


def synthetic_world(folder: Path, n: int = 600, hidden: int = 8, seed: int = 0
                    ) -> tuple[pd.DataFrame, FeatureStore]:
    """A feature store where L is a smooth function of the prompt state; steps carry t / 50 in
    their last dimension (0 in the prompt state, so step 0 equals the prompt pool)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, hidden)).astype(np.float32)
    x[:, -1] = 0.0
    L = (10 + 150 / (1 + np.exp(-(1.5 * x[:, 0] + x[:, 1]))) + rng.normal(0, 3, n)).astype(int)
    L = np.clip(L, 1, 200)
    split = np.array(["train", "val", "test"])[rng.choice(3, n, p=[0.6, 0.1, 0.3])]
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "sample_idx": 0,
                           "split": split, "family": "", "text": [f"p{i}" for i in range(n)],
                           "prompt_token_ids": [[1, 2]] * n, "L": L})
    offsets = np.concatenate([[0], np.cumsum(L)])
    index = np.array([(i, t) for i in range(n) for t in range(L[i])], dtype=np.int32)
    steps = x[index[:, 0]].copy()
    steps[:, -1] = index[:, 1] / 50
    np.save(folder / "steps_offsets.npy", offsets)
    np.save(folder / "steps_index.npy", index)
    for pool in ("last", "entropy"):
        np.save(folder / f"static_last_{pool}.npy", x.astype(np.float16))
        np.save(folder / ("steps_last.npy" if pool == "last" else "steps_last_entropy.npy"),
                steps.astype(np.float16))
    tok = np.concatenate([[0], np.cumsum(2 + L)])
    np.save(folder / "entropy_offsets.npy", tok)
    np.save(folder / "entropy.npy", np.zeros(tok[-1], dtype=np.float32))
    (folder / "meta.json").write_text(json.dumps(
        {"roles": ["last"], "poolings": ["last", "entropy"], "step_roles": ["last"],
         "step_poolings": ["last", "entropy"], "step_stride": 1}))
    return labels, FeatureStore(folder)


def views(labels: pd.DataFrame, store: FeatureStore) -> dict[str, SplitView]:
    return {s: SplitView(s, labels, np.flatnonzero(labels["split"].to_numpy() == s), store)
            for s in ("train", "val", "test")}


def run_predictor(e2e, tmp_path: Path, name: str, *overrides: str) -> dict:
    """One predictor through `lenbench` on the session's tiny toy world; its result dict."""
    proc = run_lenbench(*E2E_UPSTREAM, f"predictor={name}", *overrides,
                        *e2e.paths(tmp_path / "results", tmp_path / "leaderboard"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    [path] = list((tmp_path / "results").rglob(f"{name}/*.json"))
    result = json.loads(path.read_text())
    assert result["status"] == "ok", result["error"]
    assert np.isfinite(result["metrics"]["static"]["mae"])
    assert result["timings"]["predict_ms_per_request"] > 0
    return result


# ---------------------------------------------------------------------------------------------
# prompt texts whose length is set by one task word (tests/test_tfidf_ridge.py)

# Length is set by one "task" word hidden among filler words; the rest is noise.
TASKS = {"haiku": 12, "define": 30, "explain": 120, "compare": 260, "essay": 700}
FILLER = ["please", "the", "a", "of", "my", "about", "quick", "brief", "new", "topic", "for",
          "this", "that", "kind"]


def synthetic(n: int, seed: int) -> SplitView:
    rng = np.random.default_rng(seed)
    tasks = rng.choice(list(TASKS), size=n)
    texts, lengths = [], []
    for task in tasks:
        words = [task, *rng.choice(FILLER, size=rng.integers(2, 10))]
        rng.shuffle(words)
        texts.append(" ".join(words))
        lengths.append(int(TASKS[task] * rng.lognormal(0.0, 0.2)) + 1)
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(n)], "text": texts,
                           "L": lengths, "family": "", "prompt_token_ids": [[0]] * n})
    return SplitView("train", labels, np.arange(n))


# ---------------------------------------------------------------------------------------------
# a random tiny target and an OUTLETS draft for it (tests/test_outlets.py)

# the tiny target's vocabulary and hidden size
V, H = 64, 32


def tiny_world(n: int = 24, seed: int = 0):
    """A random tiny target and sequences with prompts and responses of varied length."""
    target = tiny_llama(n_layers=8, hidden=H, vocab=V, seed=seed)
    with torch.no_grad():  # peaked next-token distributions, like a trained model's
        target.lm_head.weight *= 30
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(n):
        p, r = int(rng.integers(3, 8)), int(rng.integers(2, 12))
        seqs.append(Sequence(rng.integers(1, V, p + r).astype(np.int64), p, r))
    return target, seqs


def tiny_views(folder: Path, pattern: tuple[str, ...] = ("train", "train", "test"),
               key: str = "tiny-target", n: int = 30) -> dict[str, SplitView]:
    """Split views over tiny_world's sequences (rows take the splits of `pattern` in turn), the
    target handed over as the harness hands it: with its key and a cache folder."""
    from lenbench import TargetModel
    from lenbench.features.extract import extract_features

    target, seqs = tiny_world(n=n)
    labels = pd.DataFrame({
        "prompt_id": [f"p{i}" for i in range(len(seqs))], "sample_idx": 0, "family": "",
        "split": (list(pattern) * len(seqs))[: len(seqs)],
        "text": [f"p{i}" for i in range(len(seqs))],
        "prompt_token_ids": [s.ids[: s.n].tolist() for s in seqs],
        "output_token_ids": [s.ids[s.n:].tolist() for s in seqs], "L": [s.L for s in seqs]})
    (folder / "features").mkdir(parents=True)
    extract_features(labels, target, folder / "features",
                     FeaturesConfig(roles=["mid"], poolings=["last"], step_roles=["mid"]),
                     progress=False)
    handle = TargetModel(target, None, key=key, cache_dir=str(folder / "cache"))
    split = labels["split"].to_numpy()
    return {s: SplitView(s, labels, np.flatnonzero(split == s), FeatureStore(folder / "features"),
                         handle) for s in dict.fromkeys(pattern)}


def draft_for(target, seqs, **choices) -> DraftModel:
    d2t, t2d, _ = build_draft_vocab([s.ids[s.n:] for s in seqs], V, 48)
    cfg = DraftConfig.from_target(target.config, 48, **choices)
    torch.manual_seed(0)
    return DraftModel(cfg, target.get_input_embeddings().weight, d2t, t2d)


# ---------------------------------------------------------------------------------------------
# an in-process World and a distributional predictor (tests/test_evaluate_distributions.py)

WIDTH = 1000.0  # the remaining-length histogram: uniform on [0, WIDTH]
CAP = 300  # make_world's length cap
STRIDE = 7  # steps t = 0, 7, 14, ... < L


class TrainQuantiles(Predictor):
    """Every row gets the train split's quantiles; remaining length: uniform on [0, WIDTH]."""

    def fit(self, train, val=None) -> None:
        self.q = np.quantile(train.lengths, QUANTILE_LEVELS)

    def predict(self, split) -> np.ndarray:
        return np.full(len(split), self.q[2])

    def predict_distribution(self, split) -> LengthDistribution:
        return LengthDistribution.from_quantiles(QUANTILE_LEVELS, np.tile(self.q, (len(split), 1)))

    def predict_remaining_distribution(self, split) -> LengthDistribution:
        return LengthDistribution.from_histogram([0.0, WIDTH], np.ones((len(split.steps), 1)))


def make_world(n_samples: int, censor_every: int = 0) -> World:
    """90 prompts of `n_samples` rows, lengths 10..209; every `censor_every`-th row is cut at the
    cap (CFG's max_new_tokens), as a run records it: L at the cap, flagged censored."""
    rows = []
    for p in range(90):
        for s in range(n_samples):
            i = len(rows)
            cut = bool(censor_every and i % censor_every == 0)
            rows.append({"prompt_id": f"p{p}", "sample_idx": s,
                         "split": ("train", "val", "test")[p % 3], "family": "", "text": "",
                         "prompt_token_ids": [1, 2], "output_token_ids": [],
                         "L": CAP if cut else 10 + (p * 37 + s * 53) % 200,
                         "finish_reason": "length" if cut else "stop", "censored": cut})
    labels = pd.DataFrame(rows, columns=LABEL_COLUMNS)
    test = labels[labels["split"] == "test"]
    steps = StepIndexStore.from_lengths(labels["L"].to_numpy(), STRIDE)
    return World(labels=labels, features=steps, generation_card={},
                 target_path="", dataset={"name": "w", "key": "k", "n_train": 90, "n_val": 90,
                                          "n_test": len(test), "mean_L": 100.0,
                                          "n_test_prompts": int(test["prompt_id"].nunique())},
                 model={"name": "m", "key": "m", "path": ""},
                 fingerprints={"labels": "abc", "features": None})


# the config of a run on make_world's world: the default run's, with these settings
CFG = RunConfig.from_composed({"dataset": {"name": "w"}, "eval": {"n_boot": 50},
                               "sim": {"enabled": False},
                               "generation": {"max_new_tokens": CAP}})
