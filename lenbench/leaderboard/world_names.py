"""A world's name in words, for its section's heading: the shipped world or data set, the model,
and where one data set and model have several builds, how each was sampled; a labels hash only
where nothing a reader knows tells two builds apart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from lenbench.results import Result
from lenbench.results.checks import is_number

__all__ = ["world_title"]


def _shared(ok: list[Result], value: Callable[[Result], Any]) -> Any:
    """The value every result gives (None where they differ or give none)."""
    values = {repr(value(r)) for r in ok}
    return value(ok[0]) if len(values) == 1 else None


def _sampling_words(ok: list[Result], samples_too: bool = True) -> list[str]:
    """How a build's labels were sampled, in words: greedy or a temperature, the cap, and (with
    `samples_too`) the samples a prompt (only what every result agrees on)."""
    sampling = _shared(ok, lambda r: (r.generation or {}).get("sampling")) or {}
    temperature, cap = sampling.get("temperature"), sampling.get("max_new_tokens")
    samples = _shared(ok, lambda r: (r.generation or {}).get("n_samples"))
    words = []
    if is_number(temperature):
        words.append("greedy" if temperature == 0 else f"temperature {temperature:g}")
    if is_number(cap):
        words.append(f"cap {cap}")
    if samples_too and is_number(samples):
        words.append(f"{samples} sample{'' if samples == 1 else 's'} a prompt")
    return words


def world_title(dataset: str, model: str, ok: list[Result], fingerprint: str | None,
                several_builds: bool, siblings: Sequence[list[Result]] = ()) -> str:
    """A section's name in words: the shipped world its labels came from (`name@2` reads "name
    v2"), else the data set, and the model; where several builds of one data set and model
    each get a section, how each was sampled (greedy or a temperature, and the cap; for a build
    not shipped, also the samples a prompt, where that tells it from its `siblings`, the other
    builds), and the labels' fingerprint only where nothing else tells them apart."""
    shipped = _shared(ok, lambda r: (r.config.get("generation") or {}).get("shipped"))
    name = dataset if not shipped else str(shipped).replace("@", " v")
    title = f"{name} / {model}"
    if not several_builds:
        return title
    if shipped and (words := _sampling_words(ok, samples_too=False)) and \
            words[0].startswith(("greedy", "temperature")):
        return f"{title} ({', '.join(words)})"
    words = _sampling_words(ok)
    if words and all(_sampling_words(other) != words for other in siblings):
        return f"{title} ({', '.join(words)})"
    return title + (f" (labels `{fingerprint[:8]}`)" if fingerprint
                    else " (labels not fingerprinted)")
