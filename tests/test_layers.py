"""The import contract: every module imports only its own layer and the layers below it.

Layers, bottom to top (``dpfed/__init__.py``): core < data < algorithms < federation < protos <
party | coordinator (peers that never import each other) < simulation < cli. Core, data and
algorithms import neither grpc nor ray. Every ``import`` statement counts, including the ones
inside functions (a lazy import is still a dependency). The checker is tested on a planted
upward import, so this test can fail.
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


def test_every_import_points_down() -> None:
    assert violations(ROOT) == []


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
