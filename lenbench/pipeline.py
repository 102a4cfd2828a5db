"""The pipeline: prompt source -> PromptSet -> generate -> LengthSet -> features -> evaluate.

Each upstream stage is cached under a key derived from its config and its input's key (see
`stages.py`), so evaluating a new predictor reuses labels and features. The evaluation of one
predictor is `evaluate.py`'s job; this module only wires stages together.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from lenbench.configs import RunConfig
from lenbench.configs.dataset import DatasetConfig
from lenbench.configs.generation import GenerationConfig
from lenbench.configs.model import ModelConfig
from lenbench.contract.features import FeatureStore
from lenbench.contract.needs import TargetModel
from lenbench.contract.step_index import StepIndexStore
from lenbench.data.promptset import (
    DROPPED_FILE,
    build_promptset,
    load_promptset,
    promptset_key,
    save_promptset,
    source_from_config,
)
from lenbench.data.sources.reading import SourceError
from lenbench.features.extract import extract_features, features_config
from lenbench.features.reuse import covering_stage
from lenbench.generation.backends import backend_name, label_key
from lenbench.generation.labels_import import import_labels, known_lengths
from lenbench.generation.protocol import penalty_in_effect
from lenbench.generation.ray_executor import check_executor, run_on_ray
from lenbench.generation.runner import ShardsPending
from lenbench.generation.stage_job import GenerateJob
from lenbench.models.gguf import read_card
from lenbench.models.loading import load_target, resolve_device, resolve_dtype, resolve_model
from lenbench.models.shipped_toy import model_world
from lenbench.runtime.stage_times import timed
from lenbench.scoring.fingerprints import labels_fingerprint, stage_fingerprint
from lenbench.stages import Stage, stable_hash
from lenbench.validate import ConfigError
from lenbench.world_checks import (
    check_import_needs,
    check_response_tokens,
    warn_censoring,
    warn_duplicate_lengths,
)
from lenbench.worlds.sample_store import SampleStore
from lenbench.worlds.shipped import (
    report_against_shipped,
    sample_key,
    shipped_world_for,
)

log = logging.getLogger(__name__)

GENERATION_KEYS = ("backend", "temperature", "top_p", "max_new_tokens", "n_samples", "seed",
                   "max_prompt_tokens", "keep_censored", "shard_prompts")
# Label-changing keys added later: in the stage key only when set, so existing caches stay valid.
OPTIONAL_GENERATION_KEYS = ("max_length_exclusive", "dense_n_samples", "dense_prompts",
                            "dense_split", "dense_drawn")  # and repetition_penalty where it acts


@dataclass
class World:
    """The cached inputs every predictor is evaluated on, plus their identities."""

    labels: pd.DataFrame
    features: FeatureStore | None
    dataset: dict
    model: dict
    generation_card: dict
    target_path: str
    keys: dict = field(default_factory=dict)
    device: str = "cpu"
    target: Callable[[], TargetModel] | None = None  # the live target model, loaded on first call
    # content hashes (lenbench/scoring/fingerprints.py)
    fingerprints: dict = field(default_factory=dict)

    def rows(self, split: str) -> np.ndarray:
        return np.flatnonzero(self.labels["split"].to_numpy() == split)


def prepare_world(run: RunConfig, need_features: bool, progress: bool = True,
                  needs: list | None = None, generate_only: bool = False,
                  on_labels: Callable[[pd.DataFrame], None] | None = None) -> World | None:
    """Build (or reuse) model, PromptSet, labels and, if asked, features.

    Each stage gets the parts of `run` it reads, no more (tests/test_config_walk.py).
    `generate_only` stops after the generate stage and returns None: a generation worker
    (`generation.worker=i`) only writes its shards, the sweep that follows reads the labels.
    `on_labels` is called with the labels as soon as they exist, before the features: work
    that needs only the labels (the reference simulations) can start beside the target's pass.
    """
    cache = Path(run.paths.cache_dir)
    device = resolve_device(run.device)
    # model.dtype=auto is settled here, so keys and cards name the dtype that ran
    model = replace(run.model, dtype=resolve_dtype(run.model.dtype, device))
    ds, gen = run.dataset, run.generation
    # the PromptSet first: it needs no model, and a file with no usable prompt should fail
    # before minutes of model work
    with timed("promptset"):
        ds_stage, prompts, ds_card = _promptset_stage(cache, ds)
    known = known_lengths(prompts)
    name = world_name(str(ds.name), getattr(ds, "path", None), imported=known is not None)
    if known is not None:  # label import: no target model is loaded, trained or converted
        check_import_needs(str(ds.name), need_features, needs or [])
        with timed("labels"):
            gen_stage, model_key = _import_stage(cache, prompts, known, ds_stage.key, ds, model,
                                                 progress, ds_card)
        target, target_path = None, None
        model_name = _import_settings(ds)[0] or UNNAMED_MODEL
    else:
        with timed("model"):  # found, converted (GGUF) or trained (toy); loaded on first use
            target_path, model_key = resolve_model(model, cache, progress=progress)
        model_name = model.name
        if gen.shipped is None and (shipped := model_world(target_path)) is not None:
            gen = replace(gen, shipped=shipped)  # shipped weights come with their world

        @functools.cache
        def target() -> TargetModel:
            tm = load_target(target_path, model.dtype, device, model.revision)
            # predictors that prompt the model themselves (PIA) render as the generate stage did
            tm.info["chat_template_kwargs"] = dict(getattr(model, "chat_template_kwargs", {}) or {})
            # predictors that derive data from the target (OUTLETS's training cache) keep it here
            tm.key, tm.cache_dir = model_key, str(cache)
            return tm

        with timed("labels"):  # generated, or loaded from a shipped world
            gen_stage = _generate_stage(cache, gen, model, prompts, model_key, ds_stage.key,
                                        target, target_path, progress, device)
    if generate_only:
        return None
    labels = pd.read_parquet(gen_stage.path / "labels.parquet")
    gen_card = json.loads((gen_stage.path / "card.json").read_text())
    report_against_shipped(labels, gen_card, gen.shipped, gen.regenerate)
    if len(labels) == 0:
        raise RuntimeError(f"generation produced no usable rows (see {gen_stage.path}/card.json)")
    warn_censoring(gen_card)
    if need_features:
        check_response_tokens(gen_card)
    if on_labels is not None:
        on_labels(labels)

    features = None
    feat_stage = None
    if need_features and needs and not any(n.forward for n in needs):
        # the steps to score follow from the lengths: no target pass for predictors that run
        # the target themselves (OUTLETS)
        features = StepIndexStore.from_lengths(labels["L"].to_numpy(),
                                              run.features.step_stride)
    elif need_features:
        fc = features_config(run.features, needs or [])
        feat_stage = Stage(cache, "features", asdict(fc), parent=gen_stage.key)
        # timed with the target's load, when the features are the first to need it
        with timed("features"), feat_stage.lock():
            if not feat_stage.done:
                feat_stage = covering_stage(cache, asdict(fc), gen_stage.key) or feat_stage
            if not feat_stage.done:
                with feat_stage.building() as tmp:
                    extract_features(labels, target().model, tmp, fc, progress=progress)
        features = FeatureStore(feat_stage.path)

    split_counts = labels["split"].value_counts().to_dict()
    test = labels[labels["split"] == "test"]
    dataset_info = {"name": name, "key": gen_stage.key,
                    "n_train": int(split_counts.get("train", 0)),
                    "n_val": int(split_counts.get("val", 0)),
                    "n_test": int(split_counts.get("test", 0)),
                    "n_test_prompts": int(test["prompt_id"].nunique()),
                    "mean_L": float(labels["L"].mean()), "card": ds_card,
                    "generation": gen_card}
    model_info = {"name": model_name, "key": model_key, "path": target_path,
                  "source": model_source_summary(target_path) if target_path else None}
    world = World(labels=labels, features=features, dataset=dataset_info, model=model_info,
                  generation_card=gen_card, target_path=target_path, device=device,
                  target=target, fingerprints=data_fingerprints(labels, feat_stage),
                  keys={"promptset": ds_stage.key, "generate": gen_stage.key,
                        "features": None if feat_stage is None else feat_stage.key})
    return world


def data_fingerprints(labels: pd.DataFrame, feat_stage: Stage | None) -> dict:
    """What the results of this world were scored on, by content (not by config)."""
    return {"labels": labels_fingerprint(labels),
            "features": None if feat_stage is None else stage_fingerprint(feat_stage.path)}


# dataset keys read by label import, not by the source (so not in the PromptSet's key either)
LABEL_IMPORT_KEYS = ("model_name", "tokenizer", "max_length")


def _promptset_stage(cache: Path, ds: DatasetConfig) -> tuple[Stage, pd.DataFrame, dict]:
    """Build (or reuse) the PromptSet; a source that yields no usable prompt is a `SourceError`
    naming the drop reasons, raised before any model is built."""
    ds_stage = Stage(cache, "promptset", promptset_key(ds))
    with ds_stage.lock():
        if not ds_stage.done:
            with ds_stage.building() as tmp:
                df, card = build_promptset(
                    source_from_config(ds), dict(ds.split), salt=str(ds.split_salt),
                    min_words=ds.min_words, max_words=ds.max_words,
                    limit=ds.limit or getattr(ds, "n_prompts", None))
                save_promptset(tmp, df, card)
    prompts, card = load_promptset(ds_stage.path)
    log.info("promptset %s: %s", ds_stage.key, card["splits"])
    if len(prompts) == 0:
        first = next((ex[0] for ex in (card.get("examples") or {}).values() if ex), "")
        raise SourceError(f"dataset={ds.name}: no usable prompt among {card['n_read']} "
                          f"rows read; dropped by reason {card['dropped']}"
                          + (f"; first: {first}" if first else "")
                          + f" (every row in {ds_stage.path / DROPPED_FILE})")
    return ds_stage, prompts, card


def model_source_summary(target_path: str) -> dict | None:
    """Where a converted model's weights came from (GGUF file, sha256, package versions)."""
    card = read_card(target_path)
    if card is None:
        return None
    return {k: card.get(k) for k in ("source", "gguf_file", "gguf_sha256", "packages", "dtype",
                                     "architecture", "n_parameters", "chat_template_from")}


UNNAMED_MODEL = "unnamed-model"  # an imported trace whose dataset.model_name is not set


def world_name(preset: str, path: str | None, imported: bool) -> str:
    """An imported trace is named by its file `path` (trace.jsonl -> trace), so two traces
    never share a leaderboard section; a generated world keeps the dataset preset's name."""
    if imported and path:
        name = Path(str(path)).expanduser().name
        for suffix in (".jsonl", ".ndjson", ".json", ".csv", ".parquet"):
            name = name.removesuffix(suffix)
        return name or preset
    return preset


def label_import_cap(run: RunConfig) -> int | None:
    """The length cap of an imported trace (None when labels are generated): the declared
    `dataset.max_length`, else the largest label. Predictors clip to it, so it must never fall
    below a label; an unrelated default such as generation.max_new_tokens would cut them."""
    _, prompts, _ = _promptset_stage(Path(run.paths.cache_dir), run.dataset)
    known = known_lengths(prompts)
    if known is None:
        return None
    declared = _import_settings(run.dataset)[2]
    if declared is not None and int(declared) < known.largest:
        raise ConfigError([(f"dataset.max_length={declared}: below the largest length in the "
                           f"file ({known.largest}); raise it or leave it null (the largest "
                           "label)")])
    return int(declared) if declared is not None else known.largest


def _import_settings(ds: DatasetConfig) -> tuple:
    """(model_name, tokenizer, max_length): the jsonl schema's fields (None where none)."""
    return tuple(getattr(ds, k, None) for k in LABEL_IMPORT_KEYS)


def _import_tokenizer(name: str | None, model: ModelConfig, cache: Path, progress: bool
                      ) -> tuple[str | None, dict | None]:
    """(where to load the tokenizer from, its identity for the stage key), or (None, None).
    `dataset.tokenizer=model` uses the configured model's tokenizer (building or converting that
    model if needed); the tokenizer itself is loaded only when the stage is built."""
    if name is None:
        return None, None
    if name == "model":
        path, key = resolve_model(model, cache, progress=progress)
        return path, {"model": key}
    return str(name), {"tokenizer": str(name)}


def _import_stage(cache: Path, prompts: pd.DataFrame, known, parent: str, ds: DatasetConfig,
                  model: ModelConfig, progress: bool, ds_card: dict) -> tuple[Stage, str]:
    """Label import: the source already knows each prompt's length, so nothing is generated.

    Prompts the file gives no length for are counted, listed in the card and dropped, loudly.
    Returns the stage and the model key of the world (the declared model name, the tokenizer).
    """
    model_name, tokenizer_name, declared = _import_settings(ds)
    path = getattr(ds, "path", None)
    template_kwargs = dict(getattr(model, "chat_template_kwargs", None) or {}) \
        if tokenizer_name == "model" else {}
    tokenizer_path, tok_key = _import_tokenizer(tokenizer_name, model, cache, progress)
    # for `model`, the configured model's key: another model, other prompt ids
    model_key = stable_hash({"model_name": model_name, "tokenizer": tok_key})
    key = {"import": 2, "model_name": model_name, "tokenizer": tok_key,
           "max_length": declared, "chat_template_kwargs": template_kwargs}
    warn_duplicate_lengths(ds_card, path)
    if known.unlabelled:
        log.warning("%d of %d prompts in %s have no length and were dropped (the import card "
                    "lists them)", len(known.unlabelled), len(prompts), path)
    stage = Stage(cache, "import", key, parent=parent)
    with stage.lock():
        if not stage.done:
            with stage.building() as tmp:
                tokenizer = None
                if tokenizer_path is not None:
                    from transformers import AutoTokenizer

                    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
                labelled = prompts[~prompts["prompt_id"].isin(set(known.unlabelled))]
                labels, card = import_labels(labelled, known.lengths, tokenizer=tokenizer,
                                             template_kwargs=template_kwargs,
                                             censored=known.censored)
                texts = prompts.set_index("prompt_id").loc[known.unlabelled, "text"]
                card.update({
                    "n_prompts_unlabelled": len(known.unlabelled),
                    "unlabelled_prompts": "dropped: the file gives them no length",
                    "unlabelled_examples": texts.str.slice(0, 60).tolist()[:20],
                    "n_duplicate_rows_dropped": int((ds_card.get("dropped") or {})
                                                    .get("duplicate") or 0),
                    "model_name": model_name, "tokenizer_key": tok_key,
                    "length_cap": int(declared) if declared is not None else known.largest,
                    "length_cap_from": "dataset.max_length" if declared is not None
                    else "the largest length in the file"})
                labels.to_parquet(tmp / "labels.parquet", index=False)
                (tmp / "card.json").write_text(json.dumps(card, indent=2, default=str))
    return stage, model_key


def generation_stage_config(gen: GenerationConfig, model: ModelConfig, model_key: str) -> dict:
    """The generate stage's cache key config: what changes the labels, nothing that doesn't
    (batch size, worker layout, concurrency and other throughput settings are left out)."""
    key = {"model": model_key, **{k: getattr(gen, k) for k in GENERATION_KEYS}, **label_key(gen)}
    key.update({k: getattr(gen, k) for k in OPTIONAL_GENERATION_KEYS
                if getattr(gen, k) is not None})
    if (penalty := penalty_in_effect(gen.repetition_penalty)) is not None:
        key["repetition_penalty"] = penalty
    if template_kwargs := getattr(model, "chat_template_kwargs", None):  # the toy's has none
        key["chat_template_kwargs"] = dict(template_kwargs)
    if model.source != "toy":  # a hub/local model's key is only its path+revision
        key["dtype"] = model.dtype
    return key


def _generate_stage(cache: Path, gen: GenerationConfig, model: ModelConfig,
                    prompts: pd.DataFrame, model_key: str, parent: str, target,
                    target_path: str, progress: bool, device: str = "cpu") -> Stage:
    """Regenerate every prompt's responses with the target (resumable at shard granularity).

    With `generation.worker=i` (of `generation.workers=N`) this process writes only its own
    shards into the stage's partial folder, without holding the stage lock, so N processes (one
    per GPU, or N SLURM jobs) fill it together; the one that finds every shard on disk merges
    them under the lock. The merge reads shards in shard order, as a one-process run does.
    With `generation.executor=ray` the shards run as Ray tasks instead (ray_executor.py).
    """
    stage_cfg = generation_stage_config(gen, model, model_key)
    backend = backend_name(gen)
    shipped = shipped_world_for(gen.shipped, stage_cfg)
    if shipped is not None and not gen.regenerate:
        stage_cfg = {**stage_cfg, "shipped": shipped.digest}
    stage = Stage(cache, "generate", stage_cfg, parent=parent)
    if stage.done:
        return stage
    store = SampleStore(cache / "samples" / stable_hash(sample_key(stage_cfg)))
    log.info("generate stage: %s (samples kept for reuse in %s)", stage.path, store.folder)
    workers, worker = int(gen.workers or 1), gen.worker
    check_executor(gen.executor, worker)
    job = GenerateJob(prompts, gen, model, target_path, store, shipped, stage_cfg, backend,
                      progress, target, device)

    def run(out_dir: Path, worker_i: int, n_workers: int) -> tuple[pd.DataFrame, dict]:
        if gen.executor == "ray":  # every shard as a Ray task, merged here
            return run_on_ray(job, out_dir, workers)
        return job(out_dir, worker_i, n_workers)

    def write(tmp: Path, labels: pd.DataFrame, card: dict) -> None:
        labels.to_parquet(tmp / "labels.parquet", index=False)
        (tmp / "card.json").write_text(json.dumps(card, indent=2, default=str))

    if worker is None:
        with stage.lock():
            if not stage.done:
                with stage.building(resume=True) as tmp:
                    write(tmp, *run(tmp / "shards", 0, 1))
        return stage
    # a shard worker: no stage lock while generating (the other workers write beside it)
    stage.partial.mkdir(parents=True, exist_ok=True)
    try:
        labels, card = run(stage.partial / "shards", int(worker), workers)
    except ShardsPending as exc:
        log.info("%s", exc)
        return stage
    with stage.lock():  # every shard is on disk: the first worker here merges
        if not stage.done:
            with stage.building(resume=True) as tmp:
                write(tmp, labels, card)
    log.info("generate stage complete: %s", stage.path)
    return stage
