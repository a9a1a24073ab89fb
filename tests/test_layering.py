"""The core modules import one another in one direction only (type-checking imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import engine

CORE = Path(engine.__file__).parent


def _core_imports() -> dict[str, set[str]]:
    modules = {path.stem for path in CORE.glob("_*.py") if path.stem != "__init__"}
    graph: dict[str, set[str]] = {}
    for name in modules:
        tree = ast.parse((CORE / f"{name}.py").read_text())
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module in modules:
                targets.add(node.module)
            elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                targets.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine._"):
                head = node.module.split(".")[1]
                if head in modules:
                    targets.add(head)
        graph[name] = targets - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or ``None``."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_core_modules() -> None:
    graph = _core_imports()
    assert {"_controller", "_manager", "_deps"} <= graph.keys()
    assert _cycle(graph) is None
