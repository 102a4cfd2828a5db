"""Evaluate one predictor under the common protocol and write its result file.

Fit on train (val for early stopping), predict the test split with its labels hidden, score the
static and (if the predictor is dynamic) the dynamic predictions, time both, and record enough of
the config, data identity and environment that every number can be reproduced.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lenbench.configs import RunConfig
from lenbench.configs.generation import EXECUTION_KEYS
from lenbench.contract.distributions import QUANTILE_LEVELS, LengthDistribution
from lenbench.contract.needs import reads_of
from lenbench.contract.predictor import Predictor
from lenbench.contract.views import SplitView
from lenbench.generation.dense_draw import drawn_prompts
from lenbench.generation.protocol import penalty_in_effect
from lenbench.pipeline import World
from lenbench.results import (
    PROTOCOL_VERSION,
    SCHEMA_VERSION,
    computing_params,
    config_hash,
    environment_info,
    git_info,
    json_safe,
    utc_now,
)
from lenbench.results.model import MEDIAN_VARIANT
from lenbench.results.store import save_result
from lenbench.runtime.process import seed_everything
from lenbench.runtime.stage_times import timed
from lenbench.scoring.audit import ScoredRecord, audit_scored
from lenbench.scoring.distribution_metrics import (
    distribution_metrics,
    dynamic_distribution_metrics,
    mass_at_cap,
    row_scores,
    score_threshold,
    sibling_distributions,
)
from lenbench.scoring.hygiene import clean_predictions
from lenbench.scoring.metrics import dynamic_metrics, request_errors, static_metrics
from lenbench.scoring.noise_floor import (
    extrapolated_floor,
    noise_floor_bounds,
    noise_floor_predictions,
)
from lenbench.scoring.step_errors import step_error_record, step_errors
from lenbench.sim.config import SimConfig

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parent.parent


# the groups a result's identity (its file name) is made of, with its predictor and seed
IDENTITY = ("dataset", "model", "generation", "features", "eval", "sim")


def _base_result(world: World, name: str, kind: str, run: RunConfig, seed: int,
                 predictor_cfg: dict) -> dict[str, Any]:
    identity = run.to_dict(IDENTITY)
    if penalty_in_effect(run.generation.repetition_penalty) is None:  # off: named as before it
        identity["generation"].pop("repetition_penalty", None)        # existed
    identity["generation"] = {k: v for k, v in identity["generation"].items()
                              if k not in EXECUTION_KEYS}  # where, not what: labels unchanged
    if not run.generation.dense_drawn:  # no drawn dense prompts: named as before the draw
        identity["generation"].pop("dense_drawn", None)
    identity.update(predictor=computing_params(predictor_cfg), seed=seed)
    if run.transfer is not None:  # a run that also scores a transfer set: a file of its own
        identity.update(run.to_dict(("transfer",)))
    return {
        "schema_version": SCHEMA_VERSION,
        "protocol_version": PROTOCOL_VERSION,
        "status": "ok",
        "error": None,
        "kind": kind,
        "dataset": {k: world.dataset[k] for k in ("name", "key", "n_train", "n_val", "n_test",
                                                   "n_test_prompts", "mean_L")},
        "model": {"name": world.model["name"], "key": world.model["key"],
                  **({"source": world.model["source"]} if world.model.get("source") else {})},
        "predictor": {"name": name, "target": predictor_cfg.get("_target_"),
                      "params": {k: v for k, v in predictor_cfg.items()
                                 if k not in ("_target_", "name")},
                      "dynamic": False},
        "seed": seed,
        "config_hash": config_hash(identity),
        "metrics": None,
        "timings": None,
        "report": {},
        "config": run.to_dict(),
        "stage_keys": world.keys,
        "fingerprints": dict(world.fingerprints),
        "generation": {k: world.generation_card.get(k) for k in (
            "n_prompts", "n_prompts_too_long", "n_samples", "sampling", "backend", "n_rows",
            "n_censored", "censored_rows", "real_token_fraction", "mean_L", "label_source",
            "n_prompts_unlabelled", "length_cap", "length_cap_from", "prompt_token_ids",
            "dense_prompts", "dense_n_samples", "dense_drawn", "dense_prompt_count")},
        "environment": environment_info(world.device),
        "git": git_info(REPO_ROOT),
        "created_at": utc_now(),
    }


def views(world: World, target=None) -> tuple[SplitView, SplitView, SplitView]:
    def make(s):
        return SplitView(s, world.labels, world.rows(s), world.features, target)

    return make("train"), make("val"), make("test")


def evaluate_predictor(predictor: Predictor, name: str, predictor_cfg: dict, world: World,
                       run: RunConfig, seed: int, audit_seed: int | None = None
                       ) -> dict[str, Any]:
    """Fit and score one predictor; returns the result dict (status 'ok' or raises).
    `run` is the run's config with this predictor's (`predictor_cfg`) in place; `audit_seed`
    the run's audit stream (fresh when None), so its predictors are audited on the same rows."""
    n_boot, ci = int(run.eval.n_boot), float(run.eval.ci)
    result = _base_result(world, name, "predictor", run, seed, predictor_cfg)
    result["predictor"]["reads"] = reads_of(predictor.needs)
    target = world.target() if predictor.needs.target_model else None
    train, val, test = views(world, target)
    if len(train) == 0 or len(test) == 0:
        raise ValueError(f"the train ({len(train)}) or test ({len(test)}) split is empty; raise "
                         "dataset.n_prompts or dataset.limit, or change dataset.split")
    test_hidden = test.hide_labels()  # the dynamic view: predict_remaining walks the response
    test_static = test.static_view(predictor.needs)  # predict(): the prompt side and y_1 only
    predictor.seed = seed
    seed_everything(seed)
    with timed("fit") as fitting:
        predictor.fit(train, val if len(val) else None)
    fit_s = fitting.seconds
    earlier_fit_s = float(predictor.earlier_fit_seconds())
    # the fitted state and every scored call, for the audit of what was scored
    # (lenbench/scoring/audit.py)
    scored = ScoredRecord(predictor, (train, val, test, test_hidden, test_static, world.features,
                                      target, world.labels))
    with timed("predict") as predicting:
        pred = np.asarray(scored.call("predict", test_static), dtype=np.float64).reshape(-1)
    predict_s = predicting.seconds
    if pred.shape[0] != len(test):
        raise ValueError(f"{name}.predict returned {pred.shape[0]} values for {len(test)} rows")
    cap = length_cap(run)
    pred, clipped = clean_predictions(pred, name, "predict", cap)
    true, groups = test.lengths, test.group_ids
    censored = world.labels["censored"].to_numpy(dtype=bool)[world.rows("test")]

    def score(values: np.ndarray, counts: dict[str, int]) -> dict[str, Any]:
        return {**static_metrics(true, values, groups, n_boot=n_boot, seed=seed, ci=ci,
                                 censored=censored, cap=cap), **counts, "length_cap": cap}

    metrics: dict[str, Any] = {"static": score(pred, clipped), "dynamic": None, "variants": {}}
    variant_preds: dict[str, np.ndarray] = {}  # each decoding variant's scored predictions
    for variant, values in scored.call("predict_variants", test_static).items():
        variant_preds[variant], counts = clean_predictions(
            values, name, f"predict_variants()[{variant!r}]", cap)
        metrics["variants"][variant] = score(variant_preds[variant], counts)
    distribution = None  # the static LengthDistribution, when the predictor has one
    if predictor.distributional:
        distribution = _checked(scored.call("predict_distribution", test_static), len(test), name,
                                "predict_distribution", "test rows")
        metrics["distribution"] = {
            "static": distribution_metrics(distribution, true, groups, censored, cap,
                                           n_boot=n_boot, seed=seed, ci=ci), "dynamic": None}
        median = median_decoding(distribution, cap)
        if MEDIAN_VARIANT not in variant_preds and not np.array_equal(median, pred):
            variant_preds[MEDIAN_VARIANT] = median  # the MAE-optimal point of the distribution
            metrics["variants"][MEDIAN_VARIANT] = score(*clean_predictions(
                median, name, "the median of predict_distribution()", cap))
    if predictor.dynamic_distributional:
        steps = test.steps
        remaining = _checked(scored.call("predict_remaining_distribution", test_hidden), len(steps),
                             name, "predict_remaining_distribution", "steps")
        metrics.setdefault("distribution", {"static": None})["dynamic"] = \
            dynamic_distribution_metrics(steps.row, steps.t, true, remaining, groups, censored,
                                         cap, n_boot=n_boot, seed=seed, ci=ci)
    step_ms = None
    if predictor.dynamic:
        steps = test.steps
        with timed("predict_remaining") as walking:
            rem = np.asarray(scored.call("predict_remaining", test_hidden),
                             dtype=np.float64).reshape(-1)
        step_s = walking.seconds
        if rem.shape[0] != len(steps):
            raise ValueError(f"{name}.predict_remaining returned {rem.shape[0]} values for "
                             f"{len(steps)} steps")
        rem, rem_clipped = clean_predictions(rem, name, "predict_remaining",
                                             None if cap is None else cap - steps.t)
        metrics["dynamic"] = dynamic_metrics(steps.row, steps.t, true, rem, groups,
                                             n_boot=n_boot, seed=seed, ci=ci,
                                             n_bins=int(run.eval.progress_bins),
                                             censored=censored)
        metrics["dynamic"].update(rem_clipped)
        dynamic_errors = request_errors(steps.row, steps.t, true, rem, censored)
        listed = metrics["dynamic"]["observed_steps"]
        dynamic_steps = step_error_record(
            step_errors(steps.row, steps.t, true, rem, listed, censored), listed)
        step_ms = 1000 * step_s / max(len(steps), 1)
        result["predictor"]["dynamic"] = True
        result["predictor"]["reads_next_token"] = bool(predictor.reads_next_token)
    try:  # no scored value may move when what the protocol hides from it changes
        with timed("audit"):
            result["causality"] = audit_scored(scored, test_hidden, predictor.needs, audit_seed)
    except Exception as exc:  # noqa: BLE001 - an audit that cannot run is not a pass
        result["causality"] = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
    if not result["causality"]["passed"]:
        log.warning("%s: audit of the scored predictions not passed (a scored value changed when "
                    "what the protocol hides from it did): %s", name,
                    {k: result["causality"].get(k) for k in ("failed", "error")})
    result["metrics"] = metrics
    result["timings"] = {"fit_s": fit_s + earlier_fit_s, "fit_s_earlier_runs": earlier_fit_s,
                         "predict_s": predict_s,
                         "predict_ms_per_request": 1000 * predict_s / len(test),
                         "predict_ms_per_step": step_ms,
                         "n_parameters": predictor.num_parameters()}
    result["report"] = predictor_report(predictor, name)
    result["predictions"] = {"true": true.tolist(), "pred": pred.tolist(),
                             "prompt_id": [str(g) for g in groups],
                             "censored": censored.tolist(),
                             "prompt_len": [int(n) for n in test.prompt_lengths]}
    if variant_preds:
        result["predictions"]["variants"] = {k: v.tolist() for k, v in variant_preds.items()}
    if predictor.dynamic:  # per request, NaN (null) where a request has no scored step
        result["predictions"]["dynamic_error"] = [None if np.isnan(e) else float(e)
                                                  for e in dynamic_errors]
        result["predictions"]["dynamic_steps"] = dynamic_steps
    if distribution is not None:
        result["predictions"].update(distribution_predictions(distribution, true, censored, cap,
                                                              seed))
    if run.sim.enabled:
        with timed("simulator"):
            result["scheduling"] = schedule(
                true, pred, test.prompt_lengths, name, run.sim.simulation(),
                remaining=(steps.row, steps.t, rem) if predictor.dynamic else None,
                distribution=distribution, censored=censored)
    return result


def _checked(dist, n: int, name: str, method: str, what: str) -> LengthDistribution:
    """A predictor's distribution, checked to be one with a row per scored row."""
    if not isinstance(dist, LengthDistribution):
        raise TypeError(f"{name}.{method} returned {type(dist).__name__}; return a "
                        "LengthDistribution (LengthDistribution.from_quantiles / from_histogram)")
    if len(dist) != n:
        raise ValueError(f"{name}.{method} returned {len(dist)} distributions for {n} {what}")
    return dist


def distribution_predictions(dist: LengthDistribution, true: np.ndarray, censored: np.ndarray,
                             cap: float | None, seed: int,
                             threshold: float | None = None) -> dict[str, Any]:
    """Per-row figures that the distribution metrics are means of: the quantiles at
    QUANTILE_LEVELS, clipped to [1, cap] as scored, each row's CRPS and PIT (a censored row's
    PIT is its seeded draw) and P(L >= cap) (`p_cap`, without a cap none), computed as
    `distribution_metrics` computes them."""
    scores = row_scores(dist, true, censored, cap,
                        score_threshold(cap, true, censored, threshold), seed)
    quantiles = np.clip(dist.quantile(QUANTILE_LEVELS), 1.0, np.inf if cap is None else cap)
    p_cap = mass_at_cap(dist, cap)
    return {"quantile_levels": list(QUANTILE_LEVELS), "quantiles": quantiles.tolist(),
            "crps": scores["crps"].tolist(), "pit": scores["pit"].tolist(),
            **({} if p_cap is None else {"p_cap": p_cap.tolist()})}


def median_decoding(dist: LengthDistribution, cap: float | None) -> np.ndarray:
    """Each row's predicted median, clipped to [1, cap] as the stored quantiles are (so a
    result's "median" variant can be read back from its quantiles: `Predictions.decoded`)."""
    at = list(QUANTILE_LEVELS).index(0.5)
    return np.clip(dist.quantile(QUANTILE_LEVELS), 1.0, np.inf if cap is None else cap)[:, at]


def length_cap(run: RunConfig) -> int:
    """The largest length a label can have: the generation cap (for an imported trace, the cap
    the CLI set from the data)."""
    return int(run.generation.max_new_tokens)


def predictor_report(predictor: Predictor, name: str) -> dict[str, Any]:
    """`predictor.report()` as plain JSON values, checked now so that a bad value names the
    predictor instead of breaking the result write after the run's work is done."""
    report = predictor.report()
    if not isinstance(report, dict):
        raise TypeError(f"{name}.report() returned {type(report).__name__}; return a dict of "
                        "JSON-serialisable values ({} when there is nothing to report)")
    try:
        return json_safe(report)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name}.report() is not JSON-serialisable ({exc}); return numbers, "
                        "strings, lists and dicts (numpy values are converted)") from exc


def schedule(true: np.ndarray, pred: np.ndarray, prompt_len: np.ndarray, name: str,
             cfg: SimConfig, *, remaining: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
             distribution: LengthDistribution | None = None,
             censored: np.ndarray | None = None) -> dict[str, Any]:
    """Serve requests drawn from the test rows with these predictions (docs/protocol.md,
    "The scheduling score"; `censored` rows form the capped class). With `sim.score_alphas`,
    "by_alpha" adds the score at those aging weights; with `sim.compare`, "comparison" adds
    preemptive re-ranking on the dynamic estimates `remaining` = (step_row, step_t, rem) and
    ordering by the predicted `distribution`, on the same draws (lenbench.sim.record)."""
    from lenbench.sim.record import scheduling_record

    quantiles = None if distribution is None or not cfg.compare else \
        distribution.quantile(QUANTILE_LEVELS)
    return scheduling_record(true, pred, prompt_len, name, cfg, censored=censored,
                             remaining=remaining, quantiles=quantiles)


def failed_result(world: World, name: str, predictor_cfg: dict, run: RunConfig, seed: int,
                  exc: BaseException) -> dict[str, Any]:
    result = _base_result(world, name, "predictor", run, seed, predictor_cfg)
    result["status"] = "failed"
    result["error"] = {"type": type(exc).__name__, "message": str(exc),
                       "traceback": "".join(traceback.format_exception(exc))}
    return result


NOISE_FLOOR_SEED = 0  # one reference per world: the same file whatever the predictors' seed


def drawn_test_prompts(run: RunConfig, labels: pd.DataFrame) -> list[str] | None:
    """The test prompts the world's generation drew by hash for dense sampling
    (`generation.dense_drawn`), as the generate stage drew them; None where it drew none."""
    gen = run.generation
    if not gen.dense_drawn or not gen.dense_n_samples:
        return None
    among = labels if gen.dense_split is None else labels[labels["split"] == gen.dense_split]
    test = set(labels.loc[labels["split"] == "test", "prompt_id"])
    return [p for p in drawn_prompts(among["prompt_id"], int(gen.dense_drawn)) if p in test]


def noise_floor_result(world: World, run: RunConfig,
                       seed: int | None = None) -> dict[str, Any] | None:
    """The irreducible-error reference: bounds on the error of knowing each prompt's median.

    `static` scores the pessimistic leave-one-out rule (each sample predicted by the median of its
    prompt's other samples); `noise_floor` holds both bounds (`noise_floor.noise_floor_bounds`);
    `distribution` scores its distributional twin, the empirical distribution of the prompt's
    other samples (`distribution_metrics.sibling_distributions`). It is scored on the rows of
    prompts with at least two samples, censored ones included (at their cut-off, scored as the
    predictors' are), which `static.n` records.
    `seed` is ignored: the reference does not depend on the predictors' seed, so a sweep writes it
    once.
    """
    _, _, test = views(world)
    # censored samples count at their cut-off, scored as lower bounds (scoring/noise_floor.py)
    censored = world.labels["censored"].to_numpy(dtype=bool)[world.rows("test")]
    true, groups = test.lengths.astype(np.float64), test.group_ids
    cap = length_cap(run)
    pred = noise_floor_predictions(true, groups)
    if not np.isfinite(pred).any():
        return None  # one sample per prompt: nothing to estimate from
    n_boot, ci = int(run.eval.n_boot), float(run.eval.ci)
    result = _base_result(world, "noise_floor", "reference", run, NOISE_FLOOR_SEED,
                          {"name": "noise_floor", "rule": "median of the prompt's samples: "
                           "in-sample (optimistic) to leave-one-out (pessimistic)"})
    result["metrics"] = {
        "static": static_metrics(true, pred, groups, n_boot=n_boot, seed=NOISE_FLOOR_SEED,
                                 ci=ci, censored=censored, cap=cap),
        "noise_floor": noise_floor_bounds(true, groups, censored, n_boot=n_boot,
                                          seed=NOISE_FLOOR_SEED, ci=ci),
        "dynamic": None, "variants": {}}
    if result["metrics"]["noise_floor"] is not None:  # one estimate, from the dense prompts
        result["metrics"]["noise_floor"]["extrapolated"] = extrapolated_floor(
            true, groups, censored, n_boot=n_boot, seed=NOISE_FLOOR_SEED, ci=ci,
            prompts=drawn_test_prompts(run, world.labels))
    # the predictors' CRPS threshold (from every test row), so that the paired rows score alike
    threshold = score_threshold(cap, true, censored)
    siblings, has = sibling_distributions(true, groups)
    if siblings is not None:  # the same rows as the floor: prompts with two samples
        result["metrics"]["distribution"] = {
            "static": distribution_metrics(siblings, true[has], groups[has], censored[has], cap,
                                           threshold, n_boot=n_boot, seed=NOISE_FLOOR_SEED,
                                           ci=ci), "dynamic": None}
    keep = np.isfinite(pred)
    result["timings"] = {"fit_s": 0.0, "predict_s": 0.0, "predict_ms_per_request": None,
                         "predict_ms_per_step": None, "n_parameters": None}
    result["predictions"] = {"true": true[keep].tolist(), "pred": pred[keep].tolist(),
                             "prompt_id": [str(g) for g in groups[keep]],
                             "censored": censored[keep].tolist()}
    if siblings is not None:
        result["predictions"].update(distribution_predictions(
            siblings, true[has], censored[has], cap, NOISE_FLOOR_SEED, threshold))
    return result


def save(result: dict[str, Any], results_dir: str | Path) -> Path:
    """Write the result at its identity's path, never over other figures
    (lenbench/results/store.py); returns the path written."""
    return save_result(result, results_dir)
