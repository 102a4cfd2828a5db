"""What a predictor declares it reads (`Needs`) and the live target it may be handed.

Kept apart from `Predictor` because the views are built from these too: the views read `Needs`
and `TargetModel`, and `Predictor` is typed against the views, so each sits below what uses it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lenbench.contract.features import POOLINGS, ROLES, STEP_POOLINGS, check_names


@dataclass(frozen=True)
class Needs:
    """What a predictor reads; the harness computes exactly this and nothing more.

    text: prompt strings (the static view's `prompts`, which raises `FeatureNotDeclared` for a
    predictor that does not declare it; token ids need no declaration). hidden: target-model
    layer roles (low/mid/high/last = hs[2], hs[L//2], hs[L-3], hs[L]) pooled over the prompt by
    each name in `pooling`. steps: per-step states of
    the `hidden` roles along the response (dynamic prediction), pooled by each name in
    `step_pooling` ("last": the state at the step; "entropy": the entropy-weighted pool over the
    prompt and the tokens generated so far). entropy: the per-token next-token entropies
    (`entropy(i)`, and the prompt's in the static view); they come with any hidden state, so
    declare them only to read them without one. target_model: a handle to the
    loaded target model and tokenizer (for predictors that run or train on the live model).
    A run whose predictors declare steps but neither hidden states nor entropies gets the steps
    alone, without the teacher-forced pass (lenbench/contract/step_index.py).
    """

    text: bool = False
    hidden: tuple[str, ...] = ()
    pooling: tuple[str, ...] = ("last",)
    steps: bool = False
    step_pooling: tuple[str, ...] = ("last",)
    target_model: bool = False
    entropy: bool = False

    def __post_init__(self) -> None:
        check_names("Needs.hidden", self.hidden, ROLES)
        check_names("Needs.pooling", self.pooling, POOLINGS)
        check_names("Needs.step_pooling", self.step_pooling, STEP_POOLINGS)

    @property
    def features(self) -> bool:
        """True when the run needs a feature store: target states, or only the steps to score
        (then no target runs: `forward`)."""
        return bool(self.hidden) or self.steps or self.entropy

    @property
    def forward(self) -> bool:
        """True when the features stage must run the target: target states are read, not
        only the steps to score."""
        return bool(self.hidden) or self.entropy


@dataclass
class TargetModel:
    """The live target model handed to predictors that declare `Needs(target_model=True)`.

    `key` names the target's weights (the harness's model key; the dtype and device are the
    model's own) and `cache_dir` is the harness's cache folder, where a predictor may keep what
    it derives from this target under `cache_dir/<its stage name>/`, keyed by `key` and its own
    inputs. Either is None when unknown: keep nothing then.
    """

    model: Any
    tokenizer: Any
    device: str = "cpu"
    info: dict = field(default_factory=dict)
    key: str | None = None
    cache_dir: str | None = None


def reads_of(needs: Needs) -> dict[str, bool]:
    """What a predictor reads besides the prompt's tokens, as its result records it: the prompt
    text, the target's hidden states or entropies, the target model itself (a reader choosing
    a predictor for an engine it cannot open needs to know)."""
    return {"text": bool(needs.text), "target_states": bool(needs.hidden or needs.entropy),
            "target_model": bool(needs.target_model)}
