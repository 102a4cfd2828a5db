"""Transfer scores: predictors fitted on one world, scored on a second prompt set.

`dataset@transfer=PRESET` (any dataset preset, its keys set under `transfer.`) names the second
prompt set, e.g. `dataset@transfer=jsonl transfer.path=mine.jsonl`. It goes through the world's
own stages (PromptSet -> generate -> features) with the same model, generation and features
settings, under cache keys of its own. Each predictor is fitted on the world's train (and val)
split as usual, scored on the world's test split as usual, and then also predicts every prompt of
the transfer set, whatever split its hash gives it (nothing was fitted on it), less the prompts
that are also in the world's train or val split. The result file gets a `transfer` block naming
both sets; docs/protocol.md, "Transfer scores", states the rules.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import asdict, replace
from typing import Any

import numpy as np

from lenbench.configs import RunConfig
from lenbench.configs.dataset import DatasetConfig
from lenbench.contract.predictor import Predictor
from lenbench.contract.views import SplitView
from lenbench.data.promptset import promptset_key
from lenbench.data.sources.reading import SourceError
from lenbench.evaluate import length_cap
from lenbench.pipeline import World, label_import_cap, prepare_world, world_name
from lenbench.scoring.hygiene import clean_predictions
from lenbench.scoring.metrics import dynamic_metrics, request_errors, static_metrics
from lenbench.scoring.noise_floor import noise_floor_bounds, noise_floor_predictions
from lenbench.validate import ConfigError, config_problems

log = logging.getLogger(__name__)

FIELD = "transfer"
SCORED_SPLITS = "all"  # every split of the transfer set is scored: none was fitted on


# the world's denser sampling of some prompts serves its noise floor and sibling distributions;
# the transfer set is scored on every prompt alike, so it takes `n_samples` everywhere
WORLD_ONLY_GENERATION = {"dense_prompts": None, "dense_n_samples": None, "dense_split": None,
                         "dense_drawn": None}


def transfer_run_config(run: RunConfig) -> RunConfig:
    """The run config with the transfer set in place of the world's dataset: what its stages
    are built from (same model, sampling and features settings, so the same stage code; no
    dense prompts, `WORLD_ONLY_GENERATION`)."""
    gen = run.generation
    if any(getattr(gen, k) for k in WORLD_ONLY_GENERATION):
        gen = replace(gen, **WORLD_ONLY_GENERATION)
    return replace(run, dataset=run.transfer, transfer=None, generation=gen)


def _renamed(line: str) -> str:
    """A dataset problem line, naming the transfer set's field instead of the world's."""
    for prefix in ("dataset.", "dataset="):
        if line.startswith(prefix):
            return FIELD + line[len("dataset"):]
    return f"{FIELD}: {line}"


def transfer_size_note(run: RunConfig) -> str | None:
    """One line for a run whose world was made smaller (`dataset.limit`) than its transfer set
    may be: the transfer set keeps its own limit, and this says how to drop or shrink it."""
    ds, world = run.transfer, run.dataset
    if ds is None or world.limit is None or ds.limit is None or ds.limit <= world.limit:
        return None  # a file of your own (no limit) is the set you asked for
    return (f"the transfer set ({ds.name}, up to {ds.limit} prompts) is answered and scored "
            f"too, beside dataset.limit={world.limit}: transfer=null drops it, "
            "transfer.limit=N shrinks it")


def check_transfer(run: RunConfig, world_cap: int | None) -> None:
    """Refuse a transfer set that cannot be scored, one line naming the field, before any
    model work. `world_cap` is the world's imported-trace cap (None when it is generated).

    A generated world's transfer set is answered by its model, so its file must not carry
    lengths; an imported world has no model, so its transfer set must be a trace of the same
    declared model whose lengths fit under the world's cap.
    """
    ds, world = run.transfer, run.dataset
    if ds is None:
        return
    # the same checks as the world's dataset, on the composed values (validate.py)
    problems = [_renamed(p) for p in config_problems({"dataset": asdict(ds)})]
    if problems:
        raise ConfigError(problems)
    if promptset_key(ds) == promptset_key(world):
        raise ConfigError([f"{FIELD}: the same prompt set as dataset={world.name} (same "
                           "source, files, filter and split); choose another prompt set"])
    try:
        cap = label_import_cap(transfer_run_config(run))
    except ConfigError as exc:
        raise ConfigError([_renamed(p) for p in exc.problems]) from None
    except SourceError as exc:
        raise SourceError(f"{FIELD}: {exc}") from None
    path = getattr(ds, "path", None)
    where = f"{FIELD}.path={path!r}" if path else FIELD
    if world_cap is None and cap is not None:
        raise ConfigError([f"{where}: its rows record lengths, so they would be imported, not "
                           f"answered by model {run.model.name}; a transfer set is answered "
                           "by the world's model: give it prompts without lengths"])
    if world_cap is not None and cap is None:
        raise ConfigError([f"{where}: its rows record no lengths, and the world's labels are "
                           f"imported (dataset.path={getattr(world, 'path', None)!r}): no model "
                           "answers its prompts; give a trace of the same model with lengths"])
    if world_cap is None:
        return
    for key in ("model_name", "tokenizer"):  # label import's fields (the jsonl schema's)
        mine, theirs = getattr(ds, key, None), getattr(world, key, None)
        if mine != theirs:
            raise ConfigError([f"{FIELD}.{key}={mine!r}: the world's trace declares "
                               f"dataset.{key}={theirs!r}; a transfer set must come "
                               "from the same model"])
    if cap > world_cap:
        raise ConfigError([f"{FIELD}.max_length: the transfer trace's cap ({cap}) is above the "
                           f"world's ({world_cap}), which predictions are clipped to; declare "
                           "the world's cap with dataset.max_length"])


def prepare_transfer(run: RunConfig, world: World, need_features: bool,
                     progress: bool = True, needs: list | None = None) -> World:
    """Build (or reuse) the transfer set's stages with the world's model and settings."""
    tworld = prepare_world(transfer_run_config(run), need_features=need_features,
                           progress=progress, needs=needs)
    if tworld.model["key"] != world.model["key"]:  # check_transfer refuses this earlier
        raise ConfigError([f"{FIELD}: answered by model key {tworld.model['key']}, not by the "
                           f"world's {world.model['key']}"])
    ds: DatasetConfig = run.transfer
    tworld.dataset["name"] = world_name(str(ds.name), getattr(ds, "path", None), imported=True)
    rows, overlap = transfer_rows(world, tworld)
    log.info("transfer set %s: %d rows from %d prompts scored (%d prompts left out: also in "
             "the world's train or val split)", tworld.dataset["name"], len(rows),
             tworld.labels["prompt_id"].iloc[rows].nunique(), overlap)
    return tworld


def transfer_rows(world: World, tworld: World) -> tuple[np.ndarray, int]:
    """The transfer set's scored rows (all its splits) and how many of its prompts were left
    out because the world fitted on them (same normalised text: same prompt id)."""
    fitted = set(world.labels["prompt_id"].iloc[np.concatenate(
        [world.rows("train"), world.rows("val")])])
    ids = tworld.labels["prompt_id"].to_numpy()
    seen = np.fromiter((p in fitted for p in ids), dtype=bool, count=len(ids))
    return np.flatnonzero(~seen), len(set(ids[seen]))


def _identity(w: World, name: str | None = None) -> dict[str, Any]:
    """What names a prompt set in the result: its name, keys, fingerprints and size."""
    return {"name": name or w.dataset["name"], "key": w.dataset["key"], "keys": dict(w.keys),
            "fingerprints": dict(w.fingerprints), "n_rows": len(w.labels),
            "n_prompts": int(w.labels["prompt_id"].nunique()),
            "mean_L": float(w.labels["L"].mean())}


def _block(world: World, tworld: World, rows: np.ndarray, overlap: int) -> dict[str, Any]:
    scored_on = _identity(tworld)
    scored_on.update(splits=SCORED_SPLITS, n_scored=len(rows),
                     n_scored_prompts=int(tworld.labels["prompt_id"].iloc[rows].nunique()),
                     n_prompts_left_out=overlap)
    trained_on = _identity(world)
    trained_on.update(n_train=world.dataset["n_train"], n_val=world.dataset["n_val"])
    return {"trained_on": trained_on, "scored_on": scored_on, "error": None}


def score_transfer(predictor: Predictor, name: str, world: World, tworld: World,
                   run: RunConfig, seed: int) -> dict[str, Any]:
    """The fitted `predictor` scored on the transfer set: the `transfer` block of its result."""
    n_boot, ci = int(run.eval.n_boot), float(run.eval.ci)
    rows, overlap = transfer_rows(world, tworld)
    block = _block(world, tworld, rows, overlap)
    if len(rows) == 0:
        raise ValueError(f"{FIELD}: every prompt of the transfer set is in the world's train or "
                         "val split; nothing is left to score")
    target = world.target() if predictor.needs.target_model else None
    view = SplitView("transfer", tworld.labels, rows, tworld.features, target)
    static_view = view.static_view(predictor.needs)
    t0 = time.perf_counter()
    pred = np.asarray(predictor.predict(static_view), dtype=np.float64).reshape(-1)
    predict_s = time.perf_counter() - t0
    if pred.shape[0] != len(view):
        raise ValueError(f"{name}.predict returned {pred.shape[0]} values for {len(view)} "
                         "transfer rows")
    cap = length_cap(run)
    pred, clipped = clean_predictions(pred, name, "predict", cap)
    true, groups = view.lengths, view.group_ids
    censored = tworld.labels["censored"].to_numpy(dtype=bool)[rows]
    metrics: dict[str, Any] = {
        "static": {**static_metrics(true, pred, groups, n_boot=n_boot, seed=seed, ci=ci,
                                    censored=censored, cap=cap), **clipped, "length_cap": cap},
        "dynamic": None}
    predictions: dict[str, Any] = {"true": true.tolist(), "pred": pred.tolist(),
                                   "prompt_id": [str(g) for g in groups],
                                   "censored": censored.tolist()}
    if predictor.dynamic:
        steps = view.steps
        rem = np.asarray(predictor.predict_remaining(view.hide_labels()),
                         dtype=np.float64).reshape(-1)
        if rem.shape[0] != len(steps):
            raise ValueError(f"{name}.predict_remaining returned {rem.shape[0]} values for "
                             f"{len(steps)} transfer steps")
        rem, rem_clipped = clean_predictions(rem, name, "predict_remaining", cap - steps.t)
        metrics["dynamic"] = {**dynamic_metrics(
            steps.row, steps.t, true, rem, groups, n_boot=n_boot, seed=seed, ci=ci,
            n_bins=int(run.eval.progress_bins), censored=censored), **rem_clipped}
        predictions["dynamic_error"] = [
            None if np.isnan(e) else float(e)
            for e in request_errors(steps.row, steps.t, true, rem, censored)]
    block.update(metrics=metrics, predictions=predictions, predict_s=predict_s)
    return block


def attach_transfer(result: dict[str, Any], predictor: Predictor, name: str, world: World,
                    tworld: World, run: RunConfig, seed: int, raise_on_error: bool = False
                    ) -> None:
    """Add the `transfer` block to a scored result. A predictor that fails on the transfer set
    keeps its in-world scores; the block records the error instead (re-raised on request)."""
    try:
        result[FIELD] = score_transfer(predictor, name, world, tworld, run, seed)
    except Exception as exc:
        if raise_on_error:
            raise
        log.exception("predictor %s failed on the transfer set", name)
        rows, overlap = transfer_rows(world, tworld)
        result[FIELD] = {**_block(world, tworld, rows, overlap), "metrics": None,
                         "error": {"type": type(exc).__name__, "message": str(exc),
                                   "traceback": "".join(traceback.format_exception(exc))}}


def transfer_noise_floor(world: World, tworld: World, run: RunConfig) -> dict[str, Any] | None:
    """The noise floor's `transfer` block: the same bounds as the world's reference row, on the
    transfer set's scored rows of prompts with two samples or more, censored ones included (at
    their cut-off, scored as the predictors' are: scoring/noise_floor.py)."""
    rows, overlap = transfer_rows(world, tworld)
    true = tworld.labels["L"].to_numpy(dtype=np.float64)[rows]
    groups = tworld.labels["prompt_id"].to_numpy()[rows]
    censored = tworld.labels["censored"].to_numpy(dtype=bool)[rows]
    pred = noise_floor_predictions(true, groups)
    if not np.isfinite(pred).any():
        return None
    n_boot, ci = int(run.eval.n_boot), float(run.eval.ci)
    keep = np.isfinite(pred)
    block = _block(world, tworld, rows, overlap)
    block["metrics"] = {
        "static": static_metrics(true, pred, groups, n_boot=n_boot, seed=0, ci=ci,
                                 censored=censored, cap=length_cap(run)),
        "noise_floor": noise_floor_bounds(true, groups, censored, n_boot=n_boot, seed=0, ci=ci),
        "dynamic": None}
    block["predictions"] = {"true": true[keep].tolist(), "pred": pred[keep].tolist(),
                            "prompt_id": [str(g) for g in groups[keep]],
                            "censored": censored[keep].tolist()}
    return block
