from __future__ import annotations

import subprocess
import sys


def test_demo_passes_all_three_scenarios() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "demo"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("verdict: PASS") == 3
    assert out.stdout.strip().endswith("3/3 scenarios passed")
