"""The run config goes down the layers, not back up: its walk from `prepare_world`.

A profile hook (`sys.setprofile`) watches a toy `prepare_world` (the default toy world, a few
prompts, features on) and records, in call order, each call of a lenbench or baselines function
that receives the run config or one of its parts as an argument, by identity. The parts are the
`RunConfig`, every dataclass reachable from it through attributes (its groups, their nested
dataclasses, the toy model's config) and every config dataclass (a class of lenbench.configs) a
call returns after receiving one (a `dataclasses.replace` copy, the features stage's superset),
with what is reachable from those.

The module of a recorded call is a room; consecutive calls in one room are a stay; a move from
a room in a lower layer to a room in a higher one (`LAYERS`, tests/helpers/layers.py) is a
climb back up. The config should visit few rooms and seldom climb: a part handed to a lower
layer and back up is a config re-read and reshaped on the way.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.layers import LAYERS, layer_of
from hydra import compose, initialize_config_dir

from lenbench.cli import CONF_DIR, resolved_config, typed_config

MAX_ROOMS = 10
MAX_CLIMBS = 2
PROJECT = ("lenbench", "baselines")


def _config_class(obj: Any) -> bool:
    return dataclasses.is_dataclass(obj) and not isinstance(obj, type) and \
        type(obj).__module__.startswith("lenbench.configs")


def _reachable(obj: Any, into: dict[int, Any]) -> None:
    """`obj` and the dataclasses its attributes hold, by id (kept alive in `into`)."""
    if id(obj) in into or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    into[id(obj)] = obj
    for value in vars(obj).values():
        _reachable(value, into)


def _arguments(frame: types.FrameType) -> list[Any]:
    code = frame.f_code
    n = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:n])
    if code.co_flags & 0x04:  # *args
        names.append(code.co_varnames[n])
        n += 1
    values = [frame.f_locals.get(name) for name in names]
    if code.co_flags & 0x08:  # **kwargs
        values += list((frame.f_locals.get(code.co_varnames[n]) or {}).values())
    star = [v for v in values if isinstance(v, tuple)]  # *args' tuple: its items
    return values + [item for args in star for item in args]


def walk(config: Any, run: Callable[[], Any], project: tuple[str, ...] = PROJECT
         ) -> list[tuple[str, str]]:
    """(module, function) of each project call that receives `config` or one of its parts."""
    parts: dict[int, Any] = {}
    _reachable(config, parts)
    stack: list[bool] = []
    out: list[tuple[str, str]] = []

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            got = any(id(v) in parts for v in _arguments(frame))
            stack.append(got)
            module = frame.f_globals.get("__name__", "")
            if got and module.split(".")[0] in project:
                out.append((module, frame.f_code.co_name))
        elif event == "return" and stack and stack.pop() and _config_class(arg):
            _reachable(arg, parts)  # a copy or a reshape of a part

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return out


def stays(calls: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for module, function in calls:
        if out and out[-1][0] == module:
            out[-1][1].append(function)
        else:
            out.append((module, [function]))
    return out


def climbs(calls: list[tuple[str, str]], layers=LAYERS, root: str = "lenbench") -> int:
    levels = [layer_of(m, layers, root) for m, _ in stays(calls)]
    return sum(1 for a, b in zip(levels, levels[1:])
               if a is not None and b is not None and b > a)


def rooms(calls: list[tuple[str, str]]) -> int:
    return len({m for m, _ in calls})


def describe(calls: list[tuple[str, str]], layers=LAYERS, root: str = "lenbench") -> str:
    lines = [f"{rooms(calls)} rooms, {len(stays(calls))} stays, "
             f"{climbs(calls, layers, root)} climbs back up:"]
    for module, functions in stays(calls):
        lines.append(f"  [{layer_of(module, layers, root)}] {module}: {', '.join(functions)}")
    return "\n".join(lines)


def test_the_config_goes_down_from_prepare_world(tmp_path: Path) -> None:
    from lenbench.pipeline import prepare_world

    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[
            f"paths.cache_dir={tmp_path}", "device=cpu", "progress=false",
            "dataset.n_prompts=6", "generation.n_samples=2", "generation.max_new_tokens=24",
            "features.roles=[mid]", "features.poolings=[last]", "features.step_roles=[mid]"])
    run = typed_config(resolved_config(cfg))
    calls = walk(run, lambda: prepare_world(run, need_features=True, progress=False))
    text = describe(calls)
    visited = {m for m, _ in calls}
    # the walk saw every stage: the PromptSet, the model, the generate stage and the features
    assert {"lenbench.pipeline", "lenbench.data.promptset", "lenbench.models.loading",
            "lenbench.generation.backends", "lenbench.features.extract"} <= visited, text
    assert rooms(calls) <= MAX_ROOMS and climbs(calls) <= MAX_CLIMBS, text


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)  # noqa: S102 - test fixture
    return module


def test_the_walk_counts_rooms_stays_and_climbs() -> None:
    """Made-up modules in made-up layers: a config part handed down, reshaped by a dataclass
    copy, and carried back up twice; what receives no part is not in the walk."""
    layers = (("low", ("pkg.low",)), ("mid", ("pkg.mid",)), ("top", ("pkg.top",)))

    @dataclasses.dataclass
    class Part:
        value: int = 1

    @dataclasses.dataclass
    class Whole:
        part: Part

    low = _module("pkg.low", "def read(part):\n    return part.value\n"
                             "def unrelated(x):\n    return x\n")
    mid = _module("pkg.mid", "import dataclasses\n"
                             "def copy(part):\n    return dataclasses.replace(part, value=2)\n"
                             "def use(part, low):\n    return low.read(part)\n")
    top = _module("pkg.top", "def run(whole, mid, low):\n"
                             "    low.unrelated(3)\n"
                             "    copied = mid.copy(whole.part)\n"  # mid, with a part
                             "    low.read(copied)\n"               # low: the copy is a part
                             "    report(copied)\n"                 # top again: climb 1
                             "    mid.use(copied, low)\n"           # mid, then low
                             "    finish(whole)\n"                  # top again: climb 2
                             "def report(part):\n    return part\n"
                             "def finish(whole):\n    return whole\n")
    whole = Whole(Part())
    Part.__module__ = Whole.__module__ = "lenbench.configs.fake"  # config classes: copies count
    calls = walk(whole, lambda: top.run(whole, mid, low), project=("pkg",))
    assert calls == [("pkg.top", "run"), ("pkg.mid", "copy"), ("pkg.low", "read"),
                     ("pkg.top", "report"), ("pkg.mid", "use"), ("pkg.low", "read"),
                     ("pkg.top", "finish")]
    assert rooms(calls) == 3 and len(stays(calls)) == 7
    assert climbs(calls, layers, root="pkg") == 2
    assert "3 rooms, 7 stays, 2 climbs back up" in describe(calls, layers, root="pkg")
