"""PIA: ask the target model itself how long its answer will be (Perception in Advance).

The OUTLETS template (Fig. 5; specs/predictors.md §3.5 and §5) is appended to the user prompt
before the chat template. The model decodes a few tokens greedily, and the first line is parsed as
Sequence-Scheduling's `extract_all_numbers` does: one number gives it, none gives 0, several give
the mean of the first two ("100-150" -> 125). Nothing is fine-tuned.

The raw parse counts words (or tokens with unit=tokens) while labels count tokens. It is the
paper-faithful prediction. The "calibrated" variant multiplies it by one scale factor fitted by
least squares on the train split (parsed rows only). Rows with no number get the train median.
This stands in for the tokens-per-word ratio, which needs response text that SplitView does not
expose. Unparseable answers are counted in `n_unparseable` and logged.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import torch

from lenbench import Needs, Predictor
from lenbench.generation.runner import render_prompt

log = logging.getLogger("lenbench")

SUFFIX = ("\n\nBefore responding to the above instruction, you have to predict the length of "
          "your response. Print the estimated number of {unit} in your response in the first "
          "line. Then change to a new line to respond to the instruction.")


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


class PIA(Predictor):
    needs = Needs(text=True, target_model=True)

    def __init__(self, unit: str = "words", max_new_tokens: int = 8, batch_size: int = 16,
                 calibration_rows: int | None = 512):
        if unit not in ("words", "tokens"):
            raise ValueError("pia.unit must be 'words' (OUTLETS template) or 'tokens' (SeqSch)")
        self.unit, self.max_new_tokens, self.batch_size = unit, max_new_tokens, batch_size
        self.calibration_rows = calibration_rows
        self.suffix = SUFFIX.format(unit=unit)
        self.n_unparseable = 0
        self.n_asked = 0
        self.answers: list[str] = []

    def _generate(self, target, prompts: list[str]) -> list[str]:
        """Greedy answers to the prompts with the suffix, batched with left padding."""
        tok, model = target.tokenizer, target.model
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start:start + self.batch_size]
            ids = [render_prompt(tok, p + self.suffix) for p in batch]
            width = max(len(x) for x in ids)
            input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
            mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
            with torch.no_grad():
                gen = model.generate(input_ids=input_ids.to(target.device),
                                     attention_mask=mask.to(target.device), do_sample=False,
                                     max_new_tokens=self.max_new_tokens, pad_token_id=pad)
            out += tok.batch_decode(gen[:, width:].cpu(), skip_special_tokens=True)
        return out

    def _ask(self, split, rows: np.ndarray | None = None) -> np.ndarray:
        """Raw parsed lengths of the rows (all by default); NaN where no number was given."""
        prompts = split.prompts if rows is None else [split.prompts[i] for i in rows]
        self.answers = self._generate(split.target, prompts)
        parsed = [parse_length(a) for a in self.answers]
        self.n_asked = len(parsed)
        self.n_unparseable = sum(p is None for p in parsed)
        log.info("pia: %d of %d answers on %s had no number (predicted 0)",
                 self.n_unparseable, self.n_asked, split.name)
        return np.array([np.nan if p is None else p for p in parsed], dtype=np.float64)

    def fit(self, train, val=None) -> None:
        rows = np.arange(len(train))
        if self.calibration_rows is not None and len(rows) > self.calibration_rows:
            rows = np.sort(np.random.default_rng(self.seed).choice(
                rows, self.calibration_rows, replace=False))
        lengths = train.lengths.astype(np.float64)
        self.fallback = float(np.median(lengths))
        raw = self._ask(train, rows)
        ok = np.isfinite(raw) & (raw > 0)
        denom = float((raw[ok] ** 2).sum())
        self.scale = float((raw[ok] * lengths[rows][ok]).sum() / denom) if denom > 0 else 0.0
        self.train_unparseable = self.n_unparseable
        log.info("pia: calibration scale %.3f tokens per %s (%d parsed train answers)",
                 self.scale, self.unit[:-1], int(ok.sum()))

    def _raw(self, split) -> np.ndarray:
        # predict and predict_variants see the same split object: decode it once
        key = (id(split), split.name, len(split))
        if getattr(self, "_cache_key", None) != key:
            self._cache, self._cache_key = self._ask(split), key
        return self._cache

    def predict(self, split) -> np.ndarray:
        return np.nan_to_num(self._raw(split), nan=0.0)

    def predict_variants(self, split) -> dict[str, np.ndarray]:
        raw = self._raw(split)
        ok = np.isfinite(raw) & (raw > 0)
        return {"calibrated": np.where(ok, self.scale * np.nan_to_num(raw), self.fallback)}
