"""Publish the toy model's weights: train the default toy config, then write the shipped folder.

    python -m lenbench.models.publish_toy --cache /tmp/toy-build

Trains `model=toy` (the `model.toy` block of conf/model/toy.yaml) with one torch thread, as the
default run does, or reuses the cache's earlier build of it, then copies the model's files into
`--out` (default: the shipped folder) beside their card, `lenbench_model_card.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import shutil
from pathlib import Path

from lenbench.models.build_info import cpu_description, lenbench_commit, package_versions
from lenbench.models.gguf import CARD_FILE
from lenbench.models.shipped_toy import SHIPPED_TOY_DIR, file_sha256

# what `build_toy_model` saves: the weights, the tokenizer, the configs and the training summary
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "chat_template.jinja", "toy_build.json")
PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "numpy")
CPU_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
LICENSE = ("Trained by lenbench on its own synthetic toyworld corpus (lenbench/data/toyworld.py); "
           "no third-party data or weights went into it. Released with lenbench, under the same "
           "terms as its code.")


def publish(trained: Path, out: Path, toy_config: dict, threads: int) -> dict:
    """Copy a trained toy model's files into `out` and write their card; return the card."""
    import json

    from lenbench.stages import atomic_write_bytes

    out.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        shutil.copyfile(trained / name, out / name)
    build = json.loads((trained / "toy_build.json").read_text())
    config = json.loads((trained / "config.json").read_text())
    card = {
        "name": "toy", "world": "toyworld", "version": 1, "source": "toy (shipped weights)",
        "description": "The toy world's target model: a byte-level BPE tokenizer and a small "
                       "Llama trained by lenbench on toyworld (lenbench/models/toy.py).",
        "created": dt.date.today().isoformat(),
        "architecture": (config.get("architectures") or [None])[0],
        "n_parameters": build["n_params"], "dtype": "float32",
        "toy_config": toy_config,
        "training": {k: build[k] for k in ("initial_train_loss", "final_train_loss",
                                           "n_train_rows", "seconds")},
        "packages": package_versions(PACKAGES),
        "build": {"cpu": cpu_description(CPU_FLAGS), "threads": threads,
                  "lenbench_commit": lenbench_commit(),
                  "command": "python -m lenbench.models.publish_toy --cache DIR"},
        "files": {name: {"sha256": file_sha256(out / name), "bytes": (out / name).stat().st_size}
                  for name in MODEL_FILES},
        "license": LICENSE,
        "rebuild": "lenbench model.retrain=true (trains here and says whether the weights "
                   "equal these)",
    }
    atomic_write_bytes(out / CARD_FILE, (json.dumps(card, indent=2) + "\n").encode())
    return card


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, required=True, help="where the model is trained")
    parser.add_argument("--out", type=Path, default=SHIPPED_TOY_DIR, help="the shipped folder")
    parser.add_argument("--threads", type=int, default=1, help="torch threads for training")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")

    from dataclasses import replace

    from lenbench.configs import preset_config
    from lenbench.models.loading import resolve_model
    from lenbench.runtime.process import configure_threads

    configure_threads(args.threads)
    model = replace(preset_config("model", "toy"), retrain=True)
    folder, _ = resolve_model(model, args.cache, progress=False)
    card = publish(Path(folder), args.out, model.toy_config.to_dict(), args.threads)
    size = sum(f["bytes"] for f in card["files"].values())
    print(f"{args.out}: {len(card['files'])} files, {size:,} bytes, weights sha256 "
          f"{card['files']['model.safetensors']['sha256'][:16]}")


if __name__ == "__main__":
    main()
