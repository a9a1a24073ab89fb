from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.kube import Plugin, PluginError, load_plugin, load_plugins

ROOT = Path(__file__).resolve().parents[2]


async def _setup(ctx: object) -> None:
    pass


def test_load_by_module_and_attribute() -> None:
    assert load_plugin("tests.programs.plugins_for_tests:good").name == "good"


def test_load_a_factory() -> None:
    assert load_plugin("tests.programs.plugins_for_tests:factory").name == "made"


def test_load_bundled_by_name() -> None:
    assert load_plugin("bundles").name == "bundles"
    assert load_plugin("mirror").name == "mirror"


def test_load_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint(name="thirdparty", value="tests.programs.plugins_for_tests:good", group="engine.plugins")

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [ep] if group == "engine.plugins" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert load_plugin("thirdparty").name == "good"


def test_unknown_plugin() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'nope' not found \(no module 'plugins.nope', no entry point in 'engine.plugins'\)$"):
        load_plugin("nope")


def test_plugin_that_fails_to_import() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'tests.programs.plugin_import_error:plugin' failed to import: ModuleNotFoundError: No module named 'this_module_does_not_exist'$"):
        load_plugin("tests.programs.plugin_import_error:plugin")


def test_missing_attribute_and_wrong_type() -> None:
    with pytest.raises(PluginError, match=r"has no attribute 'missing'$"):
        load_plugin("tests.programs.plugins_for_tests:missing")
    with pytest.raises(PluginError, match=r"^plugin 'tests.programs.plugins_for_tests:not_a_plugin': expected an engine.kube.Plugin, got int$"):
        load_plugin("tests.programs.plugins_for_tests:not_a_plugin")


def test_invalid_crd_is_rejected() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'x': crds must be apiextensions.k8s.io/v1 CustomResourceDefinition objects$"):
        Plugin(name="x", setup=_setup, crds=({"apiVersion": "v1", "kind": "ConfigMap"},))


def test_bad_plugins_are_skipped_unless_strict() -> None:
    plugins, errors = load_plugins(["nope", "tests.programs.plugins_for_tests:good", "bundles"])
    assert [p.name for p in plugins] == ["good", "bundles"]
    assert [str(e) for e in errors] == [
        "plugin 'nope' not found (no module 'plugins.nope', no entry point in 'engine.plugins')"
    ]
    with pytest.raises(PluginError):
        load_plugins(["nope", "bundles"], strict=True)


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "run", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_runner_reports_a_bad_plugin_and_exits_when_strict(tmp_path: Path) -> None:
    out = _run("--embedded", "--write-kubeconfig", str(tmp_path / "kc"), "--plugin", "nope", "--plugin", "bundles",
               "--strict-plugins")
    assert out.returncode == 1
    assert "error: plugin 'nope' not found" in out.stderr


def test_runner_needs_a_plugin() -> None:
    out = _run("--embedded")
    assert out.returncode == 1
    assert "error: no plugin to run (give --plugin NAME, e.g. --plugin bundles)" in out.stderr


def test_runner_names_the_bad_kubeconfig_field(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    out = _run("--kubeconfig", str(bad), "--plugin", "bundles")
    assert out.returncode == 1
    assert str(bad) in out.stderr and "error:" in out.stderr


def test_missing_module_of_a_module_attr_spec() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'nosuchpkg.mod:plugin' not found: no module named 'nosuchpkg.mod'$"):
        load_plugin("nosuchpkg.mod:plugin")
