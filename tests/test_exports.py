from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import engine
import engine.observability

ENGINE = Path(engine.__file__).resolve().parent
OUTER_LAYERS = ("engine.kube", "engine.testing", "engine.cli")


def test_every_public_name_is_exported_once_from_engine() -> None:
    names = [n for n in dir(engine) if not n.startswith("_")]
    for name in names:
        value = getattr(engine, name)
        if isinstance(value, type):
            assert value.__module__ == "engine", f"{name} should present itself as engine.{name}"


def test_observability_names_are_the_engine_names() -> None:
    names = [n for n in dir(engine.observability) if not n.startswith("_")]
    assert sorted(names) == [
        "CheckFailed", "EngineMetrics", "LiveStatistics", "LiveStream", "Observability", "Probes", "parse_bind_address",
    ]
    for name in names:
        assert getattr(engine.observability, name) is getattr(engine, name)


def test_core_does_not_import_the_outer_layers_at_run_time() -> None:
    code = f"import sys, engine; print(sorted(m for m in sys.modules if m.startswith({OUTER_LAYERS!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _core_files() -> list[Path]:
    top = [p for p in ENGINE.glob("_*.py") if p.name != "__main__.py"]
    return sorted([*top, ENGINE / "__init__.py", *(ENGINE / "observability").glob("*.py")])


def _imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """Every module an ``import`` statement in ``source`` (a module of ``package``) names, relative
    ones resolved; type-checking imports and imports inside functions included."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append((node.lineno, module))
            found.extend((node.lineno, f"{module}.{alias.name}") for alias in node.names)
    return found


def test_core_does_not_import_the_outer_layers_anywhere_in_its_source() -> None:
    files = _core_files()
    assert ENGINE / "_manager.py" in files and ENGINE / "observability" / "_http.py" in files
    offending = [
        f"{path.relative_to(ENGINE.parent)}:{line} imports {module}"
        for path in files
        for line, module in _imported_modules(path.read_text(), ".".join(path.relative_to(ENGINE.parent).parts[:-1]))
        if module.startswith(OUTER_LAYERS) and module.split(".")[1] in {"kube", "testing", "cli"}
    ]
    assert offending == []


def test_the_import_scanner_sees_every_form_of_import() -> None:
    source = "\n".join([
        "from typing import TYPE_CHECKING",
        "import engine.testing",
        "from .. import cli",
        "if TYPE_CHECKING:",
        "    from ..kube import Client",
        "def f():",
        "    from ._http import Request",
    ])
    found = _imported_modules(source, "engine.observability")
    assert [m for _, m in found if m.startswith(OUTER_LAYERS)] == ["engine.testing", "engine.cli", "engine.kube",
                                                                   "engine.kube.Client"]
    assert (7, "engine.observability._http") in found
