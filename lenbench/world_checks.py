"""Checks and warnings on the data a world is built from, before any predictor sees it.

A world can be built and still be the wrong data for a run: labels shaped by the length cap,
imported lengths with no responses behind them, server-counted lengths with no tokens. These
say so loudly, or refuse the run, naming the way out.
"""

from __future__ import annotations

import logging

from lenbench.generation.label_counts import label_counts
from lenbench.validate import ConfigError

log = logging.getLogger(__name__)


CENSORED_WARN_SHARE = 0.2

def warn_censoring(card: dict) -> None:
    """Say loudly when the cap shaped the data: dropped censored samples are the long ones, so a
    large share biases every length statistic downwards, and prompts whose samples were all
    censored vanish from the test split without a trace."""
    if card.get("label_source") == "imported":
        log.info("imported %d rows of %d prompts; %d flagged censored (scored as lower bounds); "
                 "length cap %s (%s)", card.get("n_rows", 0), card.get("n_prompts", 0),
                 card.get("n_censored", 0), card.get("length_cap"), card.get("length_cap_from"))
        return
    _, _, n_generated, n_censored = label_counts(card) or (0, 0, 0, 0)
    if n_generated and n_censored / n_generated > CENSORED_WARN_SHARE:
        cap = (card.get("sampling") or {}).get("max_new_tokens")
        log.warning("%d of %d samples (%.0f%%) hit max_new_tokens=%s and were %s; lengths are "
                    "biased towards short answers: raise generation.max_new_tokens, or check "
                    "the sampling settings (a model that loops never emits EOS)", n_censored,
                    n_generated, 100 * n_censored / n_generated, cap,
                    card.get("censored_rows", "dropped"))
    if card.get("n_prompts_too_long"):
        log.warning("%d of %d prompts were longer than generation.max_prompt_tokens and were "
                    "skipped (card.json: n_prompts_too_long)", card["n_prompts_too_long"],
                    card.get("n_prompts", 0))

def check_import_needs(dataset: str, need_features: bool, needs: list) -> None:
    """Imported lengths come without responses or a model: refuse what needs either, at once
    (`dataset` is the preset's name, for the message)."""
    if need_features or any(getattr(n, "target_model", False) for n in needs):
        raise ConfigError([(f"dataset={dataset}: the file gives lengths, not responses or a "
                           "model, so only text-only predictors (Needs(text=True)) can run on "
                           "it, e.g. predictor.suite=[constant,prompt_length,tfidf_ridge]")])


def check_response_tokens(gen_card: dict) -> None:
    """Labels counted by a server that returned no token ids have no responses to run the
    target over: refuse feature-based predictors before the features stage starts."""
    generator = gen_card.get("generator")  # a dict from describe(), else the class name
    if isinstance(generator, dict) and generator.get("length_source") == "usage":
        raise ConfigError(["the labels are the server's own counts (generation.length_source "
                           "resolved to usage: it returned no token ids), so there are no "
                           "response tokens to extract features from; use a backend that "
                           "returns ids (hf, vllm, llamacpp) or text-only predictors, e.g. "
                           "predictor.suite=[constant,prompt_length,tfidf_ridge]"])

def warn_duplicate_lengths(ds_card: dict, path: object) -> None:
    """A trace written one line per sample repeats its prompts; the PromptSet keeps the first
    line of each and drops the rest, lengths included: say so, with the way out."""
    n = int((ds_card.get("dropped") or {}).get("duplicate") or 0)
    if n:
        log.warning("%d rows of %s repeat an earlier prompt and were dropped with their "
                    "lengths; give several samples of one prompt as a list (\"length\": [a, b])",
                    n, path)
