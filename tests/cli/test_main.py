"""The ``python -m engine`` dispatcher."""

from __future__ import annotations

import subprocess
import sys


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
