"""The generation protocol: what a backend is given, what it returns, and the one method it has.

Every backend (hf, vllm, openai, llamacpp) receives the prompt ids lenbench rendered
(`GenRequest`, each with the seed of its own random stream) and the sampling settings shared by
all of them (`SamplingConfig`), and returns one `GenResult` per request, in order, with the
decoder utilisation it measured (`GenStats`, empty where a server keeps it to itself). Each backend
subclasses `Generator`, so `generate` is declared once, here, and the stage runner, the dispatch
(`backends.py`) and the tests are typed against it rather than against one backend. A backend
may also have `describe()` (provenance for the generation card) and `close()` (stop what it
started); the runner calls them where they exist.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable

# called as soon as a request is finished, with its index and its result (a backend that only
# knows the result later may pass the index alone)
OnDone = Callable[..., None]


@dataclass(frozen=True)
class SamplingConfig:
    """Sampling parameters shared by every backend (recorded with the labels)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    # > 1 lowers the logits of every token already in the prompt or the answer (divides a
    # positive logit, multiplies a negative one), before temperature and top-p, as Hugging Face
    # and vLLM define it; 1.0 is off
    repetition_penalty: float = 1.0

    def record(self) -> dict:
        """The settings as cards record them: the penalty only when it acts."""
        record = asdict(self)
        if penalty_in_effect(self.repetition_penalty) is None:
            del record["repetition_penalty"]
        return record


def penalty_in_effect(value: float | None) -> float | None:
    """A repetition penalty as it acts, or None where it does not (unset and 1.0 are both off).

    Keys, cards and folder names hold the penalty only when it acts, so that everything made
    before the option existed keeps its name and reads as before."""
    return None if value is None or float(value) == 1.0 else float(value)


@dataclass(frozen=True)
class GenRequest:
    """One sample to generate: prompt token ids and the seed of its private random stream."""

    prompt_ids: tuple[int, ...]
    seed: tuple[int, ...]


@dataclass
class GenResult:
    output_ids: list[int]
    finish_reason: str  # "stop" (EOS emitted, counted in L) or "length" (right-censored)


@dataclass
class GenStats:
    """Decoder utilisation: how many decoded row-slots carried a real response token."""

    decode_steps: int = 0
    decoded_slots: int = 0
    real_tokens: int = 0
    kv_columns: int = 0  # sum over steps of rows x cache columns held (hf: attention reads
    #                      only the real ones, row by row)
    kv_real: int = 0  # of which unmasked (real tokens)

    @property
    def real_token_fraction(self) -> float:
        return self.real_tokens / self.decoded_slots if self.decoded_slots else 1.0

    @property
    def kv_fill(self) -> float:
        return self.kv_real / self.kv_columns if self.kv_columns else 1.0

    def add(self, other: GenStats) -> None:
        for name in ("decode_steps", "decoded_slots", "real_tokens", "kv_columns", "kv_real"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


Generated = tuple[list[GenResult], GenStats]


@runtime_checkable
class Generator(Protocol):
    """A generation backend: every request sampled with its own seed, results in request order."""

    def generate(self, requests: Sequence[GenRequest], cfg: SamplingConfig,
                 on_done: OnDone | None = None) -> Generated:
        """Generate every request; `on_done(i, result)` is called as request i finishes."""
        ...
