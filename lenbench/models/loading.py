"""Target models: resolve a model config to a folder, then load it the way a hub model loads.

The toy model's shipped weights are used as they are (models/shipped_toy.py), or it is trained
by lenbench and cached like any stage; every model, toy or real, is then loaded with
`AutoTokenizer` / `AutoModelForCausalLM.from_pretrained`, so the code path tested offline is the
one used with real weights.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lenbench.configs.model import GGUFFiles, GGUFModel, ModelConfig, ToyModel
from lenbench.contract.needs import TargetModel
from lenbench.models.dtypes import DTYPES
from lenbench.stages import Stage, stable_hash


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def resolve_dtype(name: str | None, device: str) -> str:
    """`auto`: float32 on CPUs (it decoded ~4x faster than bfloat16 on CPUs without AVX-512 or
    AMX), bfloat16 on GPUs that support it, else float16."""
    if name not in (None, "auto"):
        return str(name)
    if not str(device).startswith("cuda"):
        return "float32"
    return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"


def resolve_model(model: ModelConfig, cache_dir: str | Path, progress: bool = True
                  ) -> tuple[str, str]:
    """Return (folder or hub id, cache key) for a model config, building the toy model if needed."""
    if isinstance(model, ToyModel):
        return _toy_model(model, cache_dir, progress)
    path = getattr(model, "path", None)
    if isinstance(model, GGUFModel) or str(path or "").endswith(".gguf"):
        return _converted_gguf(model, cache_dir)
    if model.source == "hf":
        if not path:
            raise ValueError("model.path is empty: give a local folder or a hub id, e.g. "
                             "model.path=meta-llama/Llama-3.2-1B-Instruct")
        return str(path), stable_hash({"path": str(path), "revision": model.revision})
    raise ValueError(f"model.source={model.source!r} is unknown; use 'toy', 'hf' or 'gguf'")


def _toy_model(model: ToyModel, cache_dir: str | Path, progress: bool) -> tuple[str, str]:
    """The shipped toy weights when they fit the config and `model.retrain` is false
    (models/shipped_toy.py); else the toy model trained here, once per config."""
    from lenbench.models.shipped_toy import retrained_toy_model, shipped_toy_model

    cfg = model.toy_config
    if not model.retrain:
        shipped = shipped_toy_model(cfg)
        if shipped is not None:
            return shipped
    from lenbench.models.toy import build_toy_model

    stage = Stage(cache_dir, "toymodel", {"toy": dict(model.toy)})
    with stage.lock():
        if not stage.done:
            with stage.building() as tmp:
                build_toy_model(tmp, cfg, progress=progress)
    if model.retrain:
        return retrained_toy_model(stage.path, stage.key, cfg)
    return str(stage.path), stage.key


def _converted_gguf(model: ModelConfig, cache_dir: str | Path) -> tuple[str, str]:
    """A GGUF checkpoint converted once into a transformers folder (lenbench/models/gguf.py).

    The key is the checkpoint's sha256 plus what the conversion changes, so the same weights
    from another package version reuse the folder and different weights never do. A `.gguf`
    path given to an hf model preset converts as a GGUF preset with no files would.
    """
    from lenbench.models.gguf import convert_gguf, locate_gguf, sha256_of

    # an hf preset given a .gguf path has no package files, template or stop strings of its own
    files = getattr(model, "gguf", None) or GGUFFiles()
    path = getattr(model, "path", None)
    parts = locate_gguf(path, files.files, files.install)
    sha = sha256_of(parts.paths)
    if files.sha256 and files.sha256 != sha and not path:
        raise ValueError(f"{parts.name}: sha256 {sha} differs from the preset's {files.sha256}; "
                         "the installed package holds other weights than the preset was made "
                         "for")
    # the pipeline settles `auto` per device first; called directly, convert losslessly
    dtype = resolve_dtype(model.dtype, "cpu")
    key = {"gguf_sha256": sha, "dtype": dtype,
           "chat_template": getattr(model, "chat_template", None),
           "stop_strings": list(getattr(model, "stop_strings", None) or [])}
    stage = Stage(cache_dir, "model", key)
    with stage.lock():
        if not stage.done:
            with stage.building() as tmp:
                convert_gguf(parts, tmp, dtype=key["dtype"], chat_template=key["chat_template"],
                             stop_strings=key["stop_strings"], sha256=sha)
    return str(stage.path), stage.key


def model_folder(name_or_path: str, cache_dir: str | Path) -> str:
    """A model folder from a path, or from a preset name (`smollm2-135m-instruct`): presets
    are resolved as `model=<name>` resolves them, converting a GGUF into the cache if needed."""
    if Path(name_or_path).exists():
        return str(name_or_path)
    from lenbench.configs import preset_config

    try:
        preset = preset_config("model", name_or_path)
    except ValueError:
        raise ValueError(f"{name_or_path!r} is neither a folder nor a preset in conf/model/"
                         ) from None
    return resolve_model(preset, cache_dir)[0]


def load_target(path: str, dtype: str = "float32", device: str = "cpu",
                revision: str | None = None) -> TargetModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = resolve_dtype(dtype, device)
    if dtype not in DTYPES:
        raise ValueError(f"model.dtype={dtype!r} is unknown; use one of {sorted(DTYPES)}")
    tokenizer = AutoTokenizer.from_pretrained(path, revision=revision)
    model = AutoModelForCausalLM.from_pretrained(path, revision=revision, dtype=DTYPES[dtype])
    model.to(device).eval()
    info = {"path": path, "revision": revision, "dtype": dtype, "device": device,
            "num_hidden_layers": model.config.num_hidden_layers,
            "hidden_size": model.config.hidden_size,
            "n_parameters": sum(p.numel() for p in model.parameters())}
    return TargetModel(model=model, tokenizer=tokenizer, device=device, info=info)
