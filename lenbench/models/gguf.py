"""GGUF checkpoints: find one inside an installed package, join chunked files, convert it once.

Real models reach machines without a hub as pip packages holding GGUF files (a whole file, or
chunks spread over several packages). transformers reads GGUF (through the `gguf` package) by
dequantising every tensor, which takes seconds and cannot be saved as is; lenbench converts the
checkpoint once into a plain transformers folder in the model cache and loads that folder with
`from_pretrained` from then on, like any other model. The folder's `lenbench_model_card.json`
records where the weights came from (package and version, GGUF sha256) and what the conversion
did (dtype, chat template, stop tokens, the largest logit difference to the GGUF model).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CARD_FILE = "lenbench_model_card.json"


class ModelSourceError(ValueError):
    """A model preset's files cannot be found; the message says what to install or set."""


@dataclass(frozen=True)
class GGUFParts:
    """The file(s) that make one GGUF checkpoint, in order, and where they came from."""

    paths: tuple[Path, ...]
    packages: dict  # import name -> installed version (empty for a plain file)

    @property
    def name(self) -> str:
        first = self.paths[0].name
        return first.rsplit(".part", 1)[0] if len(self.paths) > 1 else first


def _package_dir(module: str) -> Path | None:
    """Where an installed package lives, found without importing it: weight packages may
    import runtimes (llama.cpp bindings) that lenbench neither needs nor installs."""
    try:
        spec = importlib.util.find_spec(module)
    except ModuleNotFoundError:  # a dotted name whose parent package is missing
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _package_file(spec: str, install_hint: str) -> tuple[Path, str, str]:
    """`module:relative/path` -> (file, module, version), with a clear error when missing."""
    module, _, rel = spec.partition(":")
    folder = _package_dir(module)
    if folder is None:
        raise ModelSourceError(f"the model's weights come from the Python package {module!r}, "
                               f"which is not installed: {install_hint}")
    path = folder / rel
    if not path.is_file():
        raise ModelSourceError(f"{module} is installed but holds no {rel!r} ({path}); "
                               f"reinstall it: {install_hint}")
    return path, module, _version(module)


def _check_packages(files: list[str], install_hint: str) -> None:
    """Every entry well formed, and every package installed: a checkpoint in chunk packages
    names all the missing ones at once, so one install command fixes the run."""
    for spec in files:
        if not spec.partition(":")[2]:
            raise ModelSourceError(f"model.gguf.files entry {spec!r}: write it as "
                                   "'import_name:path/inside/the/package'")
    modules = list(dict.fromkeys(spec.partition(":")[0] for spec in files))
    missing = [m for m in modules if _package_dir(m) is None]
    if len(missing) > 1:
        names = ", ".join(repr(m) for m in missing)
        raise ModelSourceError(f"the model's weights come from the Python packages {names}, "
                               f"which are not installed: {install_hint}")


def _version(module: str) -> str:
    for dist in importlib.metadata.packages_distributions().get(module, []):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def locate_gguf(path: str | None = None, files: Sequence[str] = (),
                install: str | None = None) -> GGUFParts:
    """The GGUF file(s) a model names: `model.path` (a .gguf file), else `model.gguf.files`
    (`module:relative/path` per chunk), `install` saying how to get them when missing."""
    if path:
        p = Path(str(path)).expanduser()
        if not p.is_file():
            raise ModelSourceError(f"model.path={str(path)!r} is not a file")
        return GGUFParts((p.resolve(),), {})
    files = list(files or [])
    if not files:
        raise ModelSourceError("a GGUF model needs model.path=FILE.gguf or model.gguf.files")
    hint = install or "pip install the package named in the model preset"
    _check_packages(files, hint)
    found = [_package_file(f, hint) for f in files]
    return GGUFParts(tuple(p for p, _, _ in found), {m: v for _, m, v in found})


def sha256_of(paths: tuple[Path, ...]) -> str:
    """sha256 of the files' concatenation (the joined checkpoint), read in 1 MiB blocks."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()


def join_parts(paths: tuple[Path, ...], out: Path) -> Path:
    """Concatenate chunk files into one GGUF (transformers reads a single file)."""
    with open(out, "wb") as dst:
        for p in paths:
            with open(p, "rb") as src:
                shutil.copyfileobj(src, dst, 1 << 20)
    return out


def stop_token_ids(tokenizer, stop_strings: list[str]) -> dict[str, list[int]]:
    """Every vocabulary token whose text contains a stop string, per stop string.

    Stops are token-level, so a response's length still counts whole tokens and ends on the
    token that completed the stop (as EOS is counted). A stop string split over two tokens is not
    seen: prefer strings that the tokenizer keeps in one token (e.g. a blank line).
    """
    if not stop_strings:
        return {}
    vocab = tokenizer.get_vocab()
    ids = sorted(vocab.values())
    texts = tokenizer.convert_ids_to_tokens(ids)
    decoded = [tokenizer.convert_tokens_to_string([t]) if t is not None else "" for t in texts]
    return {s: [i for i, text in zip(ids, decoded) if s in text] for s in stop_strings}


def convert_gguf(parts: GGUFParts, out_dir: Path, *, dtype: str = "float32",
                 chat_template: str | None = None, stop_strings: list[str] | None = None,
                 sha256: str | None = None) -> dict:
    """Convert a GGUF checkpoint into a transformers folder `out_dir`; return its card.

    `chat_template` replaces (or, for a base model, supplies) the tokenizer's template;
    `stop_strings` add the tokens that contain them to the generation config's EOS ids, so every
    backend and predictor that reads the model's EOS ids stops there too.
    """
    import gguf
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lenbench.models.chat import eos_token_ids
    from lenbench.models.dtypes import DTYPES

    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    # transformers is given a folder holding only the checkpoint and its absolute path: a file of
    # the same name in the working directory, or tokenizer files beside the GGUF, would
    # otherwise be read instead of the checkpoint's own
    source = (out_dir / "gguf-source").resolve()  # absolute: a relative cache_dir is common
    source.mkdir()
    gguf_path = source / parts.name
    if len(parts.paths) > 1:
        join_parts(parts.paths, gguf_path)
    else:
        gguf_path.symlink_to(parts.paths[0])
    try:
        log.info("converting %s (%s) into %s", parts.name, dtype, out_dir)
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=str(gguf_path))
        model = AutoModelForCausalLM.from_pretrained(source, gguf_file=str(gguf_path),
                                                     dtype=DTYPES[dtype])
        architecture = model.config.model_type
        quant_types = _tensor_types(gguf_path, gguf)
    finally:
        shutil.rmtree(source)
    # The dequantised weights are plain tensors; the GGUF quantizer only blocks saving them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    stops = stop_token_ids(tokenizer, list(stop_strings or []))
    eos = eos_token_ids(model, tokenizer)  # the ids every backend would stop at
    model.generation_config.eos_token_id = sorted(set(eos).union(*map(set, stops.values())))
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)

    probe = torch.tensor([tokenizer("The quick brown fox jumps over the lazy dog.")["input_ids"]])
    with torch.inference_mode():
        before = model(probe).logits
        reloaded = AutoModelForCausalLM.from_pretrained(out_dir, dtype=DTYPES[dtype])
        diff = float((reloaded(probe).logits - before).abs().max())
    card = {
        "source": "gguf",
        "gguf_file": parts.name,
        "gguf_sha256": sha256 or sha256_of(parts.paths),
        "gguf_parts": [p.name for p in parts.paths],
        "gguf_tensor_types": quant_types,
        "packages": parts.packages,
        "architecture": architecture,
        "num_hidden_layers": model.config.num_hidden_layers,
        "hidden_size": model.config.hidden_size,
        "vocab_size": model.config.vocab_size,
        "n_parameters": sum(p.numel() for p in model.parameters()),
        "dtype": dtype,
        "chat_template": tokenizer.chat_template,
        "chat_template_from": "preset" if chat_template is not None else "gguf",
        "stop_strings": {s: ids for s, ids in stops.items()},
        "eos_token_ids": model.generation_config.eos_token_id,
        "reload_max_abs_logit_diff": diff,
        "transformers": transformers.__version__,
        "gguf_package": importlib.metadata.version("gguf"),
        "seconds": round(time.perf_counter() - started, 1),
    }
    (out_dir / CARD_FILE).write_text(json.dumps(card, indent=2))
    return card


def _tensor_types(path: Path, gguf) -> dict[str, int]:
    """How many tensors of each GGML type the file holds (Q4_1, Q8_0, F32, ...)."""
    counts: dict[str, int] = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return counts


def read_card(folder: str | Path) -> dict | None:
    path = Path(folder) / CARD_FILE
    return json.loads(path.read_text()) if path.exists() else None
