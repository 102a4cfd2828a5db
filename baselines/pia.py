"""PIA: ask the target model itself how long its answer will be (Perception in Advance).

The OUTLETS template (OUTLETS, arXiv 2609.01068, Fig. 5) is appended to the user prompt
before the chat template. The model decodes a few tokens greedily, and the first line is parsed as
Sequence-Scheduling's `extract_all_numbers` does: one number gives it, none gives 0, several give
the mean of the first two ("100-150" -> 125). Nothing is fine-tuned, and fit() asks the model
nothing: the train split only provides the calibration ratio.

Two rows, labelled in the leaderboard by `report()["row_labels"]`:
- raw (the `predict` output, paper-faithful): the parsed number as is, in words with the default
  unit although labels count tokens.
- calibrated (variant `calibrated`, unit=words only): the parse times the train split's
  tokens-per-word ratio, sum(L) / sum(words) over the train responses (decoded with the target
  tokenizer, words = whitespace-separated pieces; L counts EOS like every label). Rows with no
  number get the train median instead of 0.
Unparseable answers on the scored split are counted in `report()` (`n_unparseable`) and logged.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import torch

from lenbench import Needs, Predictor
from lenbench.models.chat import render_prompt
from lenbench.runtime.progress import ProgressLog

log = logging.getLogger(__name__)

SUFFIX = ("\n\nBefore responding to the above instruction, you have to predict the length of "
          "your response. Print the estimated number of {unit} in your response in the first "
          "line. Then change to a new line to respond to the instruction.")
N_EXAMPLES = 5  # raw answers kept in the report, to show what the parser saw


def first_line(text: str) -> str:
    """The first non-empty line ([I]: a leading newline before the estimate is skipped)."""
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def parse_length(text: str) -> float | None:
    """SeqSch `extract_all_numbers` on the first line; None when it holds no number."""
    nums = [int(s) for s in re.findall(r"\d+", first_line(text))]
    if not nums:
        return None
    return float(nums[0]) if len(nums) == 1 else (nums[0] + nums[1]) / 2


def tokens_per_word(tokenizer, response_ids: list[list[int]], lengths: np.ndarray) -> float | None:
    """sum(L) / sum(words) over responses; None when the responses hold no words at all."""
    texts = tokenizer.batch_decode(response_ids, skip_special_tokens=True)
    words = sum(len(t.split()) for t in texts)
    return float(np.sum(lengths)) / words if words else None


class PIA(Predictor):
    needs = Needs(text=True, target_model=True)

    def __init__(self, unit: str = "words", max_new_tokens: int = 8, batch_size: int = 16):
        if unit not in ("words", "tokens"):
            raise ValueError("pia.unit must be 'words' (OUTLETS template) or 'tokens' (SeqSch)")
        self.unit, self.max_new_tokens, self.batch_size = unit, max_new_tokens, batch_size
        self.suffix = SUFFIX.format(unit=unit)
        self.n_unparseable = 0
        self.n_asked = 0
        self.answers: list[str] = []
        self.tokens_per_word: float | None = None
        self.fallback = 0.0

    def _generate(self, target, prompts: list[str]) -> list[str]:
        """Greedy answers to the prompts, one per row. Each distinct prompt is asked once (rows
        that share a prompt share its greedy answer: 3.3x fewer generations on a world with
        siblings), in batches of similar length, left-padded, so that padding costs little."""
        tok, model = target.tokenizer, target.model
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        kwargs = target.info.get("chat_template_kwargs")  # e.g. Qwen3's enable_thinking
        rendered = {p: render_prompt(tok, p + self.suffix, kwargs) for p in dict.fromkeys(prompts)}
        distinct = sorted(rendered, key=lambda p: len(rendered[p]))
        answers: dict[str, str] = {}
        plain = ProgressLog(log, "pia", len(distinct), unit="prompts")
        for start in range(0, len(distinct), self.batch_size):
            batch = distinct[start:start + self.batch_size]
            ids = [rendered[p] for p in batch]
            width = max(len(x) for x in ids)
            input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
            with torch.no_grad():
                gen = model.generate(input_ids=input_ids.to(target.device),
                                     attention_mask=mask.to(target.device), do_sample=False,
                                     max_new_tokens=self.max_new_tokens, pad_token_id=pad)
            answers.update(zip(batch, tok.batch_decode(gen[:, width:].cpu(),
                                                       skip_special_tokens=True)))
            plain.advance(len(batch), tokens=int(mask.sum()))
        return [answers[p] for p in prompts]

    def _ask(self, split) -> np.ndarray:
        """Raw parsed lengths of the rows; NaN where no number was given."""
        self.answers = self._generate(split.target, split.prompts)
        parsed = [parse_length(a) for a in self.answers]
        self.n_asked = len(parsed)
        self.n_unparseable = sum(p is None for p in parsed)
        log.info("pia: %d of %d answers on %s had no number (predicted 0)",
                 self.n_unparseable, self.n_asked, split.name)
        return np.array([np.nan if p is None else p for p in parsed], dtype=np.float64)

    def fit(self, train, val=None) -> None:
        lengths = train.lengths.astype(np.float64)
        self.fallback = float(np.median(lengths))
        if self.unit == "words":
            self.tokens_per_word = tokens_per_word(train.target.tokenizer,
                                                   train.response_token_ids, lengths)
            log.info("pia: train split has %s tokens per word", self.tokens_per_word)

    def _raw(self, split) -> np.ndarray:
        # predict and predict_variants see the same split object: decode it once
        key = (id(split), split.name, len(split))
        if getattr(self, "_cache_key", None) != key:
            self._cache, self._cache_key = self._ask(split), key
        return self._cache

    def predict(self, split) -> np.ndarray:
        return np.nan_to_num(self._raw(split), nan=0.0)

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        if self.tokens_per_word is None:  # unit=tokens, or train responses without words
            return {}
        raw = self._raw(split)
        return {"calibrated": np.where(np.isfinite(raw), self.tokens_per_word * np.nan_to_num(raw),
                                       self.fallback)}

    def examples(self, n: int = N_EXAMPLES) -> list[str]:
        """Distinct raw answers and their parse: the first with a number, then the first
        without, so that both kinds show (up to n - n // 2 parsed, the rest from either)."""
        parsed = [(a, parse_length(a)) for a in dict.fromkeys(self.answers)]
        good = [x for x in parsed if x[1] is not None][:n - n // 2]
        bad = [x for x in parsed if x[1] is None][:n - len(good)]
        rest = [x for x in parsed if x not in good and x not in bad][:n - len(good) - len(bad)]
        return [f"{a!r} -> {'none' if p is None else f'{p:g}'}" for a, p in good + bad + rest]

    def report(self) -> dict:
        labels = {"predict": f"raw, {self.unit}"}
        if self.tokens_per_word is not None:
            labels["calibrated"] = f"calibrated, tokens/word = {self.tokens_per_word:.3g}"
        return {
            "unit": self.unit,
            "n_asked": self.n_asked,
            "n_unparseable": self.n_unparseable,
            "unparseable_share": self.n_unparseable / self.n_asked if self.n_asked else None,
            "tokens_per_word": self.tokens_per_word,
            "fallback_calibrated": self.fallback,
            "examples": self.examples(),
            "row_labels": labels,
        }
