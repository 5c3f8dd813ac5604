"""The layout's rules, read from the code's own imports (every import, lazy ones included): ``core/`` imports nothing
else of bakeoff; ``trial/`` (the child side) never imports ``run/`` or ``cli/``; nothing imports ``cli/``; and no two
packages import each other, directly or round a longer circle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import bakeoff

PACKAGE = Path(bakeoff.__file__).parent


def _imports() -> dict[str, set[str]]:
    """Each subpackage of bakeoff (``core``, ``run``, ...) → the subpackages its modules import."""
    out: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).parts
        if len(parts) < 2:  # bakeoff/__init__.py
            continue
        here = out.setdefault(parts[0], set())
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                dotted = name.split(".")
                if dotted[0] == "bakeoff" and len(dotted) > 1 and (PACKAGE / dotted[1]).is_dir():
                    here.add(dotted[1])
        here.discard(parts[0])
    return out


def test_the_packages_this_layout_names_exist():
    assert {"core", "plan", "run", "trial", "engines", "workloads", "data", "measure", "analysis", "results",
            "deploy", "report", "cli"} <= set(_imports())


def test_core_imports_nothing_else_of_bakeoff():
    assert _imports()["core"] == set()


def test_the_trial_side_never_imports_the_parent_side():
    assert _imports()["trial"] & {"run", "cli", "plan"} == set()


def test_nothing_imports_the_cli():
    assert sorted(package for package, imported in _imports().items() if "cli" in imported) == []


def test_no_two_packages_import_each_other_round_any_circle():
    graph = _imports()
    levels: dict[str, int] = {}

    def level(package: str, path: tuple[str, ...] = ()) -> int:
        assert package not in path, f"an import circle: {' -> '.join((*path, package))}"
        if package not in levels:
            levels[package] = 1 + max((level(p, (*path, package)) for p in graph.get(package, ())), default=0)
        return levels[package]

    for package in graph:
        level(package)
    assert levels["core"] == 1 and levels["cli"] == max(levels.values())  # contracts at the bottom, the CLI on top


ARCHITECTURE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def _documented_order() -> tuple[str, ...]:
    """The packages from the bottom up, as docs/architecture.md's "Layers" block lists them."""
    block = ARCHITECTURE.read_text().split("```layers", 1)[1].split("```", 1)[0]
    return tuple(block.split())


ORDER = _documented_order()


def test_the_architecture_documents_names_only_files_that_exist():
    text = ARCHITECTURE.read_text()
    named = set(re.findall(r"`((?:src|tests|scripts)/[^`\s<>…]+)`", text))
    assert len(named) > 20 and "src/bakeoff/core/spec.py" in named
    assert sorted(p for p in named if not (ARCHITECTURE.parent.parent / p.rstrip("/")).exists()) == []
    # and every package of the code is in its layers (a new one must be placed there to pass the test below)
    assert ORDER[0] == "core" and ORDER[-1] == "cli"


def test_every_import_points_down_the_documented_order():
    up = sorted(f"{package} -> {imported}" for package, imports in _imports().items() for imported in imports
                if ORDER.index(imported) > ORDER.index(package))
    assert up == [] and set(_imports()) == {*ORDER, "suites"}  # suites: the shipped TOML files, no code
