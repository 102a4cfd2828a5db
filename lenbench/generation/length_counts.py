"""Lengths from a server's own count: the EOS-counting probe and usage-only results.

A server that returns no token ids still says how many tokens it generated
(`usage.completion_tokens`, llama.cpp's `tokens_predicted`), but servers disagree on whether that
count includes the EOS token. L counts the EOS (docs/protocol.md), so before any label is made a
short greedy probe compares the server's count with what else the response shows: the returned
ids when there are any, else the local tokenizer's count of the returned text, and then (since
text that is not the tokenizer's canonical split can fit the wrong convention by one token) the
same prompt asked again with the cap at the count c and at c - 1: a server that counts the EOS
stops again at cap c, one that leaves it out hits the cap; at c - 1 both must hit the cap with a
count of c - 1. A probe that stops on EOS decides the convention; counts that fit no convention
are refused, since a label built on them would be wrong by an unknown amount. The text only ever
checks the count, it never is the length.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lenbench.generation.protocol import GenResult

# Short instructions that an instruction-tuned model answers (and ends) in a few tokens.
DEFAULT_PROBE_PROMPTS = ("Reply with the single word: yes.",
                         "What is 2 + 2? Answer with the number only.",
                         "Name one colour.")
DEFAULT_PROBE_MAX_TOKENS = 64


class CountError(RuntimeError):
    """The server's counts cannot be turned into lengths (the message says why and what to do)."""


@dataclass
class CountedResult(GenResult):
    """A result whose length is the server's count: `output_ids` stays empty (not known)."""

    length: int = 0


def result_length(result: GenResult) -> int:
    """L of one result: the server's count for a CountedResult, else its number of ids."""
    return result.length if isinstance(result, CountedResult) else len(result.output_ids)


@dataclass
class Observation:
    """What one probe response showed."""

    prompt: str
    finish_reason: str
    count: int | None                 # the server's own count (None: it gave none)
    text_tokens: int | None           # the local tokenizer's count of the returned text
    ids: int | None = None            # returned ids, EOS put back on a stop (None: no ids)
    counts_eos: bool | None = None    # what this observation says (None: cannot say)
    basis: str | None = None          # what decided it: the ids, the text, the capped re-asks

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Convention:
    """The probe's verdict, recorded in the generation card."""

    counts_eos: bool | None
    decided_by: str
    observations: list[Observation] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"count_includes_eos": self.counts_eos, "decided_by": self.decided_by,
                "observations": [o.as_dict() for o in self.observations]}


def text_token_count(tokenizer, text: str, eos_ids: Sequence[int]) -> int:
    """The local tokenizer's count of a returned text, without a trailing EOS written as text."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    eos = {int(e) for e in eos_ids}
    while ids and ids[-1] in eos:
        ids.pop()
    return len(ids)


def observe(obs: Observation, max_tokens: int) -> Observation:
    """Fill `obs.counts_eos` from one probe response, or raise CountError if it fits no rule.

    A stop: the count is the generated tokens with the EOS (ids, or text tokens + 1) or without
    it (ids - 1, or text tokens). A length finish: the count must be `max_tokens` (no EOS there).
    """
    if obs.count is None:
        return obs
    if obs.finish_reason == "length":
        if obs.count != max_tokens:
            raise CountError(f"the server counted {obs.count} tokens for a 'length' finish at "
                             f"max_tokens={max_tokens}; its counts cannot be reconciled with "
                             "lengths (use a server that returns token ids)")
        return obs
    with_eos = obs.ids if obs.ids is not None else (
        obs.text_tokens + 1 if obs.text_tokens is not None else None)
    if with_eos is None:
        return obs
    obs.basis = "ids" if obs.ids is not None else "text"
    if obs.count == with_eos:
        obs.counts_eos = True
    elif obs.count == with_eos - 1:
        obs.counts_eos = False
    else:
        seen = f"{obs.ids} ids with the EOS" if obs.ids is not None else \
            f"{obs.text_tokens} tokens of its text (+1 for the EOS)"
        raise CountError(f"the server counted {obs.count} tokens for a stop where it returned "
                         f"{seen}; its counts cannot be reconciled with lengths (use a server "
                         "that returns token ids, or one whose usage counts its own tokens)")
    return obs


def cap_verdict(count: int, at_cap: tuple[str | None, object],
                below_cap: tuple[str | None, object]) -> bool:
    """Whether the count includes the EOS, from the same greedy prompt re-asked with the cap at
    the count (`at_cap`) and one below (`below_cap`), each a (finish_reason, count) pair."""
    if below_cap != ("length", count - 1):
        raise CountError(f"the server counted {count} tokens for a stop, but capped at "
                         f"{count - 1} it answered {below_cap}; its counts cannot be reconciled "
                         "with lengths (use a server that returns token ids)")
    if at_cap == ("stop", count):
        return True
    if at_cap == ("length", count):
        return False
    raise CountError(f"the server counted {count} tokens for a stop, but capped at {count} it "
                     f"answered {at_cap}; its counts cannot be reconciled with lengths")


def decide(observations: list[Observation], configured: bool | None) -> Convention:
    """The convention the observations agree on; `configured` (generation.usage_counts_eos)
    stands where no probe stopped, and must agree with any probe that did."""
    said = {o.counts_eos for o in observations if o.counts_eos is not None}
    if len(said) > 1:
        raise CountError("the probe's stops disagree on whether the server counts the EOS "
                         f"({[o.as_dict() for o in observations]}); its counts cannot be "
                         "reconciled with lengths")
    if said:
        found = said.pop()
        if configured is not None and configured != found:
            raise CountError(f"generation.usage_counts_eos={configured} but the probe found "
                             f"the server's count {'includes' if found else 'excludes'} the "
                             "EOS; drop the setting (null) or fix it")
        return Convention(found, "probe", observations)
    if configured is not None:
        return Convention(configured, "generation.usage_counts_eos (no probe stopped)",
                          observations)
    return Convention(None, "undetermined: no probe response ended on EOS", observations)


def usage_result(finish_reason: str | None, count: object, counts_eos: bool,
                 max_tokens: int) -> CountedResult:
    """One response -> CountedResult from the server's count: L = count (+1 for a stop when the
    server leaves the EOS out)."""
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise CountError(f"usage.completion_tokens={count!r} is not a token count")
    if finish_reason == "stop":
        length = count if counts_eos else count + 1
        if length < 1:
            raise CountError("a 'stop' finish with a count of 0 tokens including the EOS")
        if length > max_tokens:
            raise CountError(f"the server counted {length} tokens (EOS included) for "
                             f"max_tokens={max_tokens}")
        return CountedResult([], "stop", length)
    if finish_reason == "length":
        if count != max_tokens:
            raise CountError(f"the server counted {count} tokens for a 'length' finish at "
                             f"max_tokens={max_tokens}")
        return CountedResult([], "length", count)
    raise CountError(f"unexpected finish_reason {finish_reason!r} (expected 'stop' or 'length')")
