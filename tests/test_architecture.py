"""``docs/architecture.md``'s package map is drawn from the code and cannot drift from it.

The map (between the two markers of the page) lists every package and module of ``engine``
with the first sentence of its docstring, and for each package the packages it imports, from
the import statements themselves. ``python -m tests.test_architecture --write`` draws it anew;
the test fails when the page and the code differ, naming the first line that does.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import engine

ENGINE = Path(engine.__file__).resolve().parent
PAGE = ENGINE.parent / "docs" / "architecture.md"
BEGIN = "<!-- package map: drawn from the code by `python -m tests.test_architecture --write`; do not edit -->"
END = "<!-- end of package map -->"

PACKAGES = (
    "engine",
    "engine.observability",
    "engine.kube",
    "engine.kube._client",
    "engine.kube._access",
    "engine.kube._runtime",
    "engine.kube._coordination",
    "engine.kube._webhooks",
    "engine.kube._hosting",
    "engine.apiserver",
    "engine.testing",
    "engine.testing._simulation",
    "engine.cli",
)
"""Every package, bottom first: the order of the map."""


def _path(package: str) -> Path:
    return ENGINE.parent.joinpath(*package.split("."))


def _first_sentence(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    match = re.match(r"(.+?[.!?])(\s|$)", paragraph)
    sentence = match.group(1) if match else paragraph
    return sentence.removesuffix(".")


def _package_of(module: str) -> str | None:
    """The package of :data:`PACKAGES` that holds ``module`` (the deepest one)."""
    found = [p for p in PACKAGES if module == p or module.startswith(p + ".")]
    return max(found, key=len) if found else None


def _imported_packages(package: str) -> set[str]:
    """The other packages that the modules of ``package`` import (those of its sub-packages are theirs)."""
    found: set[str] = set()
    for path in sorted(p for p in _path(package).glob("*.py") if p.name != "__main__.py"):
        base = package.split(".")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                root = ".".join(base[: len(base) - node.level + 1]) if node.level else ""
                head = ".".join(part for part in (root, node.module or "") if part)
                modules = [head, *(f"{head}.{alias.name}" for alias in node.names)]
            else:
                continue
            for module in modules:
                owner = _package_of(module)
                if owner is not None and owner != package:
                    found.add(owner)
    return found


def draw_map() -> list[str]:
    """The package map, one line per package and module."""
    lines = ["```"]
    for package in PACKAGES:
        folder = _path(package)
        imports = sorted(_imported_packages(package), key=PACKAGES.index)
        depth = package.count(".")
        lines.append(f"{'    ' * max(depth - 1, 0)}{package}: {_first_sentence(folder / '__init__.py')}")
        lines.append(f"{'    ' * max(depth - 1, 0)}  imports: {', '.join(imports) if imports else 'nothing of the engine'}")
        modules = sorted(p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
        for i, path in enumerate(modules):
            branch = "└──" if i == len(modules) - 1 else "├──"
            lines.append(f"{'    ' * max(depth - 1, 0)}  {branch} {path.stem}: {_first_sentence(path)}")
        lines.append("")
    lines[-1] = "```"
    return lines


def _page_map(text: str) -> list[str]:
    start, end = text.index(BEGIN), text.index(END)
    return text[start + len(BEGIN):end].strip("\n").split("\n")


def write_map() -> None:
    text = PAGE.read_text()
    start, end = text.index(BEGIN), text.index(END)
    PAGE.write_text(text[: start + len(BEGIN)] + "\n" + "\n".join(draw_map()) + "\n" + text[end:])


def test_the_page_map_is_the_code_map() -> None:
    drawn, page = draw_map(), _page_map(PAGE.read_text())
    differing = next((i for i, (a, b) in enumerate(zip(drawn, page, strict=False)) if a != b), min(len(drawn), len(page)))
    assert drawn == page, (
        f"docs/architecture.md's package map differs from the code at its line {differing + 1}: "
        f"the code says {drawn[differing] if differing < len(drawn) else '(nothing)'!r}, the page "
        f"{page[differing] if differing < len(page) else '(nothing)'!r}; run python -m tests.test_architecture --write"
    )


def test_the_map_names_every_module_and_what_each_package_imports() -> None:
    drawn = "\n".join(draw_map())
    for path in ENGINE.rglob("*.py"):
        if path.name not in ("__init__.py", "__main__.py") and "__pycache__" not in path.parts:
            assert f"── {path.stem}: " in drawn, path
    assert all(p.name == "__init__.py" or p.parent.name == "engine" or ".".join(
        p.parent.relative_to(ENGINE.parent).parts) in PACKAGES for p in ENGINE.rglob("*.py")), "a package the map misses"
    assert _imported_packages("engine.kube._client") == {"engine"}
    assert _imported_packages("engine.apiserver") == {"engine"}
    assert "engine.kube._coordination" in _imported_packages("engine.kube._hosting")


def test_a_changed_import_or_docstring_changes_the_map(tmp_path: Path) -> None:
    planted = ENGINE / "kube" / "_client" / "_planted.py"
    planted.write_text('"""A planted module. More."""\nfrom .._runtime._store import Store\n')
    try:
        drawn = draw_map()
        assert "engine.kube._runtime" in _imported_packages("engine.kube._client")
    finally:
        planted.unlink()
    assert any(line.endswith("_planted: A planted module") for line in drawn)
    assert drawn != draw_map()


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_map()
    else:
        print("\n".join(draw_map()))
