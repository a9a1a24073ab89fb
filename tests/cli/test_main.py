"""The ``python -m engine`` dispatcher."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .._e2e import ROOT


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "nope"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown command 'nope'" in out.stderr


def test_live_is_listed_and_watch_stays_an_alias_of_it() -> None:
    listing = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, timeout=60)
    assert "live" in listing.stdout and "watch" not in listing.stdout
    for name in ("live", "watch"):
        out = subprocess.run([sys.executable, "-m", "engine", name, "--help"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0
        assert out.stdout.startswith("usage: python -m engine live ")


def test_version() -> None:
    import engine

    out = subprocess.run([sys.executable, "-m", "engine", "--version"], capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (0, f"python -m engine {engine.__version__}\n", "")


def test_the_process_exits_without_collecting_what_it_leaves_behind(tmp_path: Path) -> None:
    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, gc, sys\n"
        "atexit.register(lambda: sys.stderr.write(f'frozen at exit: {gc.get_freeze_count() > 0}\\n'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    out = subprocess.run([sys.executable, "-m", "engine", "--version"], capture_output=True, text=True, timeout=60,
                         env=env, cwd=ROOT)
    assert out.returncode == 0
    assert out.stderr == "frozen at exit: True\n"


def _parsers() -> dict[str, argparse.ArgumentParser]:
    from engine.cli import _apiserver, _demo, _live, _run

    return {name: module._parser() for name, module in
            (("run", _run), ("live", _live), ("apiserver", _apiserver), ("demo", _demo))}


@pytest.mark.parametrize("command", ["run", "live", "apiserver", "demo"])
def test_every_option_has_help_text_without_markup_or_missing_references(command: str) -> None:
    parser = _parsers()[command]
    undocumented = [
        action.option_strings or action.dest for action in parser._actions if not (action.help or "").strip()
    ]
    assert undocumented == []
    text = parser.format_help()
    assert "``" not in text
    assert "DESIGN.md" not in text
    assert ":class:" not in text and ":meth:" not in text


def test_top_level_help_has_no_markup_or_missing_references() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "--version" in out.stdout
    assert "``" not in out.stdout and "DESIGN.md" not in out.stdout


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "--grace-period", "abc"], "--grace-period"),
        (["run", "--log-level", "loud"], "--log-level"),
        (["apiserver", "--port", "eighty"], "--port"),
        (["simulate", "--seed", "x"], "--seed"),
        (["live", "--count", "many"], "--count"),
        (["manifests", "--bogus"], "--bogus"),
        (["demo", "--nope"], "--nope"),
    ],
)
def test_a_bad_flag_value_is_one_error_line_naming_the_flag(argv: list[str], flag: str) -> None:
    out = subprocess.run([sys.executable, "-m", "engine", *argv], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("error: ") and flag in lines[0]
    assert lines[0].endswith(f"(see 'python -m engine {argv[0]} --help')")
