"""The core modules import one another in one direction only (type-checking imports included)."""

from __future__ import annotations

import ast
import importlib.util
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


_PRIVATE_ACCESS_EXCEPTIONS = {
    ("testing/_determinism.py", "_r"): (
        "trio's scheduler random generator (trio._core._run._r), seeded on purpose so a simulation "
        "replays; tests/testing/test_simulate_determinism.py fails if a trio upgrade removes it"
    ),
}
"""The only private names of another module the engine touches, with the reason."""

_REFLECTION = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(CORE.parent).with_suffix("").parts)


def _own_private_names(tree: ast.Module) -> set[str]:
    """Private attribute and method names the classes of one module define."""
    names: set[str] = set()
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for item in cls.body:
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(item.name)
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                names.add(item.target.id)
            elif isinstance(item, ast.Assign):
                names.update(t.id for t in item.targets if isinstance(t, ast.Name))
        for node in ast.walk(cls):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
    return {name for name in names if _is_private(name)}


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:
        return False


def _private_touches(source: str, module: str) -> list[tuple[str, int, str]]:
    """``(private name, line, code)`` for each access in ``source`` (of ``module``, dotted;
    ``pkg.__init__`` for a package) to another module's private name: ``expr._name`` (``expr``
    not ``self`` or ``cls``), ``getattr(expr, "_name")`` and the like, where no class of the
    module defines ``_name``; and ``from somewhere import _name`` where ``_name`` is not a
    module."""
    tree = ast.parse(source)
    own = _own_private_names(tree)
    package = module.rpartition(".")[0]
    found: list[tuple[str, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            target, name = node.value, node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _REFLECTION
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _is_private(node.args[1].value)
        ):
            target, name = node.args[0], node.args[1].value
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found.extend(
                (alias.name, node.lineno, ast.unparse(node))
                for alias in node.names
                if _is_private(alias.name) and not _is_module(f"{base}.{alias.name}")
            )
            continue
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("self", "cls"):
            continue
        if name not in own:
            found.append((name, node.lineno, ast.unparse(node)))
    return found


def test_the_private_name_finder_finds_each_kind_of_access() -> None:
    source = """
from ._storage import _Bucket, ObjectStorage
from . import _storage
from trio._core import _run
class Mine:
    _field: int = 0
    def __init__(self, other: 'Mine') -> None:
        self._set = 1
        other._set, other._field, other._method(), other.__dict__
    def _method(self) -> None:
        self._unset
def f(storage: ObjectStorage) -> None:
    storage._objects
    getattr(storage, '_rv')
    _storage.ObjectStorage
    _run._r
from ..kube._runtime._store import _ObjectFaults
from ..kube._runtime import _store
"""
    found = _private_touches(source, "engine.apiserver._probe")
    assert sorted((line, name) for name, line, _ in found) == [
        (2, "_Bucket"),
        (13, "_objects"),
        (14, "_rv"),
        (16, "_r"),
        (17, "_ObjectFaults"),
    ]


def test_no_module_touches_another_modules_private_names() -> None:
    touches = {
        (str(path.relative_to(CORE)), name, line, code)
        for path in sorted(CORE.rglob("*.py"))
        for name, line, code in _private_touches(path.read_text(), _module_name(path))
    }
    excepted = {(module, name) for module, name, _, _ in touches} & _PRIVATE_ACCESS_EXCEPTIONS.keys()
    assert excepted == _PRIVATE_ACCESS_EXCEPTIONS.keys(), "an exception that is no longer needed"
    unexplained = sorted(t for t in touches if (t[0], t[1]) not in _PRIVATE_ACCESS_EXCEPTIONS)
    assert not unexplained, "give the owner a named, documented method for what the other module needs:\n" + "\n".join(
        f"  engine/{module}:{line}: {code}" for module, _, line, code in unexplained
    )
