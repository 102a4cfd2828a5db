"""PIA: parsing real-looking answers, and prompting the live toy model end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers.cli import E2E_UPSTREAM, run_lenbench
from helpers.leaderboard import board_text

from baselines.pia import PIA, parse_length
from lenbench.contract.needs import TargetModel
from lenbench.contract.views import SplitView


@pytest.mark.parametrize(("answer", "expected"), [
    ("About 150 words.", 150),
    ("100-150", 125),
    ("100-150 words, maybe 200", 125),  # several numbers: the mean of the first two
    ("I cannot estimate the length.", None),
    ("3. The first step is to", 3),
    ("Estimated: 42\nHere is a list of 7 animals: 1. cat", 42),  # the first line only
    ("\n  Approximately 250 words\n\n1. Intro", 250),  # leading blank lines are skipped
    ("Sure! Here is my answer:\n500 words", None),  # the number is not on the first line
    ("", None),
    ("~1,200 words", 100.5),  # SeqSch's \d+ reads "1,200" as 1 and 200
])
def test_parse_like_sequence_scheduling(answer: str, expected: float | None) -> None:
    assert parse_length(answer) == expected


def test_suffix_follows_the_unit() -> None:
    assert "number of words in your response" in PIA().suffix
    assert "number of tokens in your response" in PIA(unit="tokens").suffix
    assert PIA().suffix.startswith("\n\nBefore responding")
    with pytest.raises(ValueError):
        PIA(unit="characters")


def _split(name: str, prompts: list[str], lengths: list[int], target,
           responses: list[list[int]] | None = None) -> SplitView:
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(len(prompts))],
                           "text": prompts, "L": lengths, "family": "",
                           "prompt_token_ids": [[0]] * len(prompts),
                           "output_token_ids": responses or [[0]] * len(prompts)})
    return SplitView(name, labels, np.arange(len(prompts)), target=target)


def test_tokens_per_word_is_train_tokens_over_decoded_words(toy_tiny: TargetModel) -> None:
    from baselines.pia import tokens_per_word

    tok = toy_tiny.tokenizer
    texts = ["one two three", "four five", ""]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    # words 3 + 2 + 0 = 5; tokens are the labels L (EOS included), 4 + 3 + 1 = 8
    assert tokens_per_word(tok, ids, np.array([4, 3, 1])) == pytest.approx(8 / 5)
    assert tokens_per_word(tok, [ids[2]], np.array([1])) is None


def test_report_examples_show_both_kinds() -> None:
    model = PIA()
    model.answers = ["no", "About 150 words.", "nope", "100-150", "3. x", "7", "maybe"]
    assert model.examples() == ["'About 150 words.' -> 150", "'100-150' -> 125", "'3. x' -> 3",
                                "'no' -> none", "'nope' -> none"]
    model.answers = ["12", "12", "none here"]  # samples of one prompt: one example
    assert model.examples() == ["'12' -> 12", "'none here' -> none"]
    model.answers = ["1", "2", "3", "4", "5", "6"]
    assert model.examples() == ["'1' -> 1", "'2' -> 2", "'3' -> 3", "'4' -> 4", "'5' -> 5"]


def test_fit_and_predict_on_the_toy_model(toy_tiny: TargetModel) -> None:
    prompts = ["List 5 animals.", "Write a haiku about rain.", "Explain gravity in detail.",
               "Name 3 colors."]
    tok = toy_tiny.tokenizer
    responses = [tok(t, add_special_tokens=False)["input_ids"] for t in
                 ["cat dog cow pig hen", "rain falls soft", "gravity pulls mass together", "red"]]
    lengths = [20, 15, 60, 8]
    model = PIA(max_new_tokens=6, batch_size=3)  # 3 -> two batches, the second padded less
    model.seed = 0
    model.fit(_split("train", prompts, lengths, toy_tiny, responses))
    assert model.tokens_per_word == pytest.approx(sum(lengths) / 13)  # 5 + 3 + 4 + 1 words
    test = _split("test", prompts[::-1], [8, 60, 15, 20], toy_tiny).hide_labels()
    raw = model.predict(test)
    assert raw.shape == (4,) and (raw >= 0).all()
    assert model.n_asked == 4 and 0 <= model.n_unparseable <= 4 and len(model.answers) == 4
    cal = model.predict_variants(test)["calibrated"]
    assert cal.shape == (4,) and np.isfinite(cal).all()
    parsed = np.array([np.nan if parse_length(a) is None else parse_length(a)
                       for a in model.answers])
    missing = np.isnan(parsed)
    # rows without a number: raw 0, calibrated the train median; the others raw x tokens/word
    assert (raw[missing] == 0).all()
    assert (cal[missing] == 15 + (20 - 15) / 2).all()
    assert cal[~missing] == pytest.approx(parsed[~missing] * model.tokens_per_word)
    report = model.report()
    assert report["n_asked"] == 4 and report["n_unparseable"] == int(missing.sum())
    assert report["tokens_per_word"] == model.tokens_per_word
    assert len(report["examples"]) == len(set(model.answers)) and " -> " in report["examples"][0]
    assert report["row_labels"] == {
        "predict": "raw, words",
        "calibrated": f"calibrated, tokens/word = {model.tokens_per_word:.3g}"}
    json.dumps(report)
    # greedy and batch-independent: one prompt at a time gives the same answers
    single = PIA(max_new_tokens=6, batch_size=1)
    single.tokens_per_word, single.fallback = model.tokens_per_word, model.fallback
    assert single.predict(test).tolist() == raw.tolist()
    assert single.answers == model.answers


def test_rows_that_share_a_prompt_ask_it_once(toy_tiny: TargetModel, monkeypatch) -> None:
    """Siblings (several samples of one prompt) share its greedy answer: asked once each."""
    asked = []
    generate = toy_tiny.model.generate

    def counting(*args, **kwargs):
        asked.append(int(kwargs["input_ids"].shape[0]))
        return generate(*args, **kwargs)

    monkeypatch.setattr(toy_tiny.model, "generate", counting)
    prompts = ["Name 3 colors.", "Explain gravity in detail, please.", "Name 3 colors.",
               "List 5 animals.", "Name 3 colors.", "List 5 animals."]
    model = PIA(max_new_tokens=5, batch_size=2)
    model.fit(_split("train", prompts[:1], [8], toy_tiny))
    raw = model.predict(_split("test", prompts, [8] * 6, toy_tiny).hide_labels())
    assert sum(asked) == 3 and asked == [2, 1]  # 3 distinct prompts in batches of 2
    assert len(model.answers) == 6 and model.n_asked == 6
    by_prompt = {}
    for prompt, answer in zip(prompts, model.answers):
        assert by_prompt.setdefault(prompt, answer) == answer
    assert raw[0] == raw[2] == raw[4] and raw[3] == raw[5]
    # the same answers as asking each row on its own
    monkeypatch.undo()
    single = PIA(max_new_tokens=5, batch_size=1)
    single.fit(_split("train", prompts[:1], [8], toy_tiny))
    single.predict(_split("test", prompts, [8] * 6, toy_tiny).hide_labels())
    assert single.answers == model.answers


def test_token_unit_has_no_calibrated_row(toy_tiny: TargetModel) -> None:
    model = PIA(unit="tokens", max_new_tokens=4)
    model.fit(_split("train", ["Name 3 colors."], [8], toy_tiny))
    test = _split("test", ["Name 3 colors."], [8], toy_tiny).hide_labels()
    assert model.predict_variants(test) == {}
    assert model.report()["row_labels"] == {"predict": "raw, tokens"}


def test_runs_through_the_harness(e2e, tmp_path) -> None:
    proc = run_lenbench(*E2E_UPSTREAM, "predictor=pia",
                        *e2e.paths(tmp_path / "results", tmp_path / "leaderboard"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    [path] = list((tmp_path / "results").rglob("pia/*.json"))
    result = json.loads(path.read_text())
    assert result["status"] == "ok"
    assert "calibrated" in result["metrics"]["variants"]
    assert result["predictor"]["params"]["unit"] == "words"
    report = result["report"]
    assert report["n_asked"] == result["dataset"]["n_test"]
    assert 0 <= report["n_unparseable"] <= report["n_asked"] and report["tokens_per_word"] > 0
    board = board_text(tmp_path / "leaderboard" / "README.md")
    assert "| pia (raw, words) |" in board
    assert "pia (calibrated, tokens/word = " in board
    assert "### Predictor details" in board and "n_unparseable" in board
    assert result["timings"]["predict_ms_per_request"] > 0
