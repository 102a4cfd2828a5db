"""PIA: parsing real-looking answers, and prompting the live toy model end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import E2E_UPSTREAM, run_lenbench

from baselines.pia import PIA, parse_length
from lenbench.inputs import SplitView
from lenbench.predictor import TargetModel


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


def _split(name: str, prompts: list[str], lengths: list[int], target) -> SplitView:
    labels = pd.DataFrame({"prompt_id": [f"p{i}" for i in range(len(prompts))],
                           "text": prompts, "L": lengths, "family": "",
                           "prompt_token_ids": [[0]] * len(prompts)})
    return SplitView(name, labels, np.arange(len(prompts)), target=target)


def test_fit_and_predict_on_the_toy_model(toy_tiny: TargetModel) -> None:
    prompts = ["List 5 animals.", "Write a haiku about rain.", "Explain gravity in detail.",
               "Name 3 colors."]
    model = PIA(max_new_tokens=6, batch_size=3)  # 3 -> two batches, the second padded less
    model.seed = 0
    model.fit(_split("train", prompts, [20, 15, 60, 8], toy_tiny))
    test = _split("test", prompts[::-1], [8, 60, 15, 20], toy_tiny).hide_labels()
    raw = model.predict(test)
    assert raw.shape == (4,) and (raw >= 0).all()
    assert model.n_asked == 4 and 0 <= model.n_unparseable <= 4 and len(model.answers) == 4
    cal = model.predict_variants(test)["calibrated"]
    assert cal.shape == (4,) and np.isfinite(cal).all()
    # rows without a number fall back to the train median
    missing = np.array([parse_length(a) is None for a in model.answers])
    assert (cal[missing] == 15 + (20 - 15) / 2).all()
    # greedy and batch-independent: one prompt at a time gives the same answers
    single = PIA(max_new_tokens=6, batch_size=1)
    single.scale, single.fallback = model.scale, model.fallback
    assert single.predict(test).tolist() == raw.tolist()
    assert single.answers == model.answers


def test_runs_through_the_harness(e2e, tmp_path) -> None:
    proc = run_lenbench(*E2E_UPSTREAM, "predictor=pia",
                        *e2e.paths(tmp_path / "results", tmp_path / "leaderboard"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    [path] = list((tmp_path / "results").rglob("pia/*.json"))
    result = json.loads(path.read_text())
    assert result["status"] == "ok"
    assert "calibrated" in result["metrics"]["variants"]
    assert result["predictor"]["params"]["unit"] == "words"
    assert result["timings"]["predict_ms_per_request"] > 0
