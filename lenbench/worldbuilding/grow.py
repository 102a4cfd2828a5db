"""Grow a shipped world chunk by chunk, so that a build longer than one sitting loses nothing.

A world's build can take longer than anyone keeps a machine. Every sample the generate stage makes
is kept in the cache's sample store as its shard finishes; `grow` moves the samples the world
wants and does not ship yet into a new chunk file of the world (`samples-NNN.parquet`, no prompt
text) and updates its card: the files and their sha256, how many of the wanted samples it holds,
and, per chunk, the machine and software that made it. Commit the folder after each call. A
later run (on this machine or another) reads the chunks as known samples and generates only the
rest; when nothing is missing the card says `complete` and records the labels' fingerprint.

    python -m lenbench.worldbuilding.grow --out lenbench/worlds/smollm2_sharegpt_v2
    # with the cap curve's samples (made at a wider cap) cut at the world's cap:
    python -m lenbench.worldbuilding.grow --out lenbench/worlds/smollm2_sharegpt_v2 \\
        --curve 200,8,1536
    # the experiment's transfer set (dataset@transfer), answered with the same settings, into
    # chunks of its own (`samples-transfer-NNN.parquet`) and the card's `transfer` block:
    python -m lenbench.worldbuilding.grow --out lenbench/worlds/smollm2_sharegpt_v2 --transfer

A shipped world is looked up by prompt id, so one folder serves both the world's prompts and its
transfer set's: a run of the experiment generates neither.

A sample's tokens depend only on its prompt, its seed and the sampling settings, not on the cap
beyond its own length: a sample generated with a wider cap, cut at the world's cap (marked
`length` unless it ended on EOS within it), is the sample the world's cap would have made.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from lenbench.configs import RunConfig
from lenbench.configs.dataset import DatasetConfig
from lenbench.configs.generation import GenerationConfig
from lenbench.models.build_info import cpu_description, lenbench_commit, package_versions
from lenbench.scoring.fingerprints import labels_fingerprint
from lenbench.stages import atomic_write_bytes, stable_hash
from lenbench.worlds.pack import CPU_FLAGS, LICENSE, PACKAGES
from lenbench.worlds.sample_store import KnownSample, SampleStore
from lenbench.worlds.shipped import CARD_FILE, file_sha256, sample_files, text_sha256

log = logging.getLogger(__name__)


def cut_at_cap(sample: KnownSample, cap: int) -> KnownSample:
    """The sample a `cap`-token limit makes of one generated under a wider limit."""
    ids = sample.output_ids
    if sample.finish_reason == "stop" and len(ids) <= cap:
        return sample
    return KnownSample(sample.prompt_sha, tuple(ids[:cap]), "length")


def wanted_samples(prompts: pd.DataFrame, fits: list[bool], gen: GenerationConfig
                   ) -> list[tuple[int, int]]:
    """(prompt row, sample index) of every sample the world holds when complete: the generate
    stage's own rule (`n_samples`, and `dense_n_samples` for the first `dense_prompts`
    prompts, of `dense_split` if set, and the `dense_drawn` drawn by hash), over the prompts
    within the prompt-token limit."""
    from lenbench.generation.runner import dense_rows

    dense_n = gen.dense_n_samples
    dense = dense_rows(prompts, fits, int(gen.dense_prompts or 0), dense_n, gen.dense_split,
                       int(gen.dense_drawn or 0))
    return [(i, s) for i in prompts.index if fits[i]
            for s in range(int(dense_n) if i in dense else int(gen.n_samples))]


TRANSFER_PREFIX = "samples-transfer-"  # chunk files of the experiment's transfer set


def is_transfer_file(file: str) -> bool:
    return file.startswith(TRANSFER_PREFIX)


def grow(experiment: str, out: Path, name: str, curve: tuple[int, int, int] | None = None,
         description: str = "", overrides: list[str] | None = None,
         transfer: bool = False) -> dict:
    """Add the samples the world wants and lacks (from the store, or the curve) as a chunk;
    with `transfer`, those of the experiment's transfer set instead."""
    from lenbench.models.chat import render_prompt
    from lenbench.models.loading import resolve_dtype, resolve_model
    from lenbench.pipeline import _promptset_stage, generation_stage_config
    from lenbench.transfer import transfer_run_config
    from lenbench.worldbuilding.cap_curve import compose
    from lenbench.worlds.shipped import sample_key

    run = compose(experiment, overrides)
    if transfer:
        if run.transfer is None:
            raise SystemExit(f"grow --transfer: experiment={experiment} names no transfer set "
                             "(dataset@transfer)")
        if curve:
            raise SystemExit("grow: --curve holds the world's own prompts, not the transfer "
                             "set's; grow them in two calls")
        run = transfer_run_config(run)
    cache = Path(run.paths.cache_dir)
    # float32 on this CPU, as the world's builds ran (the card records it)
    run = replace(run, model=replace(run.model, dtype=resolve_dtype(run.model.dtype, "cpu")))
    model_path, model_key = resolve_model(run.model, cache)
    _, prompts, ps_card = _promptset_stage(cache, run.dataset)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    gen = run.generation
    template_kwargs = dict(getattr(run.model, "chat_template_kwargs", None) or {})
    rendered = [render_prompt(tokenizer, t, template_kwargs) for t in prompts["text"]]
    fits = [len(r) <= gen.max_prompt_tokens for r in rendered]
    key = sample_key(generation_stage_config(gen, run.model, model_key))
    store = SampleStore(cache / "samples" / stable_hash(key))
    known = dict(store.load())
    if curve:
        known.update({k: v for k, v in _curve_samples(run, curve).items() if k not in known})

    out.mkdir(parents=True, exist_ok=True)
    card_path = out / CARD_FILE
    card = json.loads(card_path.read_text()) if card_path.exists() else None
    if card is not None and card["sample_key"] != json.loads(json.dumps(key, default=str)):
        raise SystemExit(f"grow: {out} was built with sample key {card['sample_key']}, this "
                         f"experiment's is {key}; grow another folder")
    # a sample shipped in any chunk is shipped (a transfer prompt may also be a world prompt)
    mine = [f for f in sample_files(card or {}) if is_transfer_file(f) == transfer]
    have = set()
    for f in sample_files(card or {}):
        part = pd.read_parquet(out / f, columns=["prompt_id", "sample_idx"])
        have |= set(zip(part["prompt_id"], part["sample_idx"].astype(int)))

    wanted = wanted_samples(prompts, fits, gen)
    sha_of = {i: _prompt_sha(rendered[i]) for i in prompts.index if fits[i]}
    new = [(i, s) for i, s in wanted if (prompts.at[i, "prompt_id"], s) not in have
           and (hit := known.get((prompts.at[i, "prompt_id"], s))) is not None
           and hit.prompt_sha == sha_of[i]]
    files = dict((card or {}).get("files", {}))
    builds = list((card or {}).get("chunks", []))
    if new:
        chunk = f"{TRANSFER_PREFIX if transfer else 'samples-'}{len(mine):03d}.parquet"
        rows = _rows(prompts, new, known, sha_of)
        rows.to_parquet(out / chunk, index=False, compression="zstd", compression_level=19)
        files[chunk] = {"sha256": file_sha256(out / chunk), "bytes": (out / chunk).stat().st_size}
        builds.append({"file": chunk, "samples": len(rows), "created": dt.date.today().isoformat(),
                       "cpu": cpu_description(CPU_FLAGS), "packages": package_versions(PACKAGES),
                       "lenbench_commit": lenbench_commit(),
                       "with_cap_curve": list(curve) if curve else None})
    # counted over the wanted samples: a chunk may hold samples a later config no longer wants
    shipped_ids = have | {(prompts.at[i, "prompt_id"], s) for i, s in new}
    present = sum((prompts.at[i, "prompt_id"], s) in shipped_ids for i, s in wanted)
    if transfer:
        if card is None:
            raise SystemExit(f"grow --transfer: {out} holds no world yet; grow the world first")
        card = {**card, "files": files, "chunks": builds,
                "transfer": _transfer_block(run, ps_card, prompts, wanted, present, files, out)}
    else:
        card = _card(name, description or (card or {}).get("description", ""), run, key,
                     ps_card, prompts, wanted, present, files, builds, out, experiment,
                     (card or {}).get("transfer"))
    atomic_write_bytes(card_path, (json.dumps(card, indent=2, default=str) + "\n").encode())
    log.info("grow: %s: %d new samples; %d of %d wanted samples shipped (%.1f%%)", out, len(new),
             present, len(wanted), 100 * present / max(len(wanted), 1))
    return card


def _prompt_sha(ids) -> str:
    from lenbench.worlds.sample_store import prompt_tokens_sha

    return prompt_tokens_sha(ids)


def _curve_samples(run: RunConfig, curve: tuple[int, int, int]) -> dict:
    """The cap curve's samples (`curve`: its prompts, samples and cap), cut at the world's cap."""
    from lenbench.worldbuilding.cap_curve import stage_folder

    folder = stage_folder(run, *curve) / "shards"
    shards = sorted(folder.glob("shard-*.parquet"))
    if not shards:
        raise SystemExit(f"grow: no cap-curve samples in {folder}")
    df = pd.concat([pd.read_parquet(p) for p in shards], ignore_index=True)
    cap = int(run.generation.max_new_tokens)
    if cap > curve[2]:
        raise SystemExit(f"grow: the curve's cap {curve[2]} is below the world's {cap}")
    return {(str(p), int(s)): cut_at_cap(KnownSample(_prompt_sha(list(ids)),
                                                     tuple(int(t) for t in out), str(fin)), cap)
            for p, s, ids, out, fin in zip(df["prompt_id"], df["sample_idx"],
                                           df["prompt_token_ids"], df["output_token_ids"],
                                           df["finish_reason"])}


def _rows(prompts: pd.DataFrame, new: list[tuple[int, int]], known: dict,
          sha_of: dict) -> pd.DataFrame:
    meta = [json.loads(m or "{}") for m in prompts["meta"]] if "meta" in prompts else \
        [{}] * len(prompts)
    samples = [known[(prompts.at[i, "prompt_id"], s)] for i, s in new]
    largest = max((max(k.output_ids, default=0) for k in samples), default=0)
    dtype = np.uint16 if largest < 2**16 else np.uint32
    return pd.DataFrame({
        "prompt_id": [str(prompts.at[i, "prompt_id"]) for i, _ in new],
        "record": [str(meta[i].get("id", "")) for i, _ in new],
        "text_sha256": [text_sha256(prompts.at[i, "text"]) for i, _ in new],
        "prompt_sha": [sha_of[i] for i, _ in new],
        "sample_idx": np.asarray([s for _, s in new], dtype=np.int16),
        "split": [str(prompts.at[i, "split"]) for i, _ in new],
        "output_token_ids": [np.asarray(k.output_ids, dtype=dtype) for k in samples],
        "L": np.asarray([len(k.output_ids) for k in samples], dtype=np.int32),
        "finish_reason": [k.finish_reason for k in samples],
    })


def complete_fingerprint(shipped: pd.DataFrame, wanted_ids: list[tuple[str, int]],
                         gen: GenerationConfig) -> str:
    """The labels fingerprint the generate stage gives the complete world: the wanted samples
    in the stage's order (prompts in file order, then sample index), censored rows dropped unless
    `keep_censored` and lengths from `max_length_exclusive` up dropped, as the stage drops them."""
    rows = shipped.assign(sample_idx=shipped["sample_idx"].astype(int)) \
        .drop_duplicates(["prompt_id", "sample_idx"]) \
        .set_index(["prompt_id", "sample_idx"]).loc[wanted_ids].reset_index()
    rows["censored"] = rows["finish_reason"] == "length"
    if not gen.keep_censored:
        rows = rows[~rows["censored"]]
    if gen.max_length_exclusive is not None:
        rows = rows[rows["L"] < int(gen.max_length_exclusive)]
    return labels_fingerprint(rows)


def folder_version(name: str) -> int:
    """A world's version, as its folder is named (`name_v2` holds `name@2`; a plain name is
    version 1)."""
    match = re.search(r"_v(\d+)$", name)
    return int(match.group(1)) if match else 1


def _shipped_rows(files: dict, out: Path, transfer: bool | None = None) -> pd.DataFrame:
    """The rows of the world's chunks (transfer False), the transfer set's (True), or all."""
    columns = ["prompt_id", "sample_idx", "split", "L", "finish_reason"]
    parts = [pd.read_parquet(out / f, columns=columns) for f in sorted(files)
             if f.startswith("samples") and transfer in (None, is_transfer_file(f))]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=columns)


# the dataset settings a card records (`turns`: the ShareGPT schemas' only)
CARD_DATASET_KEYS = ("name", "turns", "min_words", "max_words", "limit", "split", "split_salt")


def _dataset_block(ds: DatasetConfig, ps_card: dict, prompts: pd.DataFrame, wanted) -> dict:
    wanted_prompts = {prompts.at[i, "prompt_id"] for i, _ in wanted}
    return {"source_package": {k: v for k, v in (ps_card.get("source") or {}).items()
                               if k != "path"},  # no path of the building machine
            "settings": {k: getattr(ds, k, None) for k in CARD_DATASET_KEYS},
            "n_prompts": len(wanted_prompts),
            "prompts_per_split": prompts[prompts["prompt_id"].isin(wanted_prompts)]
            .groupby("split").size().to_dict()}


def _stats(shipped: pd.DataFrame) -> dict:
    return {"samples": len(shipped),
            "censored_share": float((shipped["finish_reason"] == "length").mean())
            if len(shipped) else None,
            "mean_L": float(shipped["L"].mean()) if len(shipped) else None,
            "prompts": int(shipped["prompt_id"].nunique())}


def _transfer_block(run: RunConfig, ps_card, prompts, wanted, present, files, out: Path
                    ) -> dict:
    """The card's account of the transfer set: its prompts, how far it has grown, and its
    labels' fingerprint once complete."""
    complete = present >= len(wanted)
    return {"dataset": _dataset_block(run.dataset, ps_card, prompts, wanted),
            "progress": {"wanted_samples": len(wanted), "shipped_samples": present,
                         "complete": complete},
            "stats": _stats(_shipped_rows(files, out, transfer=True)),
            "labels_fingerprint": complete_fingerprint(
                _shipped_rows(files, out), [(prompts.at[i, "prompt_id"], s) for i, s in wanted],
                run.generation) if complete else None}


# the generation settings a card records
CARD_GENERATION_KEYS = ("temperature", "top_p", "repetition_penalty", "max_new_tokens", "seed",
                        "n_samples", "dense_prompts", "dense_n_samples", "dense_split",
                        "keep_censored", "max_prompt_tokens", "backend")
OPTIONAL_CARD_KEYS = ("dense_drawn",)  # recorded where set, so earlier cards stay as they are


def _card(name, description, run: RunConfig, key, ps_card, prompts, wanted, present, files,
          builds, out: Path, experiment: str, transfer: dict | None = None) -> dict:
    shipped = _shipped_rows(files, out, transfer=False)
    every = _shipped_rows(files, out)
    gen = run.generation
    complete = present >= len(wanted)
    card = {
        "name": name, "version": folder_version(name), "description": description,
        "dataset": _dataset_block(run.dataset, ps_card, prompts, wanted),
        "generation": {**{k: getattr(gen, k) for k in CARD_GENERATION_KEYS},
                       **{k: getattr(gen, k) for k in OPTIONAL_CARD_KEYS if getattr(gen, k)}},
        "model_dtype": run.model.dtype,
        "sample_key": key,
        "progress": {"wanted_samples": len(wanted), "shipped_samples": present,
                     "complete": complete},
        "stats": _stats(shipped),
        "files": files, "chunks": builds,
        "labels_fingerprint": complete_fingerprint(  # None while the world grows
            every, [(prompts.at[i, "prompt_id"], s) for i, s in wanted], gen)
        if complete else None,
        "license": LICENSE,
        "rebuild": f"lenbench experiment={experiment} generation.regenerate=true",
    }
    if transfer is not None:
        card["transfer"] = transfer
    return card


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experiment", default="real_smollm2")
    ap.add_argument("--out", type=Path, required=True, help="the world's folder")
    ap.add_argument("--name", default=None, help="default: the folder's name")
    ap.add_argument("--curve", default=None, metavar="PROMPTS,SAMPLES,CAP",
                    help="also take the cap curve's samples (e.g. 200,8,1536), cut at the cap")
    ap.add_argument("--transfer", action="store_true",
                    help="grow the experiment's transfer set (dataset@transfer) instead")
    ap.add_argument("--description", default="")
    ap.add_argument("overrides", nargs="*", help="config overrides, as on the lenbench CLI")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    curve = tuple(int(x) for x in args.curve.split(",")) if args.curve else None
    card = grow(args.experiment, args.out, args.name or args.out.name, curve,
                args.description, args.overrides, args.transfer)
    p = card["transfer"]["progress"] if args.transfer else card["progress"]
    print(f"{args.out}: {p['shipped_samples']} of {p['wanted_samples']} samples"
          f"{' (complete)' if p['complete'] else ''}; files: {', '.join(card['files'])}")


if __name__ == "__main__":
    main()
