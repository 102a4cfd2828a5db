"""Label import: a jsonl with known lengths becomes a LengthSet without generation, and text-only
predictors (tfidf_ridge, constant, prompt_length) are fitted and scored on it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers.leaderboard import board_text

from baselines.constant import ConstantPredictor
from baselines.prompt_length import PromptLengthPredictor
from baselines.tfidf_ridge import TfidfRidgePredictor
from lenbench.configs import RunConfig
from lenbench.contract.labels import LABEL_COLUMNS
from lenbench.contract.views import SplitView
from lenbench.data.promptset import build_promptset, load_source
from lenbench.generation.labels_import import import_labels, known_lengths, word_pieces


class WordTokenizer:
    """Stands in for a target tokenizer: one id per word, no chat template."""

    chat_template = None

    def __call__(self, text: str) -> dict:
        return {"input_ids": [1] + [3 + len(w) for w in text.split()]}


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def promptset(path: Path, fractions: dict | None = None) -> pd.DataFrame:
    df, _ = build_promptset(load_source("jsonl", path=str(path)),
                            fractions or {"train": 1.0, "val": 0.0, "test": 0.0})
    return df


def test_import_labels_rows_and_card(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "trace.jsonl", [
        {"prompt": "Write a haiku about autumn", "length": 17},
        {"prompt": "Explain TCP handshakes", "output_tokens": 240},
        {"prompt": "Count to three", "length": [4, 6, 5], "family": "counting"},
    ])
    prompts = promptset(f)
    labels, card = import_labels(prompts, tokenizer=WordTokenizer())
    assert list(labels.columns) == LABEL_COLUMNS
    assert labels["text"].tolist() == ["Write a haiku about autumn", "Explain TCP handshakes",
                                       "Count to three", "Count to three", "Count to three"]
    assert labels["L"].tolist() == [17, 240, 4, 6, 5]
    assert labels["sample_idx"].tolist() == [0, 0, 0, 1, 2]
    assert set(labels["finish_reason"]) == {"stop"} and not labels["censored"].any()
    assert labels["prompt_token_ids"][0] == [1, 8, 4, 8, 8, 9]
    assert all(len(x) == 0 for x in labels["output_token_ids"])
    assert labels["family"].tolist()[2:] == ["counting"] * 3
    assert labels["prompt_id"].tolist()[:2] == prompts["prompt_id"].tolist()[:2]
    assert card["label_source"] == "imported" and card["n_rows"] == 5
    assert card["n_prompts"] == 3 and card["n_samples"] == 3 and card["n_samples_min"] == 1
    assert card["n_censored"] == 0 and card["mean_L"] == pytest.approx(272 / 5)
    assert card["tokenizer"] == "WordTokenizer"
    # survives the stage's parquet round trip, and SplitView reads it
    labels.to_parquet(tmp_path / "labels.parquet", index=False)
    back = pd.read_parquet(tmp_path / "labels.parquet")
    view = SplitView("train", back, np.arange(len(back)))
    assert view.prompt_lengths.tolist() == [6, 4, 4, 4, 4]
    assert view.lengths.tolist() == [17, 240, 4, 6, 5]


def test_import_without_tokenizer_and_with_explicit_lengths(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "alpha beta"}, {"prompt": "gamma delta"}])
    prompts = promptset(f)
    assert known_lengths(prompts) is None  # nothing to import: the pipeline generates
    pid = prompts["prompt_id"].tolist()
    labels, card = import_labels(prompts, {pid[0]: 3, pid[1]: [8, 9]})
    assert labels["L"].tolist() == [3, 8, 9]
    # no tokenizer named: one piece per word or punctuation mark, so "alpha beta" counts 2
    assert [len(x) for x in labels["prompt_token_ids"]] == [2, 2, 2]
    assert card["prompt_token_ids"].startswith("no tokenizer named") and card["tokenizer"] is None
    with pytest.raises(ValueError, match="1 of 2 prompts have no known length"):
        import_labels(prompts, {pid[0]: 3})
    with pytest.raises(ValueError, match="positive integers"):
        import_labels(prompts, {pid[0]: 3, pid[1]: -2})


def test_partly_known_lengths_list_the_unlabelled_prompts(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "alpha beta", "length": 4},
                                           {"prompt": "gamma delta"}])
    prompts = promptset(f)
    known = known_lengths(prompts)
    by_text = dict(zip(prompts["text"], prompts["prompt_id"]))
    assert known.lengths == {by_text["alpha beta"]: [4]}
    assert known.unlabelled == [by_text["gamma delta"]] and known.largest == 4


def test_word_pieces_count_words_and_punctuation() -> None:
    assert len(word_pieces("Hello, world! How's it going?")) == 10  # How ' s: 3
    assert word_pieces("same text") == word_pieces("same text") and word_pieces("") == []


def test_censoring_flags_are_imported_per_sample(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "c.jsonl", [
        {"prompt": "one", "length": 512, "finish_reason": "length"},
        {"prompt": "two", "length": 40, "finish_reason": "stop"},
        {"prompt": "three", "length": [7, 512], "censored": [False, True]},
        {"prompt": "four", "length": [3, 5], "censored": True},
        {"prompt": "five", "length": 9},
    ])
    labels, card = import_labels(promptset(f))
    got = {(t, s): (L, c) for t, s, L, c in
           labels[["text", "sample_idx", "L", "censored"]].itertuples(index=False)}
    assert got == {("one", 0): (512, True), ("two", 0): (40, False), ("three", 0): (7, False),
                   ("three", 1): (512, True), ("four", 0): (3, True), ("four", 1): (5, True),
                   ("five", 0): (9, False)}
    assert set(labels.loc[labels["censored"], "finish_reason"]) == {"length"}
    assert card["n_censored"] == 4


@pytest.mark.parametrize(("row", "reason"), [
    ({"prompt": "x", "length": [1, 2], "censored": [True]}, "is a list of 1 but the row has 2"),
    ({"prompt": "x", "length": 3, "censored": "yes"}, "'censored' must be true or false"),
    ({"prompt": "x", "length": 3, "finish_reason": 1}, "'finish_reason' must be text"),
])
def test_bad_censoring_flags_are_counted_bad_rows(tmp_path: Path, row: dict, reason: str) -> None:
    f = write_jsonl(tmp_path / "b.jsonl", [row, {"prompt": "fine", "length": 2}])
    df, card = build_promptset(load_source("jsonl", path=str(f)),
                               {"train": 1.0, "val": 0.0, "test": 0.0})
    assert df["text"].tolist() == ["fine"]
    assert card["dropped"] == {"wrong_type": 1}
    assert reason in json.dumps(card["examples"])


TOPICS = {"haiku": 15, "tweet": 40, "summary": 90, "report": 250, "essay": 600}
FILLER = ["please", "about", "the", "a", "my", "our", "new", "old", "quick", "short", "long",
          "simple", "detailed", "topic"]


def test_text_only_predictors_score_imported_labels(tmp_path: Path) -> None:
    """The done-when of label import, minus the pipeline wiring: import, fit, score."""
    rng = np.random.default_rng(0)
    rows, seen = [], set()
    while len(rows) < 300:  # distinct prompts, so none is dropped as a duplicate
        topic = list(TOPICS)[len(rows) % len(TOPICS)]
        words = [topic, *rng.choice(FILLER, size=rng.integers(4, 12))]
        rng.shuffle(words)
        text = "write a " + " ".join(words)
        if text in seen:
            continue
        seen.add(text)
        length = int(TOPICS[topic] * rng.lognormal(0.0, 0.15)) + 1
        rows.append({"prompt": text, "length": length})
    f = write_jsonl(tmp_path / "trace.jsonl", rows)
    prompts = promptset(f, {"train": 0.7, "val": 0.1, "test": 0.2})
    assert len(prompts) == 300
    labels, _ = import_labels(prompts, tokenizer=WordTokenizer())
    split = labels["split"].to_numpy()
    train = SplitView("train", labels, np.flatnonzero(split == "train"))
    test = SplitView("test", labels, np.flatnonzero(split == "test"))
    truth = test.lengths.astype(float)
    mae = {}
    predictors = [("tfidf_ridge", TfidfRidgePredictor(max_length=1000)),
                  ("constant", ConstantPredictor()), ("prompt_length", PromptLengthPredictor())]
    for name, pred in predictors:
        pred.fit(train)
        out = pred.predict(test.hide_labels())
        assert out.shape == truth.shape and np.isfinite(out).all()
        mae[name] = float(np.abs(out - truth).mean())
    # ~92 vs ~166 here (210 train prompts; bigrams dilute the task word on so little data)
    assert mae["tfidf_ridge"] < 0.6 * mae["constant"]
    assert mae["tfidf_ridge"] < 0.6 * mae["prompt_length"]


def test_imported_labels_reach_the_leaderboard(tmp_path: Path) -> None:
    """Imported labels through the harness's own evaluate/save/leaderboard (the pipeline's part,
    choosing import over generation, is `known_lengths` + `import_labels`)."""
    from lenbench.contract.instantiate import instantiate_predictor
    from lenbench.evaluate import evaluate_predictor, save
    from lenbench.leaderboard import build_leaderboard
    from lenbench.pipeline import World

    rng = np.random.default_rng(1)
    rows = []
    for i in range(120):  # two samples per prompt: the trace's own one-to-many spread
        topic, base = list(TOPICS.items())[i % len(TOPICS)]
        lengths = [int(base * f) + 1 for f in rng.lognormal(0.0, 0.2, size=2)]
        rows.append({"prompt": f"write a {topic} about {rng.choice(FILLER)} number {i}",
                     "length": lengths})
    prompts = promptset(write_jsonl(tmp_path / "trace.jsonl", rows),
                        {"train": 0.7, "val": 0.1, "test": 0.2})
    labels, card = import_labels(prompts, tokenizer=WordTokenizer())
    test = labels[labels["split"] == "test"]
    counts = labels["split"].value_counts()
    world = World(labels=labels, features=None, generation_card=card, target_path="",
                  dataset={"name": "trace", "key": "k", "n_train": int(counts["train"]),
                           "n_val": int(counts.get("val", 0)), "n_test": int(counts["test"]),
                           "n_test_prompts": int(test["prompt_id"].nunique()),
                           "mean_L": card["mean_L"]},
                  model={"name": "my-model", "key": "m", "path": ""})
    cfg = RunConfig.from_composed({"dataset": {"name": "trace"}, "eval": {"n_boot": 50},
                                   "sim": {"enabled": False}})
    for name, target in [("tfidf_ridge", "tfidf_ridge.TfidfRidgePredictor"),
                         ("constant", "constant.ConstantPredictor"),
                         ("prompt_length", "prompt_length.PromptLengthPredictor")]:
        pred_cfg = {"name": name, "_target_": f"baselines.{target}"}
        result = evaluate_predictor(instantiate_predictor(pred_cfg), name, pred_cfg, world,
                                    cfg, seed=0)
        assert result["status"] == "ok" and result["generation"]["n_rows"] == len(labels)
        save(result, tmp_path / "results")
    board = board_text(build_leaderboard(tmp_path / "results", tmp_path / "board"))
    assert all(n in board for n in ("tfidf_ridge", "constant", "prompt_length", "trace"))



class TemplateTokenizer:
    """A chat-template tokenizer whose rendering shows the template variables it was given."""

    chat_template = "{{ messages }}"

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **variables):
        return [len(messages[0]["content"].split()), int(variables.get("enable_thinking", 1))]


def test_imported_prompts_are_rendered_with_the_models_template_variables(tmp_path: Path) -> None:
    f = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "one two three", "length": 5}])
    prompts = promptset(f)
    plain, _ = import_labels(prompts, tokenizer=TemplateTokenizer())
    nothink, _ = import_labels(prompts, tokenizer=TemplateTokenizer(),
                               template_kwargs={"enable_thinking": False})
    assert list(plain["prompt_token_ids"][0]) == [3, 1]
    assert list(nothink["prompt_token_ids"][0]) == [3, 0]
