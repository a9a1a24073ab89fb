"""``python -m engine simulate``: exit codes, the replay line, and the simulation a plugin names."""

from __future__ import annotations

import pytest

from engine.cli._simulate import main
from engine.testing import Simulation, simulation_for

from .test_simulate import _resizes, _widgets

plugin = _widgets(warn_when_cancelled=True)
simulation = Simulation(plugin=plugin, workload=_resizes)
SPEC = "tests.testing.test_simulate_cli:plugin"


def test_a_violation_exits_1_with_the_seed_and_a_replay_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulation_for(SPEC) is simulation
    assert main(["--plugin", SPEC, "--seed", "1", "--faults", "latency", "--duration", "20", "--trace", "3"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("seed 1: VIOLATION: replica-1.1 emitted Warning ReconcileFailed about Widget.sim.dev/sim/w1")
    assert out[1] == f"replay: python -m engine simulate --plugin {SPEC} --seed 1 --faults latency --duration 20"
    assert "VIOLATE" in out[-2]
    assert out[-1].startswith("widgets: 1 seed(s) from 1, 1 violation(s), ")


def test_seeds_that_hold_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plugin", "bundles", "--seeds", "2", "--seed", "5", "--faults", "none", "--duration", "15"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("bundles: 2 seed(s) from 5, 0 violation(s), ")


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plugin", "bundles", "--faults", "bogus"]) == 2
    assert capsys.readouterr().err.startswith("python -m engine simulate: unknown fault 'bogus' (known: all, none, ")
    assert main(["--plugin", "no-such-plugin"]) == 2
    assert "plugin 'no-such-plugin' not found" in capsys.readouterr().err
    assert main(["--plugin", "bundles", "--seeds", "0"]) == 2
