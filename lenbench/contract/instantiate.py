"""Building a predictor from its preset, and the preset's arguments checked before that.

Predictor presets carry `_target_` plus constructor arguments, so the class's signature is the
predictor's typed schema: an argument the class does not take, or a value that does not fit a
plain annotation (int, float, bool, str, a list of those, optionally None), is reported naming
the field before any stage runs, instead of failing after generation and features are built.
Annotations beyond these (a tensor, a callable, a nested config) are left to the class itself.
Instantiation lives here, beside the check, so that a predictor wrapping another (conformal)
builds it the way the harness does without reaching up to the command line.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from hydra.utils import get_class

from lenbench.contract.predictor import Predictor

# keys Hydra or lenbench read, not constructor arguments
RESERVED = frozenset({"name", "_target_", "_recursive_", "_convert_", "_partial_", "suite"})
_SCALARS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _fits(value: Any, hint: Any) -> bool | None:
    """Whether `value` fits `hint`; None when the hint is not one this check understands."""
    if hint is Any or hint is inspect.Parameter.empty:
        return None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        verdicts = [_fits(value, a) for a in args]
        if any(v is None for v in verdicts):
            return None
        return any(verdicts)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (list, tuple, Sequence) or hint in (list, tuple):
        if not isinstance(value, list | tuple):
            return False
        inner = [a for a in args if a is not Ellipsis]
        if len(inner) != 1:
            return True
        verdicts = [_fits(v, inner[0]) for v in value]
        return None if any(v is None for v in verdicts) else all(verdicts)
    return None


def _describe(hint: Any) -> str:
    names = [_SCALARS.get(a, getattr(a, "__name__", str(a))) for a in typing.get_args(hint)
             if a is not type(None)] or [_SCALARS.get(hint, getattr(hint, "__name__", str(hint)))]
    nullable = type(None) in typing.get_args(hint)
    return " or ".join(names) + (" or null" if nullable else "")


def predictor_arg_problems(cfg: Mapping[str, Any], field: str = "predictor") -> list[str]:
    """One line per argument `cfg` gives that its `_target_` class would reject or mistype."""
    target = cfg.get("_target_")
    if not isinstance(target, str):
        return []
    try:
        cls = get_class(target)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's to see
        return [f"{field}._target_: cannot import {target!r} ({exc})"]
    signature = inspect.signature(cls.__init__)
    params = {k: p for k, p in signature.parameters.items() if k != "self"}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - unresolvable annotations: check names only
        hints = {}
    problems = []
    for key, value in cfg.items():
        if key in RESERVED:
            continue
        if key not in params:
            if not takes_any:
                problems.append(f"{field}.{key}: not an argument of {cls.__name__} (it takes "
                                f"{', '.join(sorted(params)) or 'none'})")
            continue
        if isinstance(value, Mapping) and "_target_" in value:
            problems += predictor_arg_problems(value, f"{field}.{key}")
            continue
        hint = hints.get(key, inspect.Parameter.empty)
        if _fits(value, hint) is False:
            problems.append(f"{field}.{key}: {value!r} is not {_describe(hint)}")
    return problems


def suite_problems(cfg: Mapping[str, Any]) -> list[str]:
    """A suite (`predictor.suite: [...]`) takes only its member list: any other key would be
    silently ignored, since each member composes its own preset."""
    if "suite" not in cfg:
        return []
    return [f"predictor.{key}: a suite takes only `suite` (its members' arguments are in their "
            f"presets: predictor=<member> predictor.{key}=...)"
            for key in cfg if key not in ("suite", "name")]


def instantiate_predictor(pred_cfg: Mapping[str, Any]) -> Predictor:
    """Build a predictor from its config (`_target_` + constructor arguments)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    args = {k: v for k, v in pred_cfg.items() if k != "name"}
    if "_target_" not in args:
        raise ValueError("a predictor config needs `_target_: module.Class` (see conf/predictor/)")
    try:
        obj = instantiate(args, _convert_="all")
    except InstantiationException as exc:  # surface the predictor's own error, not Hydra's wrapper
        if exc.__cause__ is not None:
            raise exc.__cause__ from None
        raise
    if not isinstance(obj, Predictor):
        raise TypeError(f"{args['_target_']} is not a lenbench.Predictor subclass")
    return obj
