from __future__ import annotations

import engine


def test_every_public_name_is_exported_once_from_engine() -> None:
    names = [n for n in dir(engine) if not n.startswith("_")]
    for name in names:
        value = getattr(engine, name)
        if isinstance(value, type):
            assert value.__module__ == "engine", f"{name} should present itself as engine.{name}"


def test_core_does_not_import_the_kubernetes_adapter() -> None:
    import subprocess
    import sys

    code = "import sys, engine; print([m for m in sys.modules if m.startswith('engine.kube')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
