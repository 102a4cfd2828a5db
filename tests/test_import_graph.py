"""Imports run one way, down the layers of docs/architecture.md.

No module of lenbench or baselines imports, even lazily inside a function or only for type hints
(under `if TYPE_CHECKING:`), a module that imports it back: types live where they are produced,
so a cycle means a type is in the wrong module. And no module imports one of a higher layer
(`LAYERS` in tests/helpers/layers.py, the one map of the layers; the architecture page states the
same table, and a test holds the two together).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers.layers import LAYERS, ROOT, layer_of

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("lenbench", "baselines")

def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _deepest_module(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


class _Imports(ast.NodeVisitor):
    """Every import of a module, at any depth: inside functions and under `if TYPE_CHECKING:`
    too, since a type-only import still ties the importer to the imported module."""

    def __init__(self, module: str, is_package: bool, modules: dict[str, Path]):
        self.module, self.modules, self.found = module, modules, set()
        self.package = module if is_package else module.rpartition(".")[0]

    def add(self, name: str | None) -> None:
        target = _deepest_module(name, self.modules) if name else None
        if target and target != self.module:
            self.found.add(target)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            base = self.package.split(".")[: len(self.package.split(".")) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        for alias in node.names:  # `from pkg import submodule` imports the submodule
            full = f"{source}.{alias.name}"
            self.add(full if full in self.modules else source)


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    modules = module_files(root, packages)
    graph = {}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py", modules)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
        graph[name] = visitor.found
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward_imports(graph: dict[str, set[str]], layers=LAYERS, root: str = ROOT) -> list[str]:
    """One line per import from a lower layer to a higher one, naming both modules and layers."""
    def layer(module: str) -> int:
        found = layer_of(module, layers, root)
        return -1 if found is None else found  # unplaced modules are reported by `unplaced`

    def where(module: str) -> str:
        return f"{module} (layer {layer(module)}: {layers[layer(module)][0]})"

    return [f"{where(a)} imports {where(b)}, a higher layer"
            for a in sorted(graph) if layer(a) >= 0
            for b in sorted(graph[a]) if layer(b) > layer(a)]


def unplaced(graph: dict[str, set[str]], layers=LAYERS, root: str = ROOT) -> list[str]:
    return sorted(m for m in graph if layer_of(m, layers, root) is None)


def test_no_import_cycles() -> None:
    graph = import_graph(REPO, PACKAGES)
    assert len(graph) > 50  # the walk found the tree
    assert cycles(graph) == []


def test_imports_run_down_the_layers() -> None:
    graph = import_graph(REPO, PACKAGES)
    assert unplaced(graph) == [], "place them in a layer (LAYERS and docs/architecture.md)"
    assert upward_imports(graph) == []


def test_a_cycle_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import b\n")
    (pkg / "a.py").write_text("def f():\n    from pkg.sub.b import g\n")  # a lazy import counts
    (pkg / "sub" / "b.py").write_text("from .. import a\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg import d\n")  # so does a type-only one
    (pkg / "d.py").write_text("import pkg.c\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.c"] == {"pkg.d"} and graph["pkg.d"] == {"pkg.c"}
    assert cycles(graph) == [["pkg.a", "pkg.sub.b"], ["pkg.c", "pkg.d"]]


def test_an_upward_import_is_found() -> None:
    layers = (("bottom", ("pkg", "pkg.low")), ("top", ("pkg.high",)))
    graph = {"pkg": set(), "pkg.low": set(), "pkg.low.deep": {"pkg.high.cli"},
             "pkg.high": {"pkg.low"}, "pkg.high.cli": {"pkg.low.deep"}, "pkg.stray": set()}
    assert upward_imports(graph, layers, root="pkg") == [
        "pkg.low.deep (layer 0: bottom) imports pkg.high.cli (layer 1: top), a higher layer"]
    assert unplaced(graph, layers, root="pkg") == ["pkg.stray"]  # the root places only itself


def test_the_architecture_page_states_the_layers() -> None:
    """docs/architecture.md lists each layer as `| index | name | `modules` ... |`, top first."""
    rows = re.findall(r"^\| (\d+) \| ([^|]+?) \| (.+?) \|$",
                      (REPO / "docs" / "architecture.md").read_text(encoding="utf-8"), re.M)
    stated = sorted((int(i), name, tuple(re.findall(r"`([\w.]+)`", names)))
                    for i, name, names in rows)
    assert stated == [(i, name, names) for i, (name, names) in enumerate(LAYERS)]
