"""toyworld families must have the length structure that the benchmark measures predictors on."""

from __future__ import annotations

import itertools
import re
from collections import defaultdict

import numpy as np
import pytest
from scipy.stats import skew, spearmanr

from lenbench.data.toyworld import (
    EXPLAIN_MAX_SENTENCES,
    EXPLAIN_TOPICS,
    FAMILIES,
    LIST_MAX_N,
    LIST_MIN_N,
    REPORT_MAX_PARTS,
    REPORT_MIN_PARTS,
    ToyExample,
    make_corpus,
)


@pytest.fixture(scope="module")
def corpus() -> list[ToyExample]:
    return make_corpus(6000, seed=0)


def _family(corpus: list[ToyExample], name: str) -> list[ToyExample]:
    return [ex for ex in corpus if ex.family == name]


def _sentences(text: str) -> int:
    return len(re.findall(r"[.!?](?:\s|$)", text))


def test_same_seed_same_corpus_other_seed_differs() -> None:
    a, b, c = make_corpus(300, seed=5), make_corpus(300, seed=5), make_corpus(300, seed=6)
    assert a == b
    assert [ex.response for ex in a] != [ex.response for ex in c]
    # A longer corpus is not a prefix-compatible guarantee we rely on, but the size is exact.
    assert len(make_corpus(0, seed=1)) == 0 and len(make_corpus(17, seed=1)) == 17


def test_every_family_is_present_in_sensible_shares(corpus: list[ToyExample]) -> None:
    counts = {f: len(_family(corpus, f)) for f in FAMILIES}
    assert set(counts) == {"list", "explain", "short", "report"}
    assert all(n > 0.08 * len(corpus) for n in counts.values()), counts
    # Many distinct prompts, so hashed splits have enough unique prompts to split.
    assert len({ex.prompt for ex in corpus}) > 0.4 * len(corpus)


def test_list_has_exactly_n_numbered_items(corpus: list[ToyExample]) -> None:
    by_n = defaultdict(list)
    for ex in _family(corpus, "list"):
        n = ex.meta["n"]
        assert LIST_MIN_N <= n <= LIST_MAX_N
        assert re.search(rf"\b{n}\b", ex.prompt), ex.prompt
        lines = ex.response.split("\n")
        assert [line.split(". ")[0] for line in lines] == [str(i) for i in range(1, n + 1)]
        by_n[n].append(len(ex.response.split()))
    means = [np.mean(by_n[n]) for n in sorted(by_n)]
    assert sorted(by_n) == list(range(LIST_MIN_N, LIST_MAX_N + 1))
    assert all(b > a for a, b in itertools.pairwise(means)), means


def test_explain_is_heavy_tailed_and_topic_dependent(corpus: list[ToyExample]) -> None:
    explain = _family(corpus, "explain")
    words = np.array([len(ex.response.split()) for ex in explain])
    sentences = np.array([_sentences(ex.response) for ex in explain])
    assert (sentences == [ex.meta["n_sentences"] for ex in explain]).all()
    assert sentences.min() >= 1 and sentences.max() <= EXPLAIN_MAX_SENTENCES
    assert skew(words) > 1.0
    assert np.percentile(words, 99) / np.median(words) > 4.0
    # Topic and style shift the scale...
    by_topic = defaultdict(list)
    by_style = defaultdict(list)
    for ex, n in zip(explain, sentences, strict=True):
        by_topic[ex.meta["topic"]].append(n)
        by_style[ex.meta["style"]].append(n)
    topic_mean = {t: np.mean(v) for t, v in by_topic.items()}
    lo = min(EXPLAIN_TOPICS, key=EXPLAIN_TOPICS.get)
    hi = max(EXPLAIN_TOPICS, key=EXPLAIN_TOPICS.get)
    assert topic_mean[hi] > 2.5 * topic_mean[lo], topic_mean
    assert np.mean(by_style["brief"]) < np.mean(by_style["plain"]) < np.mean(by_style["detail"])
    medians = [ex.meta["median_sentences"] for ex in explain]
    rho = spearmanr(medians, sentences)[0]
    # ...but only partly: a large share of the spread is irreducible noise.
    assert 0.3 < rho < 0.85, rho


def test_report_announces_exactly_the_parts_it_writes(corpus: list[ToyExample]) -> None:
    seen = set()
    for ex in _family(corpus, "report"):
        k = ex.meta["n_parts"]
        first, *parts = ex.response.split("\n")
        assert first == f"This report has {k} parts."
        assert [p.split(":")[0] for p in parts] == [f"Part {i} of {k}" for i in range(1, k + 1)]
        assert all(_sentences(p) == 1 for p in parts)
        assert not re.search(r"\d", ex.prompt), "the prompt must not reveal the part count"
        seen.add(k)
    assert seen == set(range(REPORT_MIN_PARTS, REPORT_MAX_PARTS + 1))


def test_short_answers_are_one_short_sentence(corpus: list[ToyExample]) -> None:
    short = _family(corpus, "short")
    assert all(_sentences(ex.response) == 1 for ex in short)
    assert max(len(ex.response.split()) for ex in short) <= 8
    words = {f: np.mean([len(ex.response.split()) for ex in _family(corpus, f)]) for f in FAMILIES}
    assert words["short"] < min(words["list"], words["explain"], words["report"]) / 2


def test_responses_fit_the_generation_budget(corpus: list[ToyExample]) -> None:
    # Words are a lower bound on tokens; ~2x words must stay under max_new_tokens=256.
    longest = max(len(ex.response.split()) + ex.response.count(".") for ex in corpus)
    assert longest < 200
