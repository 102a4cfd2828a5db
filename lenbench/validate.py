"""Check a run's whole config before any expensive stage, so that a typo costs seconds, not a model.

`config_problems` returns one line per problem, each naming the field and what it accepts; the
CLI prints them and exits with status 2. Only what can be checked cheaply is checked here (types,
ranges, choices, files that must exist, be non-empty and start to parse); rows inside a file are
the sources' business, which count every bad one.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MISSING = object()

# field -> (smallest allowed value, may it be null)
INTEGERS: dict[str, tuple[int | None, bool]] = {
    "seed": (None, False),
    "threads": (1, True),
    "dataset.limit": (1, True),
    "dataset.n_prompts": (1, False),
    "dataset.min_words": (0, False),
    "dataset.max_words": (1, True),
    "dataset.seed": (None, False),
    "dataset.max_length": (1, True),
    "generation.n_samples": (1, False),
    "generation.max_new_tokens": (1, False),
    "generation.batch_size": (1, True),  # null only where the backend batches (_choice_problems)
    "generation.shard_prompts": (1, False),
    "generation.max_prompt_tokens": (1, True),
    "generation.max_length_exclusive": (2, True),
    "generation.workers": (1, False),
    "generation.ray_max_retries": (0, False),
    "generation.seed": (None, False),
    # server backends (openai, llamacpp)
    "generation.slots": (1, True),
    "generation.threads": (1, True),
    "generation.ctx_size": (1, True),
    "generation.concurrency": (1, True),
    "generation.probe_max_tokens": (1, True),
    "features.step_stride": (1, False),
    "features.batch_tokens": (1, False),
    "eval.n_boot": (0, False),
    "eval.progress_bins": (1, False),
}
# field -> (low, high, low inclusive, high inclusive)
NUMBERS: dict[str, tuple[float, float, bool, bool]] = {
    "generation.temperature": (0.0, float("inf"), True, False),
    "generation.top_p": (0.0, 1.0, False, True),
    "generation.repetition_penalty": (0.0, float("inf"), False, False),
    "eval.ci": (0.0, 1.0, False, False),
}
TEXTS = ("dataset.model_name", "dataset.tokenizer")  # text or null
BOOLEANS = ("progress", "generation.keep_censored", "dataset.strict", "eval.noise_floor",
            "eval.raise_on_error", "sim.enabled")
DEVICE = re.compile(r"^(auto|cpu|cuda|cuda:\d+|mps)$")


class ConfigError(ValueError):
    """A config that cannot run; `problems` holds one line per field."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


def _get(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _numeric_problems(cfg: Mapping[str, Any]) -> list[str]:
    out = []
    for field, (low, nullable) in INTEGERS.items():
        value = _get(cfg, field)
        if value is MISSING or (value is None and nullable):
            continue
        need = "an integer" + (f" >= {low}" if low is not None else "") + \
            (" (or null)" if nullable else "")
        if not _is_int(value) or (low is not None and value < low):
            out.append(f"{field}={value!r}: must be {need}")
    for field, (low, high, low_in, high_in) in NUMBERS.items():
        value = _get(cfg, field)
        if value is MISSING or value is None:  # null where the schema allows it (typed there)
            continue
        ok = _is_number(value) and (value >= low if low_in else value > low) and \
            (value <= high if high_in else value < high)
        if not ok:
            left, right = "[" if low_in else "(", "]" if high_in else ")"
            out.append(f"{field}={value!r}: must be a number in {left}{low:g}, {high:g}{right}")
    for field in TEXTS:
        value = _get(cfg, field)
        if value not in (MISSING, None) and not (isinstance(value, str) and value.strip()):
            out.append(f"{field}={value!r}: must be a non-empty name (or null)")
    for field in BOOLEANS:
        value = _get(cfg, field)
        if value is not MISSING and not isinstance(value, bool):
            out.append(f"{field}={value!r}: must be true or false")
    return out


def _dataset_problems(ds: Mapping[str, Any]) -> list[str]:
    from lenbench.data.promptset import SOURCES, SPLITS
    from lenbench.data.sources.reading import READERS

    out = []
    if ds.get("source") not in SOURCES:
        out.append(f"dataset.source={ds.get('source')!r}: unknown; use one of {sorted(SOURCES)}")
    if ds.get("reader") is not None and ds["reader"] not in READERS:
        out.append(f"dataset.reader={ds['reader']!r}: use one of {list(READERS)}")
    split = ds.get("split")
    if split is not None:
        fractions = dict(split) if isinstance(split, Mapping) else None
        ok = (fractions is not None and set(fractions) <= set(SPLITS)
              and all(_is_number(v) and v >= 0 for v in fractions.values())
              and abs(sum(fractions.values()) - 1.0) < 1e-6)
        if not ok:
            out.append(f"dataset.split={split!r}: fractions for {list(SPLITS)}, each >= 0, "
                       "summing to 1")
    lo, hi = ds.get("min_words"), ds.get("max_words")
    if _is_int(lo) and _is_int(hi) and 1 <= hi < lo:
        out.append(f"dataset.max_words={hi}: must be >= dataset.min_words={lo}")
    if ds.get("path") is not None:
        out += _data_path_problems("dataset.path", Path(str(ds["path"])).expanduser())
    return out


def _data_path_problems(field: str, path: Path) -> list[str]:
    """The file exists, is not empty, and its first record starts to parse."""
    if not path.exists():
        return [f"{field}={str(path)!r}: no such file or folder"]
    if path.is_dir():
        if not any(p.is_file() for p in path.rglob("*")):
            return [f"{field}={str(path)!r}: the folder holds no files"]
        return []
    with path.open("rb") as f:
        head = f.read(1 << 16)
    if not head.strip():
        return [f"{field}={str(path)!r}: the file is empty"]
    if path.suffix in (".jsonl", ".ndjson"):
        return _jsonl_head_problems(field, path, head)
    elif path.suffix == ".json":
        start = head.lstrip(b"\xef\xbb\xbf \t\r\n")[:1]
        if start not in (b"[", b"{"):
            return [f"{field}={str(path)!r}: not JSON (it should start with '[' or '{{')"]
    return []


def _jsonl_head_problems(field: str, path: Path, head: bytes) -> list[str]:
    """A JSON Lines file is refused only when none of its first complete lines is a JSON object:
    one bad line among good ones is the source's business (a counted bad row), not a config
    error; a file in another format altogether (CSV named .jsonl) fails here, in seconds."""
    lines = [ln for ln in head.removeprefix(b"\xef\xbb\xbf").splitlines() if ln.strip()]
    if len(head) == 1 << 16 and lines:
        lines = lines[:-1]  # the last line may be cut off by the 64 KiB read
    if not lines:
        return []
    problems = []
    for ln in lines:
        try:
            obj = json.loads(ln)
        except (UnicodeDecodeError, RecursionError, ValueError) as exc:  # JSONDecodeError too
            problems.append(f"not JSON ({exc})")
            continue
        if isinstance(obj, dict):
            return []
        problems.append(f"a JSON {type(obj).__name__}")
    return [(f"{field}={str(path)!r}: line 1 is {problems[0]}, and none of the first "
             f"{len(lines)} lines is a JSON object; expected one JSON object per line")]


def _model_problems(model: Mapping[str, Any]) -> list[str]:
    if model.get("source") == "toy":  # the toy block's keys are ToyModelConfig's fields
        from lenbench.configs.model import ToyModelConfig

        try:
            ToyModelConfig.from_overrides(dict(model.get("toy") or {}))
        except (TypeError, ValueError) as exc:
            return [str(exc)]
        return []
    path = model.get("path")
    if model.get("source") != "hf" or not isinstance(path, str):
        return []
    local = path.endswith(".gguf") or path.startswith(("/", "./", "../", "~"))
    if local and not Path(path).expanduser().exists():
        return [f"model.path={path!r}: no such file or folder (a hub id looks like org/name)"]
    return []


def _choice_problems(cfg: Mapping[str, Any]) -> list[str]:
    from lenbench.configs.generation import EXECUTORS
    from lenbench.contract.features import POOLINGS, ROLES, STEP_POOLINGS
    from lenbench.generation.backends import BACKENDS
    from lenbench.generation.openai_backend import LENGTH_SOURCES

    out = []
    device = _get(cfg, "device")
    if device is not MISSING and not (isinstance(device, str) and DEVICE.match(device)):
        out.append(f"device={device!r}: use auto, cpu, cuda or cuda:N")
    backend = _get(cfg, "generation.backend")
    if backend is not MISSING and backend not in BACKENDS:
        out.append(f"generation.backend={backend!r}: use one of {list(BACKENDS)}")
    # Null is the server backends' own default (vllm, llamacpp: they batch their requests
    # themselves and never read it), so `generation=llamacpp` runs as it composes; the hf
    # decoder alone needs a number of rows.
    if backend in (MISSING, "hf") and _get(cfg, "generation.batch_size") is None:
        out.append("generation.batch_size=None: the hf backend needs an integer >= 1 (rows "
                   "decoded together)")
    executor = _get(cfg, "generation.executor")
    if executor not in (MISSING, *EXECUTORS):
        out.append(f"generation.executor={executor!r}: use one of {list(EXECUTORS)}")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        out.append("generation.executor=ray needs Ray: pip install lenbench[ray]")
    source = _get(cfg, "generation.length_source")
    if source not in (MISSING, None) and source not in LENGTH_SOURCES:
        out.append(f"generation.length_source={source!r}: use one of {list(LENGTH_SOURCES)}")
    for field, allowed in (("features.roles", ROLES), ("features.step_roles", ROLES),
                           ("features.poolings", POOLINGS),
                           ("features.step_poolings", STEP_POOLINGS)):
        values = _get(cfg, field)
        if values is MISSING:
            continue
        if not isinstance(values, list | tuple):
            out.append(f"{field}={values!r}: must be a list drawn from {list(allowed)}")
            continue
        bad = [v for v in values if v not in allowed]
        if bad:
            out.append(f"{field}: unknown {bad}; use names from {list(allowed)}")
    workers, worker = _get(cfg, "generation.workers"), _get(cfg, "generation.worker")
    if _is_int(workers) and worker not in (MISSING, None) and \
            not (_is_int(worker) and 0 <= worker < workers):
        out.append(f"generation.worker={worker!r}: must be null or 0..{workers - 1} "
                   f"(generation.workers={workers})")
    return out


def _sim_problems(sim: Any) -> list[str]:
    if not isinstance(sim, Mapping) or not sim.get("enabled", False):
        return []
    from lenbench.sim import SimConfig

    try:
        SimConfig.from_dict(sim)
    except (KeyError, ValueError, TypeError) as exc:
        message = exc.args[0] if exc.args else str(exc)
        return [f"sim: {message}"]
    return []


def unknown_key_line(field: str, where: str, known: list[str] | None) -> str:
    """The line for `field`, a key that `where` (a dotted node, "" for the root) does not have:
    the closest key it has, else all of them."""
    import difflib

    name = field.rpartition(".")[2]
    if not known:
        return f"{field}: not a key of {where or 'the config'}"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    hint = f"did you mean {where + '.' if where else ''}{close[0]}?" if close else \
        f"it has {', '.join(sorted(known))}"
    return f"{field}: not a key of {where or 'the config'} ({hint})"


def unknown_key_problems(cfg: Any, where: str = "") -> list[str]:
    """One line per key of a composed config (a DictConfig) that its node's schema does not
    know, naming the closest key the schema has: a key appended on the command line
    (`+generation.temprature=0.5`) would otherwise run the whole suite with the typo stored.
    Nodes without a schema (a predictor's arguments, `model.toy`) are checked elsewhere."""
    import dataclasses

    from omegaconf import DictConfig, OmegaConf

    if not isinstance(cfg, DictConfig) or cfg._is_none() or cfg._is_missing():
        return []
    schema = OmegaConf.get_type(cfg)
    known = [f.name for f in dataclasses.fields(schema)] \
        if schema is not None and dataclasses.is_dataclass(schema) else None
    out = []
    for key in cfg:
        field = f"{where}.{key}" if where else str(key)
        if known is not None and key not in known:
            out.append(unknown_key_line(field, where, known))
            continue
        node = cfg._get_node(key)
        if isinstance(node, DictConfig):
            out += unknown_key_problems(node, field)
    return out


def config_problems(cfg: Mapping[str, Any]) -> list[str]:
    """Every problem found in a resolved run config, one line each (empty when it can run)."""
    problems = _numeric_problems(cfg) + _choice_problems(cfg)
    if isinstance(cfg.get("dataset"), Mapping):
        problems += _dataset_problems(cfg["dataset"])
    if isinstance(cfg.get("model"), Mapping):
        problems += _model_problems(cfg["model"])
    problems += _sim_problems(cfg.get("sim"))
    return problems


def check_config(cfg: Mapping[str, Any]) -> None:
    """Raise `ConfigError` listing every problem, or return quietly."""
    problems = config_problems(cfg)
    if problems:
        raise ConfigError(problems)
