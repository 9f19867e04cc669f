"""The import contract: every module imports only its own layer and the layers below it.

Layers, bottom to top (``dpfed/__init__.py``): core < data < algorithms < federation < protos <
party | coordinator (peers that never import each other) < simulation < cli. Core, data and
algorithms import neither grpc nor ray. Every ``import`` statement counts, including the ones
inside functions (a lazy import is still a dependency). Two more rules hold across the project's
modules: no import cycle (every import counts here too, lazy and ``TYPE_CHECKING`` ones included:
a cycle names its modules), and no underscore-private name of one module used by another (``from m
import _x`` or ``m._x``; tests may still reach private names). Each checker is tested on planted
cases, so this test can fail.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dpfed", "protos", "party", "coordinator")

#: (prefix, rank, name); the longest matching prefix wins.
LAYERS = [
    ("dpfed.core", 1, "core"),
    ("dpfed.data", 2, "data"),
    ("dpfed.algorithms", 3, "algorithms"),
    ("dpfed.federation", 4, "federation"),
    ("protos", 5, "protos"),
    ("party", 6, "party"),
    ("coordinator", 6, "coordinator"),
    ("dpfed.simulation", 7, "simulation"),
    ("dpfed.stats", 7, "simulation"),  # the statistics API: one-party tools and the federated run
    ("dpfed.cli", 8, "cli"),
]
#: Third-party packages a layer at or below this rank must not import.
FORBIDDEN_BELOW = {"grpc": 3, "ray": 3}


def layer_of(module: str) -> tuple[int, str] | None:
    best = None
    for prefix, rank, name in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, rank, name)
    return None if best is None else (best[1], best[2])


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imported_modules(tree: ast.AST, this: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the tree, relative imports resolved."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = this.split(".")
                base = base if is_package else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            # "from dpfed import accounting" imports the submodule dpfed.accounting
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names if layer_of(f"{mod}.{a.name}")]
    return out


def violations(root: Path) -> list[str]:
    found = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            this = module_name(path, root)
            mine = layer_of(this)
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, target in imported_modules(tree, this, path.name == "__init__.py"):
                where = f"{path.relative_to(root)}:{line}: {this} imports {target}"
                top = target.split(".")[0]
                if mine is not None and top in FORBIDDEN_BELOW and mine[0] <= FORBIDDEN_BELOW[top]:
                    found.append(f"{where} ({mine[1]} must not import {top})")
                theirs = layer_of(target)
                if theirs is None:
                    if this == "dpfed" and top == "dpfed" and target != "dpfed":
                        found.append(f"{where} (the root package imports no layer)")
                    continue
                if mine is None:  # the root package 'dpfed'
                    found.append(f"{where} (the root package imports no layer)")
                elif theirs[0] > mine[0]:
                    found.append(f"{where} ({mine[1]} is below {theirs[1]})")
                elif theirs[0] == mine[0] and theirs[1] != mine[1]:
                    found.append(f"{where} ({mine[1]} and {theirs[1]} are peers and must not import each other)")
    return found


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the project by dotted name (packages under their own name)."""
    return {module_name(path, root): path for pkg in PACKAGES for path in sorted((root / pkg).rglob("*.py"))}


def _resolve(node: ast.ImportFrom, this: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = this.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports. ``from p import m`` with ``p.m`` a module points at ``p.m``
    (not at the package ``p``); any other ``from p import x`` points at ``p``; ``import a.b`` at ``a.b``."""
    modules = project_modules(root)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for this, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mod = _resolve(node, this, path.name == "__init__.py")
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules]
                targets = subs + ([mod] if len(subs) < len(node.names) else [])
            graph[this].update(t for t in targets if t in modules and t != this)
    return graph


def import_cycles(root: Path) -> list[str]:
    """Every strongly connected set of two or more modules of the import graph (Tarjan), as one line each
    naming its modules and one cycle through them."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[str] = []

    def visit(v: str) -> None:  # recursion depth is bounded by the number of modules (a few hundred)
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(f"import cycle among {', '.join(sorted(scc))}: {' -> '.join(_one_cycle(graph, set(scc)))}")

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _one_cycle(graph: dict[str, set[str]], scc: set[str]) -> list[str]:
    """One cycle through the smallest module of a strongly connected set (breadth-first, shortest)."""
    start = min(scc)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & scc):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return path[::-1] + [start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def private_imports(root: Path) -> list[str]:
    """Every use of an underscore-private name (not a dunder) of one project module by another:
    ``from m import _x`` and ``m._x`` where ``m`` names an imported project module."""
    modules = project_modules(root)
    found = []
    for this, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> project module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in modules:
                        aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                mod = _resolve(node, this, path.name == "__init__.py")
                for a in node.names:
                    full = f"{mod}.{a.name}"
                    if full in modules:
                        aliases[a.asname or a.name] = full
                    elif mod in modules and mod != this and _private(a.name):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {this} imports {a.name} from {mod}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                target = _dotted(node.value)
                base = aliases.get(target.split(".")[0]) if target else None
                full = base + target[len(target.split(".")[0]):] if base else None
                if full in modules and full != this:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {this} uses {full}.{node.attr}")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def test_every_import_points_down() -> None:
    assert violations(ROOT) == []


def test_no_import_cycles() -> None:
    assert import_cycles(ROOT) == []


def test_no_private_name_crosses_a_module() -> None:
    assert private_imports(ROOT) == []


def _plant(tmp_path: Path, module: str, text: str) -> None:
    for pkg in PACKAGES:
        (tmp_path / pkg).mkdir(exist_ok=True)
    path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("module, text, expect", [
    ("dpfed.core.rng", "from dpfed.cli import main\n", "core is below cli"),
    ("dpfed.core.samplers", "def f():\n    from dpfed.algorithms import lvq\n", "core is below algorithms"),
    ("dpfed.data.schema", "import grpc\n", "data must not import grpc"),
    ("dpfed.algorithms.lvq", "import ray\n", "algorithms must not import ray"),
    ("dpfed.algorithms.lvq", "from ..federation import session\n", "algorithms is below federation"),
    ("party.config", "from coordinator.config import ConfigError\n", "peers"),
    ("dpfed.federation.tls", "from protos import codec\n", "federation is below protos"),
    ("dpfed.core.ledger", "from dpfed import datasets as d\nfrom dpfed.data import schema\n", "core is below data"),
])
def test_checker_catches_a_planted_upward_import(tmp_path: Path, module: str, text: str, expect: str) -> None:
    _plant(tmp_path, module, text)
    found = violations(tmp_path)
    assert found and expect in found[0], found


def test_checker_accepts_downward_imports(tmp_path: Path) -> None:
    _plant(tmp_path, "dpfed.cli.x", "from dpfed.simulation import run_inprocess\nimport grpc, ray\n")
    _plant(tmp_path, "dpfed.federation.y", "from dpfed.algorithms.contract import Task\nfrom . import tls\n")
    assert violations(tmp_path) == []


@pytest.mark.parametrize("files, expect", [
    ({"dpfed.algorithms.a": "from dpfed.algorithms import b\n", "dpfed.algorithms.b": "import dpfed.algorithms.a\n"},
     "import cycle among dpfed.algorithms.a, dpfed.algorithms.b: dpfed.algorithms.a -> dpfed.algorithms.b -> "
     "dpfed.algorithms.a"),
    ({"dpfed.core.a": "def f():\n    from .b import x\n", "dpfed.core.b": "from .c import y\n",
      "dpfed.core.c": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dpfed.core.a import z\n"},
     "dpfed.core.a -> dpfed.core.b -> dpfed.core.c -> dpfed.core.a"),
    ({"dpfed.algorithms.p.__init__": "from .q import x\n",
      "dpfed.algorithms.p.q": "from dpfed.algorithms.p import y\n"},
     "import cycle among dpfed.algorithms.p, dpfed.algorithms.p.q"),
])
def test_checker_catches_a_planted_cycle(tmp_path: Path, files: dict[str, str], expect: str) -> None:
    for module, text in files.items():
        _plant(tmp_path, module, text)
    found = import_cycles(tmp_path)
    assert len(found) == 1 and expect in found[0], found


def test_checker_accepts_a_package_importing_its_modules(tmp_path: Path) -> None:
    _plant(tmp_path, "dpfed.algorithms.p.__init__", "from .q import x\nfrom dpfed.algorithms.p.r import y\n")
    _plant(tmp_path, "dpfed.algorithms.p.q", "from dpfed.algorithms.p.r import y\n")
    _plant(tmp_path, "dpfed.algorithms.p.r", "from dpfed.core import e\n")
    _plant(tmp_path, "dpfed.core.e", "X = 1\n")
    assert import_cycles(tmp_path) == []


@pytest.mark.parametrize("text, expect", [
    ("from dpfed.core.samplers import _bits\n", "imports _bits from dpfed.core.samplers"),
    ("def f():\n    from .samplers import _bits as b\n", "imports _bits from dpfed.core.samplers"),
    ("from dpfed.core import samplers as s\nx = s._bits\n", "uses dpfed.core.samplers._bits"),
    ("import dpfed.core.samplers\nx = dpfed.core.samplers._bits(3)\n", "uses dpfed.core.samplers._bits"),
])
def test_checker_catches_a_planted_private_import(tmp_path: Path, text: str, expect: str) -> None:
    _plant(tmp_path, "dpfed.core.samplers", "def _bits(n):\n    return n\n")
    _plant(tmp_path, "dpfed.core.dgauss", text)
    found = private_imports(tmp_path)
    assert len(found) == 1 and expect in found[0], found


def test_checker_accepts_public_and_own_names(tmp_path: Path) -> None:
    _plant(tmp_path, "dpfed.core.samplers", "def _bits(n):\n    return n\nx = _bits(1)\n__all__ = []\n")
    _plant(tmp_path, "dpfed.core.dgauss", "from dpfed.core import samplers\nfrom . import samplers as s\n"
           "print(samplers.__all__, s.__name__)\nfrom dpfed.core.samplers import x\nself = object()\nself._y = 1\n")
    assert private_imports(tmp_path) == []
