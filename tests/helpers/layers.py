"""The layers of docs/architecture.md, bottom first: the import-graph test checks imports against
them (tests/test_import_graph.py), and the config's walk counts its climbs by them
(tests/test_config_walk.py)."""

from __future__ import annotations

# The layers, bottom first: a module may import its own layer and those below, never one above.
# A module is in the layer of the longest name listed here that is the module itself or a package
# holding it; `lenbench` (the package's front door: the contract's names and the config schemas'
# registration) is placed by its exact name only, so every other module must be listed.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("contract", ("lenbench.contract", "lenbench.testing")),
    ("plumbing", ("lenbench.runtime", "lenbench.heads", "lenbench.stages")),
    ("data and scoring", ("lenbench", "lenbench.configs", "lenbench.data", "lenbench.scoring",
                          "lenbench.sim")),
    ("models", ("lenbench.models", "lenbench.worlds")),
    ("generation and features", ("lenbench.generation", "lenbench.features")),
    ("results and predictors", ("lenbench.results", "lenbench.outlets", "baselines")),
    ("runs", ("lenbench.evaluate", "lenbench.pipeline", "lenbench.transfer", "lenbench.validate",
              "lenbench.world_checks", "lenbench.leaderboard", "lenbench.rescore_scheduling",
              "lenbench.worldbuilding")),
    ("command line", ("lenbench.cli",)),
)
ROOT = "lenbench"


def layer_of(module: str, layers=LAYERS, root: str = ROOT) -> int | None:
    """The index in `layers` of the module's layer; None when no entry places it."""
    place = {name: i for i, (_, names) in enumerate(layers) for name in names}
    if module == root:
        return place.get(root)
    name = module
    while name and name != root:
        if name in place:
            return place[name]
        name = name.rpartition(".")[0]
    return None
