"""toyworld: a seeded synthetic instruction corpus for the embedded default world.

Every family ties the response length to the prompt in a different way, so that each kind of
length predictor has something real to measure:

- ``list``    "List 7 animals."            -> exactly N numbered items: length fixed by the prompt.
- ``explain`` "Explain rivers in detail."  -> a lognormal number of sentences whose scale depends on
                                              the topic and the style words; large random spread.
- ``short``   "What color is the sky?"     -> one short sentence.
- ``report``  "Write a report on bees."    -> "This report has K parts." then "Part i of K: ..."
                                              lines; K is random and absent from the prompt, so
                                              only a dynamic predictor that reads the first
                                              tokens can know it.

Polite prefixes and suffixes vary the prompt text (and its length) without changing the response,
so prompt length alone is a weak signal. The vocabulary is small and templated so that a tiny model
learns it in a couple of CPU minutes. Pure Python with :class:`random.Random`, so a seed gives the
same corpus on every platform.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

FAMILIES: tuple[str, ...] = ("list", "explain", "short", "report")

# Share of each family in a corpus, in FAMILIES order.
FAMILY_WEIGHTS: tuple[float, ...] = (0.32, 0.28, 0.08, 0.32)

LIST_MIN_N, LIST_MAX_N = 2, 15
EXPLAIN_MAX_SENTENCES = 20
EXPLAIN_SIGMA = 0.75  # log-scale spread of the sentence count: large, so the tail is heavy
REPORT_MIN_PARTS, REPORT_MAX_PARTS = 2, 9

LIST_CATEGORIES: dict[str, tuple[str, ...]] = {
    "animals": ("cat", "dog", "horse", "cow", "sheep", "goat", "lion", "tiger", "bear", "wolf",
                "fox", "deer", "rabbit", "mouse", "duck", "owl"),
    "colors": ("red", "blue", "green", "yellow", "black", "white", "pink", "brown", "gray",
               "orange", "purple", "gold", "silver", "teal", "navy", "beige"),
    "fruits": ("apple", "pear", "plum", "grape", "lemon", "lime", "mango", "peach", "cherry",
               "melon", "kiwi", "banana", "orange", "fig", "date", "berry"),
    "cities": ("Paris", "London", "Rome", "Berlin", "Madrid", "Tokyo", "Cairo", "Lima", "Oslo",
               "Vienna", "Dublin", "Prague", "Delhi", "Seoul", "Boston", "Sydney"),
    "tools": ("hammer", "saw", "drill", "wrench", "knife", "rope", "ladder", "shovel", "rake",
              "brush", "tape", "glue", "axe", "file", "clamp", "level"),
    "sports": ("soccer", "tennis", "golf", "rugby", "hockey", "boxing", "rowing", "skiing",
               "surfing", "cycling", "running", "swimming", "chess", "darts", "judo", "polo"),
    "jobs": ("teacher", "doctor", "nurse", "farmer", "baker", "pilot", "driver", "cook", "judge",
             "painter", "writer", "singer", "builder", "sailor", "miner", "clerk"),
    "vegetables": ("carrot", "potato", "onion", "pea", "bean", "corn", "leek", "kale", "beet",
                   "radish", "pepper", "garlic", "celery", "squash", "turnip", "spinach"),
}
LIST_TEMPLATES = ("List {n} {cat}.", "Name {n} {cat}.", "Give me {n} {cat}.",
                  "Write a list of {n} {cat}.", "Tell me {n} {cat}.")

# Median number of sentences of a plain "explain" answer, per topic: the topic is a real but
# partial signal of the length.
EXPLAIN_TOPICS: dict[str, float] = {
    "clouds": 1.6, "bees": 2.0, "deserts": 2.4, "trains": 2.8, "bridges": 3.2, "rivers": 3.6,
    "forests": 4.0, "castles": 4.5, "robots": 5.0, "planets": 5.6, "volcanoes": 6.3,
    "oceans": 7.0,
}
# (phrase, template, multiplier of the median sentence count)
EXPLAIN_STYLES: tuple[tuple[str, str, float], ...] = (
    ("plain", "Explain {t}.", 1.0),
    ("plain", "Tell me about {t}.", 1.0),
    ("plain", "What should I know about {t}?", 1.0),
    ("brief", "Briefly explain {t}.", 0.45),
    ("brief", "Explain {t} in a few words.", 0.45),
    ("detail", "Explain {t} in detail.", 2.0),
    ("detail", "Describe {t} in great detail.", 2.0),
)

ADJS = ("big", "small", "old", "young", "wide", "deep", "warm", "cold", "bright", "dark", "loud",
        "quiet", "fast", "slow", "strong", "soft", "rare", "common", "strange", "useful")
PLACES = ("school", "the lab", "the city", "the north", "the south", "books", "class", "museums",
          "the field", "the park")
SEASONS = ("spring", "summer", "autumn", "winter")
PARTS = ("shape", "size", "color", "edge", "center", "surface", "top", "base")
THINGS = ("land", "air", "water", "weather", "soil", "sky", "town", "world", "sea", "valley")
RESOURCES = ("light", "heat", "rain", "time", "space", "care", "power", "food")
SENTENCE_TEMPLATES = (
    "{T} are {a}.",
    "Some {t} are {a} and {b}.",
    "People often study {t} in {p}.",
    "Most {t} change in {s}.",
    "The {q} of many {t} is {a}.",
    "Experts say {t} help the {x}.",
    "You can find {t} near the {x}.",
    "{T} can be {a} when the {x} is {b}.",
    "Long ago, {t} were {a}.",
    "Many {t} need {r} to last.",
)

REPORT_TOPICS = ("bees", "rivers", "trains", "forests", "robots", "castles", "planets", "oceans",
                 "cities", "farms", "schools", "markets", "music", "games", "boats", "roads")
REPORT_TEMPLATES = ("Write a report on {t}.", "Write a report about {t}.",
                    "Prepare a report on {t} for my {w}.", "I need a report about {t}.",
                    "Draft a report on {t}.")
AUDIENCES = ("class", "boss", "team", "teacher", "club", "family")

SHORT_COLORS = {"the sky": "blue", "grass": "green", "snow": "white", "the sun": "yellow",
                "coal": "black", "a banana": "yellow", "a cherry": "red", "a lemon": "yellow",
                "milk": "white", "a frog": "green", "the sea": "blue", "an orange": "orange"}
SHORT_CAPITALS = {"France": "Paris", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
                  "Egypt": "Cairo", "Peru": "Lima", "Norway": "Oslo", "Austria": "Vienna",
                  "Ireland": "Dublin", "Germany": "Berlin", "England": "London",
                  "India": "Delhi"}
SHORT_LEGS = {"spider": 8, "cat": 4, "dog": 4, "bird": 2, "ant": 6, "horse": 4, "duck": 2,
              "bee": 6, "cow": 4, "crab": 10, "owl": 2, "mouse": 4}

PREFIXES = ("", "", "", "Please ", "Hello! ", "Hi. ", "Quick question: ", "I need help. ",
            "Hey, ")
SUFFIXES = ("", "", "", " Thanks.", " Thank you!", " Thanks a lot.")


@dataclass
class ToyExample:
    """One prompt/response pair, with the latent facts that set its length in ``meta``."""

    prompt: str
    response: str
    family: str
    meta: dict = field(default_factory=dict)


def _decorate(rng: random.Random, core: str) -> str:
    """Wrap a prompt in polite filler that changes its length but not the response."""
    prefix = rng.choice(PREFIXES)
    if prefix == "Please ":
        core = core[0].lower() + core[1:]
    return prefix + core + rng.choice(SUFFIXES)


def _sentence(rng: random.Random, topic: str) -> str:
    template = rng.choice(SENTENCE_TEMPLATES)
    a, b = rng.sample(ADJS, 2)
    return template.format(
        t=topic, T=topic.capitalize(), a=a, b=b, p=rng.choice(PLACES), s=rng.choice(SEASONS),
        q=rng.choice(PARTS), x=rng.choice(THINGS), r=rng.choice(RESOURCES),
    )


def _make_list(rng: random.Random) -> ToyExample:
    cat = rng.choice(sorted(LIST_CATEGORIES))
    n = rng.randint(LIST_MIN_N, LIST_MAX_N)
    items = rng.sample(LIST_CATEGORIES[cat], n)
    prompt = _decorate(rng, rng.choice(LIST_TEMPLATES).format(n=n, cat=cat))
    response = "\n".join(f"{i}. {item}" for i, item in enumerate(items, start=1))
    return ToyExample(prompt, response, "list", {"n": n, "category": cat})


def explain_median(topic: str, style: str) -> float:
    """Median sentence count for a topic and style: the predictable part of an explain length."""
    factor = {s: f for s, _, f in EXPLAIN_STYLES}[style]
    return EXPLAIN_TOPICS[topic] * factor


def _make_explain(rng: random.Random) -> ToyExample:
    topic = rng.choice(sorted(EXPLAIN_TOPICS))
    style, template, _ = rng.choice(EXPLAIN_STYLES)
    median = explain_median(topic, style)
    # Lognormal sentence count, redrawn above the cap (a truncated, not clipped, tail).
    while True:
        n = max(1, round(math.exp(math.log(median) + EXPLAIN_SIGMA * rng.gauss(0.0, 1.0))))
        if n <= EXPLAIN_MAX_SENTENCES:
            break
    response = " ".join(_sentence(rng, topic) for _ in range(n))
    prompt = _decorate(rng, template.format(t=topic))
    meta = {"topic": topic, "style": style, "median_sentences": median, "n_sentences": n}
    return ToyExample(prompt, response, "explain", meta)


def _make_short(rng: random.Random) -> ToyExample:
    kind = rng.choice(("color", "capital", "legs", "sum"))
    if kind == "color":
        thing = rng.choice(sorted(SHORT_COLORS))
        prompt = f"What color is {thing}?"
        response = f"{thing[0].upper()}{thing[1:]} is {SHORT_COLORS[thing]}."
    elif kind == "capital":
        country = rng.choice(sorted(SHORT_CAPITALS))
        prompt = f"What is the capital of {country}?"
        response = f"The capital of {country} is {SHORT_CAPITALS[country]}."
    elif kind == "legs":
        animal = rng.choice(sorted(SHORT_LEGS))
        prompt = f"How many legs does a {animal} have?"
        response = f"A {animal} has {SHORT_LEGS[animal]} legs."
    else:
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        prompt, response = f"What is {a} plus {b}?", f"{a} plus {b} is {a + b}."
    return ToyExample(_decorate(rng, prompt), response, "short", {"kind": kind})


def _make_report(rng: random.Random) -> ToyExample:
    topic = rng.choice(REPORT_TOPICS)
    k = rng.randint(REPORT_MIN_PARTS, REPORT_MAX_PARTS)
    # One sentence a part, headed "Part i of K": the stop decision is then a comparison of two
    # adjacent numbers, which a tiny model learns quickly. K is known from the first line on.
    lines = [f"This report has {k} parts."]
    lines += [f"Part {i} of {k}: {_sentence(rng, topic)}" for i in range(1, k + 1)]
    prompt = _decorate(rng, rng.choice(REPORT_TEMPLATES).format(t=topic, w=rng.choice(AUDIENCES)))
    meta = {"topic": topic, "n_parts": k}
    return ToyExample(prompt, "\n".join(lines), "report", meta)


_MAKERS = {"list": _make_list, "explain": _make_explain, "short": _make_short,
           "report": _make_report}


def make_corpus(n: int, seed: int) -> list[ToyExample]:
    """Draw ``n`` examples; the same ``seed`` always gives the same corpus, on any platform."""
    if n < 0:
        raise ValueError(f"make_corpus: n must be >= 0, got {n}")
    rng = random.Random(seed)
    families = rng.choices(FAMILIES, weights=FAMILY_WEIGHTS, k=n)
    return [_MAKERS[family](rng) for family in families]
