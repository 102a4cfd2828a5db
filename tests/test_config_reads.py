"""Below the CLI and the pipeline a config travels as typed objects, so no module reads one by key.

The CLI types the composed config once (`RunConfig.from_composed`, lenbench/configs/run.py) and
each stage and loader receives the dataclasses it needs; a dataclass cannot be subscripted, so
this test guards against mappings coming back. The rule, over every module of lenbench and
baselines: no read `X["key"]` or `X.get("key", ...)` where both

- "key" is a string literal naming a key of the run config: a root key (`RunConfig`'s fields)
  or a field of a group's schema (every option of every group, their nested dataclasses and the
  toy model's config included); and
- X is named like a config: its name (a variable's, an attribute's, or the key it was itself
  read with, as in `result["config"]["generation"]` or `(d.get("config") or {}).get("model")`,
  or the mapping `dict(...)` copies) is `cfg`, `conf`, `config` or `settings`, alone or as a
  word of a snake_case name (`gen_cfg`, `model_config`), or one of the short names the
  dict-era code gave config groups (`ds`, `gen`, `g`).

Both, because results records are read by key with the same words (`result["model"]["name"]`)
and so is a model's own config.json (`config.get("architectures")`); neither is a run config.
A config renamed to something else escapes the name condition: the walk of the config
(tests/test_config_walk.py) watches what actually receives it.

Exempt are the modules that compose, check and type the config: `lenbench.cli`,
`lenbench.pipeline`, `lenbench.validate` (which checks the raw composed mapping, before it is
typed, so it can name a bad key) and `lenbench.configs` (which types it). `STORED` lists, with
the reason, the modules that read records earlier runs wrote (of any protocol version, so not
typed by today's schemas); each must still have such a read, so the list does not go stale.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from lenbench.configs import SCHEMAS, RunConfig
from lenbench.configs.model import GGUFFiles, ToyModelConfig

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("lenbench", "baselines")
EXEMPT = ("lenbench.cli", "lenbench.pipeline", "lenbench.validate", "lenbench.configs")
STORED = {
    "lenbench.generation.label_counts": "the generation card a stage or a result recorded",
    "lenbench.leaderboard.document": "the shipped world a result's config recorded",
    "lenbench.leaderboard.provenance": "the generation card a result recorded",
    "lenbench.leaderboard.scheduling": "the sim settings a result's scheduling block recorded",
    "lenbench.leaderboard.scheduling_scores": "the class thresholds a scheduling block recorded",
    "lenbench.leaderboard.transfer": "the two prompt sets' settings a result's config recorded",
    "lenbench.leaderboard.world_names": "the shipped world a result's config recorded",
    "lenbench.rescore_scheduling": "the cache folder a stored result's config recorded",
    "lenbench.results.rescore": "the cap and eval settings a stored result's config recorded",
    "lenbench.sim.record": "the sim settings of a stored scheduling block, rescored",
    "lenbench.worlds.pack": "the generation settings a generate stage's card recorded",
}
CONFIG_NAME = re.compile(r"(^|_)(cfg|conf|config|settings)(_|$)|^(ds|gen|g)$")


def run_config_keys() -> set[str]:
    """Every key a composed run config can hold, at any depth."""
    classes = [RunConfig, GGUFFiles, ToyModelConfig,
               *(schema for options in SCHEMAS.values() for schema in options.values())]
    return {f.name for cls in classes for f in dataclasses.fields(cls)}


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _read(node: ast.AST) -> tuple[ast.AST, str] | None:
    """(receiver, key) of `X["key"]` (a load) or `X.get("key", ...)`, else None."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        key = _literal(node.slice)
        return None if key is None else (node.value, key)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" and node.args:
        key = _literal(node.args[0])
        return None if key is None else (node.func.value, key)
    return None


def receiver_name(node: ast.AST) -> str | None:
    """The name a read's receiver goes by (see the module docstring)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.BoolOp):  # `(d.get("config") or {})`
        return receiver_name(node.values[0])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "dict" and node.args:  # `dict(cfg["model"])`
        return receiver_name(node.args[0])
    read = _read(node)
    return None if read is None else read[1]


def config_reads(source: str, keys: set[str]) -> list[str]:
    """`line: code` of each read the rule forbids in `source`."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = []
    for node in ast.walk(tree):
        read = _read(node)
        if read is None or read[1] not in keys:
            continue
        name = receiver_name(read[0])
        if name is not None and CONFIG_NAME.search(name):
            out.append(f"{node.lineno}: {lines[node.lineno - 1].strip()}")
    return out


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _exempt(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in EXEMPT)


def test_no_module_below_the_cli_and_the_pipeline_reads_a_config_by_key() -> None:
    keys = run_config_keys()
    found = {m: config_reads(p.read_text(encoding="utf-8"), keys)
             for m, p in _modules().items() if not _exempt(m)}
    bad = {m: reads for m, reads in found.items() if reads and m not in STORED}
    assert not bad, "read the typed parts instead (RunConfig, lenbench/configs/):\n" + "\n".join(
        f"{m}:{line}" for m, reads in bad.items() for line in reads)
    stale = sorted(m for m in STORED if not found.get(m))
    assert not stale, f"STORED lists modules that read no stored config any more: {stale}"


def test_the_rule_tells_config_reads_from_record_reads() -> None:
    keys = run_config_keys()
    assert {"generation", "max_new_tokens", "toy", "files", "n_layers", "roles"} <= keys
    flagged = """
cfg["generation"]["max_new_tokens"]
gen_cfg.get("max_new_tokens")
model_config["toy"]
dict(cfg["model"]).get("revision")
ds.get("path")
self.cfg.get("seed")
result["config"]["generation"]
(result.get("config") or {}).get("eval")
"""
    kept = """
result["model"]["name"]
config.get("architectures")
card.get("sample_key")
cfg[key]
cfg["generation"] = {}
predictor_cfg.get("_target_")
world.dataset["name"]
"""
    for line in flagged.strip().splitlines():  # one read each (the first of a chain)
        assert len(config_reads(line, keys)) == 1, line
    assert config_reads(kept, keys) == []
