from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import engine
import engine.observability
from tests.test_layering import _cycle

ENGINE = Path(engine.__file__).resolve().parent
OUTER_LAYERS = ("engine.kube", "engine.apiserver", "engine.testing", "engine.cli")
LAYERS = ("engine.kube", "engine.apiserver", "engine.testing", "engine.cli")
"""The packages above the core, each allowed to import only the core and the ones before it."""


PUBLIC_PACKAGES = (
    "engine",
    "engine.observability",
    "engine.kube",
    "engine.kube.lowlevel",
    "engine.apiserver",
    "engine.testing",
    "engine.cli",
)


def _exports(package_name: str) -> dict[str, object]:
    package = importlib.import_module(package_name)
    return {name: getattr(package, name) for name in package.__all__}


@pytest.mark.parametrize("package_name", PUBLIC_PACKAGES)
def test_all_lists_every_public_name_and_only_those(package_name: str) -> None:
    package = importlib.import_module(package_name)
    for name in package.__all__:
        getattr(package, name)  # a name imported on first access is in vars() after it
    public = {
        name
        for name, value in vars(package).items()
        if name.isidentifier() and not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert sorted(public - set(package.__all__)) == []
    assert sorted(set(package.__all__) - public) == []


@pytest.mark.parametrize("package_name", PUBLIC_PACKAGES)
def test_exported_classes_and_functions_present_their_public_package(package_name: str) -> None:
    wrong = [
        f"{name}: {value.__module__}"
        for name, value in _exports(package_name).items()
        if (isinstance(value, type) or inspect.isfunction(value)) and value.__module__ != package_name
    ]
    assert wrong == []


def test_each_public_object_is_exported_from_exactly_one_public_package() -> None:
    homes: dict[int, list[str]] = {}
    for package_name in PUBLIC_PACKAGES:
        for name, value in _exports(package_name).items():
            if isinstance(value, type) or callable(value):
                homes.setdefault(id(value), []).append(f"{package_name}.{name}")
    assert [places for places in homes.values() if len(places) > 1] == []


@pytest.mark.parametrize(
    "old", ["engine.Observability", "engine.parse_bind_address", "engine.kube.create_lease", "engine.testing.Store",
            "engine.testing.ApiServer", "engine.testing.ObjectStorage"],
)
def test_names_of_the_unreleased_layout_are_gone_with_a_plain_attribute_error(old: str) -> None:
    package, _, name = old.rpartition(".")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match=rf"^module {re.escape(repr(package))} has no attribute {re.escape(repr(name))}$"):
            getattr(importlib.import_module(package), name)


def test_core_does_not_import_the_outer_layers_at_run_time() -> None:
    code = f"import sys, engine; print(sorted(m for m in sys.modules if m.startswith({OUTER_LAYERS!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_NOT_FOR_A_PLAIN_RUNNER = (
    "prometheus_client",
    "trio_websocket",
    "wsproto",
    "h11",
    "engine.observability",
    "engine.kube._hosting._metrics",
    "engine.kube._hosting._plugin",
    "engine.kube._webhooks._review",
    "engine.kube._webhooks._server",
    "engine.kube._webhooks._configuration",
    "engine.kube._coordination._ring",
    "engine.kube._coordination._leader",
)
"""What ``import engine.kube`` leaves to the first use of a name that needs it."""


def test_importing_engine_kube_leaves_servers_metrics_and_plugins_to_first_use() -> None:
    code = (
        "import sys, engine, engine.kube; "
        f"print(sorted(m for m in sys.modules if m.startswith({_NOT_FOR_A_PLAIN_RUNNER!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_name_imported_on_first_access_is_the_defining_modules_object_presented_as_public() -> None:
    code = (
        "import sys, engine.kube as k; "
        "server = k.WebhookServer; "
        "from engine.kube._webhooks._server import WebhookServer; "
        "print(server is WebhookServer, server.__module__, 'WebhookServer' in vars(k), "
        "'WebhookServer' in dir(k), 'engine.kube._webhooks._server' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "engine.kube", "True", "True", "True"]


def test_an_unknown_name_of_engine_kube_raises_attribute_error() -> None:
    import engine.kube

    with pytest.raises(AttributeError, match=r"^module 'engine.kube' has no attribute 'NoSuchName'$"):
        engine.kube.NoSuchName  # noqa: B018


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
    assert ENGINE / "_manager.py" in files and ENGINE / "_http.py" in files
    offending = [
        f"{path.relative_to(ENGINE.parent)}:{line} imports {module}"
        for path in files
        for line, module in _imported_modules(path.read_text(), ".".join(path.relative_to(ENGINE.parent).parts[:-1]))
        if module.startswith(OUTER_LAYERS) and module.split(".")[1] in {"kube", "apiserver", "testing", "cli"}
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


def _layer_of(module: str) -> int | None:
    """The index in :data:`LAYERS` of the package ``module`` belongs to; ``None`` for the core
    and for modules outside ``engine``."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "engine":
        return None
    name = ".".join(parts[:2])
    return LAYERS.index(name) if name in LAYERS else None


@pytest.mark.parametrize("layer", LAYERS)
def test_each_layer_imports_only_the_core_and_the_layers_below_it(layer: str) -> None:
    own = LAYERS.index(layer)
    folder = ENGINE / layer.split(".")[1]
    files = sorted(folder.rglob("*.py"))
    assert files
    offending = [
        f"{path.relative_to(ENGINE.parent)}:{line} imports {module}"
        for path in files
        for line, module in _imported_modules(path.read_text(), ".".join(path.relative_to(ENGINE.parent).parts[:-1]))
        if (found := _layer_of(module)) is not None and found > own
    ]
    assert offending == []


def test_the_layer_check_sees_an_upward_import() -> None:
    found = _imported_modules("from ..testing import open_plugin_test", "engine.apiserver")
    assert [_layer_of(module) for _, module in found] == [LAYERS.index("engine.testing")] * 2
    assert _layer_of("engine.apiserver._storage") == LAYERS.index("engine.apiserver")
    assert _layer_of("engine._manager") is None and _layer_of("trio") is None


def test_no_import_cycle_among_the_modules_of_any_package() -> None:
    graph: dict[str, set[str]] = {}
    for path in sorted(ENGINE.rglob("*.py")):
        parts = path.relative_to(ENGINE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = ".".join(parts[:-1])
        graph[name] = set()
        for _, module in _imported_modules(path.read_text(), package):
            graph[name].add(module)
    for name in graph:
        graph[name] = {m for m in graph[name] if m in graph and m != name and not name.startswith(m + ".")}
    assert _cycle(graph) is None


KUBE_PARTS = {"_client": 0, "_access": 1, "_runtime": 2, "_coordination": 3, "_webhooks": 3, "_hosting": 4}
"""The private sub-packages of ``engine.kube`` by rank: each imports only parts of lower rank
(coordination and webhooks share one, so neither imports the other)."""


def _kube_part_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["engine", "kube"]:
        return None
    if len(parts) == 2 or parts[2] not in KUBE_PARTS:
        return "engine.kube"
    return parts[2]


def _kube_part_offences(path: Path) -> list[str]:
    own = path.relative_to(ENGINE / "kube").parts[0]
    package = ".".join(path.relative_to(ENGINE.parent).parts[:-1])
    offending = []
    for line, module in _imported_modules(path.read_text(), package):
        part = _kube_part_of(module)
        if part is None or part == own:
            continue
        if part == "engine.kube" or KUBE_PARTS[part] >= KUBE_PARTS[own]:
            offending.append(f"{path.relative_to(ENGINE.parent)}:{line} ({own}) imports {module}")
    return offending


def test_every_kube_module_belongs_to_a_part() -> None:
    kube = ENGINE / "kube"
    assert sorted(p.name for p in kube.glob("*.py")) == ["__init__.py", "lowlevel.py"]
    assert sorted(p.name for p in kube.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(KUBE_PARTS)


@pytest.mark.parametrize("part", sorted(KUBE_PARTS))
def test_each_kube_part_imports_only_the_parts_below_it(part: str) -> None:
    files = sorted((ENGINE / "kube" / part).rglob("*.py"))
    assert files
    assert [offence for path in files for offence in _kube_part_offences(path)] == []


def test_the_kube_part_check_sees_an_upward_and_a_sideways_import(tmp_path: Path) -> None:
    client = ENGINE / "kube" / "_client" / "_planted.py"
    webhooks = ENGINE / "kube" / "_webhooks" / "_planted.py"
    cases = {
        client: "from .._coordination._ring import HashRing\nfrom engine.kube import Cluster\n",
        webhooks: "from .._coordination._lease import Lease\nfrom .._runtime._cluster import Cluster\n",
    }
    found = {}
    for path, source in cases.items():
        path.write_text(source)
        try:
            found[path] = _kube_part_offences(path)
        finally:
            path.unlink()
    assert [o.split(" imports ")[1] for o in found[client]] == [
        "engine.kube._coordination._ring", "engine.kube._coordination._ring.HashRing", "engine.kube", "engine.kube.Cluster",
    ]
    assert [o.split(" imports ")[1] for o in found[webhooks]] == [
        "engine.kube._coordination._lease", "engine.kube._coordination._lease.Lease",
    ]


SIMULATION = ENGINE / "testing" / "_simulation"
SIMULATION_ROOMS = {
    "the oracle": {"_spec": 0, "_finder": 1, "_verdict": 1, "_replica": 1, "_notifications": 2, "_attempts": 2, "_checks": 3,
                   "_audit": 4, "_observer": 4, "_oracle": 5},
    "the fleet and the fault driver": {"_fleet": 6, "_faults": 7, "_settling": 7},
    "the seed runner": {"_result": 8, "_seed": 9, "_sweep": 10},
}
"""The modules of the simulator (``engine.testing._simulation``) by room and rank: each imports
only modules of lower rank (those of one rank share it, so neither imports the other); the rooms'
ranks follow one another, so the runner imports the fleet and the oracle, and the oracle neither."""
SIMULATION_PARTS = {module: rank for room in SIMULATION_ROOMS.values() for module, rank in room.items()}


def _simulation_offences(path: Path) -> list[str]:
    own = path.stem
    package = ".".join(path.relative_to(ENGINE.parent).parts[:-1])
    offending = []
    for line, module in _imported_modules(path.read_text(), package):
        parts = module.split(".")
        if parts[:3] != ["engine", "testing", "_simulation"]:
            continue
        part = parts[3] if len(parts) > 3 else None
        if part == own:
            continue
        if part not in SIMULATION_PARTS or SIMULATION_PARTS[part] >= SIMULATION_PARTS[own]:
            offending.append(f"{path.relative_to(ENGINE.parent)}:{line} ({own}) imports {module}")
    return offending


def test_every_simulation_module_has_a_rank_and_the_rooms_follow_one_another() -> None:
    modules = sorted(p.stem for p in SIMULATION.glob("*.py") if p.name != "__init__.py")
    assert modules == sorted(SIMULATION_PARTS)
    assert not [p for p in SIMULATION.iterdir() if p.is_dir() and p.name != "__pycache__"]
    bands = [(min(room.values()), max(room.values())) for room in SIMULATION_ROOMS.values()]
    assert all(low_next > high for (_, high), (low_next, _) in zip(bands, bands[1:]))


@pytest.mark.parametrize("module", sorted(SIMULATION_PARTS))
def test_each_simulation_module_imports_only_the_ranks_below_it(module: str) -> None:
    assert _simulation_offences(SIMULATION / f"{module}.py") == []


def test_the_simulation_rank_check_sees_an_upward_and_a_sideways_import() -> None:
    oracle = SIMULATION / "_planted_oracle.py"
    faults = SIMULATION / "_planted_faults.py"
    SIMULATION_PARTS.update({"_planted_oracle": 3, "_planted_faults": 7})
    cases = {
        oracle: "from ._fleet import Fleet\nfrom engine.testing._simulation import _seed\nfrom ._replica import Replica\n",
        faults: "from ._settling import Settler\nfrom ._fleet import Fleet\n",
    }
    found = {}
    try:
        for path, source in cases.items():
            path.write_text(source)
            try:
                found[path] = _simulation_offences(path)
            finally:
                path.unlink()
    finally:
        del SIMULATION_PARTS["_planted_oracle"], SIMULATION_PARTS["_planted_faults"]
    assert [o.split(" imports ")[1] for o in found[oracle]] == [
        "engine.testing._simulation._fleet", "engine.testing._simulation._fleet.Fleet",
        "engine.testing._simulation", "engine.testing._simulation._seed",
    ]
    assert [o.split(" imports ")[1] for o in found[faults]] == [
        "engine.testing._simulation._settling", "engine.testing._simulation._settling.Settler",
    ]


def _private_module_imports(path: Path) -> list[str]:
    """Imports in ``path`` of a private module of another package than its own: the core's
    private modules (``engine._text``) are shared by every package below ``engine``, and the
    parts of ``engine.kube`` by one another; anything else goes through the package's face."""
    parts = path.relative_to(ENGINE.parent).with_suffix("").parts
    own = parts[1] if len(parts) > 2 else None
    found = []
    for line, module in _imported_modules(path.read_text(), ".".join(parts[:-1])):
        names = module.split(".")
        if names[0] == "engine" and len(names) > 2 and names[1] != own and names[2].startswith("_"):
            found.append(f"{path.relative_to(ENGINE.parent)}:{line} imports {module}")
    return found


def test_no_package_imports_another_packages_private_modules() -> None:
    files = [p for p in sorted(ENGINE.rglob("*.py")) if "__pycache__" not in p.parts]
    assert [found for path in files for found in _private_module_imports(path)] == []


def test_the_private_module_check_sees_one(tmp_path: Path) -> None:
    planted = ENGINE / "cli" / "_planted.py"
    planted.write_text("from ..testing._simulation._result import DEFAULT_BOUND\nfrom ..testing import simulate\n"
                       "from .._text import summarize\n")
    try:
        found = _private_module_imports(planted)
    finally:
        planted.unlink()
    assert found == ["engine/cli/_planted.py:1 imports engine.testing._simulation._result",
                     "engine/cli/_planted.py:1 imports engine.testing._simulation._result.DEFAULT_BOUND"]
