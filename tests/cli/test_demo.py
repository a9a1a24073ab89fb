from __future__ import annotations

import subprocess
import sys


def test_demo_passes_all_three_scenarios() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "demo"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("verdict: PASS") == 3
    assert out.stdout.strip().endswith("3/3 scenarios passed")


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "nope"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown command 'nope'" in out.stderr
