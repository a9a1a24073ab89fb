"""``python -m engine simulate``: exit codes, the replay line, the simulation it runs and says
it runs, and its progress line on a terminal."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from engine.cli._simulate import main
from engine.testing import Simulation, simulation_for

from .._e2e import ROOT
from .test_simulate import _resizes, _widgets

plugin = _widgets(warn_when_cancelled=True)
simulation = Simulation(plugin=plugin, workload=_resizes)
SPEC = "tests.testing.test_simulate_cli:plugin"
_bundles = simulation_for("bundles")
undeclared = attrs.evolve(_bundles, plugin=attrs.evolve(_bundles.plugin, rules=()))
"""The bundles simulation with a plugin that does not declare the ConfigMap rules it needs."""


def test_a_violation_exits_1_with_the_seed_and_a_replay_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert simulation_for(SPEC) is simulation
    assert main(["--plugin", SPEC, "--seed", "1", "--faults", "latency", "--duration", "20", "--trace", "3"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out.pop(0) == "widgets: simulation tests.testing.test_simulate_cli:simulation"
    assert out[0].startswith("seed 1: VIOLATION: replica-1.1 emitted Warning ReconcileFailed about Widget.sim.dev/sim/w1")
    assert out[1] == f"replay: python -m engine simulate --plugin {SPEC} --seed 1 --faults latency --duration 20"
    assert "VIOLATE" in out[-2]
    assert out[-1].startswith("widgets: 1 seed(s) from 1, 1 violation(s), ")


def test_seeds_that_hold_exit_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plugin", "bundles", "--seeds", "2", "--seed", "5", "--faults", "none", "--duration", "15"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2, out
    assert out[0] == "bundles: simulation engine.plugins.bundles._simulation:simulation"
    assert out[1].startswith("bundles: 2 seed(s) from 5, 0 violation(s), ")


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plugin", "bundles", "--faults", "bogus"]) == 2
    assert capsys.readouterr().err.startswith("python -m engine simulate: unknown fault 'bogus' (known: all, none, ")
    assert main(["--plugin", "no-such-plugin"]) == 2
    assert "plugin 'no-such-plugin' not found" in capsys.readouterr().err
    assert main(["--plugin", "bundles", "--seeds", "0"]) == 2


def _doc_block(first_line: str) -> str:
    text = (ROOT / "docs" / "testing.md").read_text()
    return str(next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if b.startswith(first_line + "\n")))


@pytest.fixture
def one_file_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``widgets.py`` and ``widgets_simulation.py`` from docs/testing.md, importable."""
    (tmp_path / "widgets.py").write_text(_doc_block("# widgets.py"))
    (tmp_path / "widgets_simulation.py").write_text(_doc_block("# widgets_simulation.py (or `simulation = ...` in widgets.py)"))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield tmp_path
    finally:
        for name in ("widgets", "widgets_simulation"):
            sys.modules.pop(name, None)


def test_the_documented_simulation_beside_a_one_file_plugin_is_used(
    one_file_plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--plugin", "widgets:plugin", "--seeds", "1", "--faults", "none", "--duration", "10"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "widgets: simulation widgets_simulation:simulation"
    assert out[1].startswith("widgets: 1 seed(s) from 0, 0 violation(s), ")
    assert simulation_for("widgets:plugin") is sys.modules["widgets_simulation"].simulation


def test_a_simulation_module_that_fails_to_import_is_an_error_not_ignored(
    one_file_plugin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (one_file_plugin / "widgets_simulation.py").write_text("from widgets import no_such_name\n")
    assert main(["--plugin", "widgets:plugin", "--seeds", "1"]) == 2
    assert capsys.readouterr().err == (
        "python -m engine simulate: simulation module 'widgets_simulation' failed to import: "
        "ImportError: cannot import name 'no_such_name' from 'widgets' "
        f"({one_file_plugin / 'widgets.py'})\n"
    )


def test_without_a_simulation_the_default_one_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    spec = "tests.programs.plugins_for_tests:one_example"
    assert main(["--plugin", spec, "--seeds", "1", "--faults", "none", "--duration", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("one-example: simulation the default simulation (examples applied and mutated; "
                      "converged once every object observed its generation)")


def test_simulation_option_runs_the_simulation_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    ref = "tests.testing.test_simulate_cli:simulation"
    assert main(["--simulation", ref, "--seed", "1", "--faults", "latency", "--duration", "20", "--trace", "0"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"widgets: simulation {ref} (--simulation)"
    assert out[2] == f"replay: python -m engine simulate --simulation {ref} --seed 1 --faults latency --duration 20"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--simulation", "no_such_module:simulation"],
         "simulation 'no_such_module:simulation': cannot import 'no_such_module': "
         "ModuleNotFoundError: No module named 'no_such_module'"),
        (["--simulation", "tests.testing.test_simulate_cli:nothing"],
         "simulation 'tests.testing.test_simulate_cli:nothing': module 'tests.testing.test_simulate_cli' "
         "has no attribute 'nothing'"),
        (["--simulation", "tests.testing.test_simulate_cli:plugin"],
         "simulation 'tests.testing.test_simulate_cli:plugin': expected an engine.testing.Simulation, got Plugin"),
        (["--simulation", "tests.testing.test_simulate_cli"],
         "simulation 'tests.testing.test_simulate_cli': expected module:attr"),
        (["--simulation", "tests.testing.test_simulate_cli:simulation", "--plugin", "bundles"],
         "simulation 'tests.testing.test_simulate_cli:simulation' is for plugin 'widgets', not 'bundles'"),
        ([], "give --plugin, --simulation or both"),
    ],
)
def test_a_simulation_that_cannot_be_used_exits_2_with_one_line(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert capsys.readouterr() == ("", f"python -m engine simulate: {error}\n")


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_progress_is_one_line_rewritten_then_erased(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    assert main(["--plugin", "bundles", "--seeds", "2", "--faults", "none", "--duration", "5"]) == 0
    out = terminal.getvalue()
    first, _, rest = out.partition("\n")
    assert first == "bundles: simulation engine.plugins.bundles._simulation:simulation"
    assert rest.startswith("\r0/2 seeds, 0 violations, first seed running\x1b[K")
    shown, _, summary = rest.rpartition("\r\x1b[K")
    assert re.fullmatch(r"(\r[012]/2 seeds, 0 violations, [^\r\n]*\x1b\[K)+", shown), shown
    assert summary.startswith("bundles: 2 seed(s) from 0, 0 violation(s), ") and summary.count("\n") == 1


def test_replicas_run_under_the_generated_role_unless_no_rbac(capsys: pytest.CaptureFixture[str]) -> None:
    ref = "tests.testing.test_simulate_cli:undeclared"
    assert main(["--simulation", ref, "--seeds", "1", "--duration", "10", "--faults", "none"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ('seed 0: VIOLATION: replica-1.1 was refused patch configmaps s0-cm1 in namespace "sim" (403 '
                      "Forbidden): the Role `python -m engine manifests` generates for bundles does not grant it")
    assert main(["--simulation", ref, "--seeds", "1", "--duration", "10", "--faults", "none", "--no-rbac"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("bundles: 1 seed(s) from 0, 0 violation(s), ")


def test_scale_out_runs_ring_replicas_and_a_violation_replays_with_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plugin", "mirror", "--seed", "2", "--scale-out", "--faults", "crash,partition",
                 "--duration", "20"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1].startswith("mirror: 1 seed(s) from 2, 0 violation(s), ")
    assert main(["--plugin", "mirror", "--seed", "2", "--scale-out", "--faults", "crash", "--duration", "20",
                 "--show-trace"]) == 0
    assert "(ring member engine-mirror-" in capsys.readouterr().out


BUSY = "tests.programs.busy_plugin:plugin"


def test_a_seed_that_hangs_is_a_violation_with_its_replay_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--plugin", BUSY, "--seed", "0", "--duration", "5", "--seed-timeout", "1", "--trace", "2"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("seed 0: VIOLATION: the seed hung: it did not end within 1s of wall time (virtual time "
                             "stuck at 0.000s: ")
    assert out[2] == f"replay: python -m engine simulate --plugin {BUSY} --seed 0 --duration 5"
    assert out[-1].startswith("busy: 1 seed(s) from 0, 1 violation(s), ")


def test_ctrl_c_stops_simulate_at_once() -> None:
    command = [sys.executable, "-m", "engine", "simulate", "--plugin", BUSY, "--seed", "0", "--duration", "5"]
    # A shell's background job (a CI script run with '&') starts with SIGINT ignored, and so
    # would this child: Ctrl-C is given back its default, as a terminal's foreground job has it.
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) as process:
        try:
            assert process.stdout is not None
            assert process.stdout.readline().startswith("busy: simulation ")
            time.sleep(1.0)
            process.send_signal(signal.SIGINT)
            sent = time.monotonic()
            out, err = process.communicate(timeout=30)
            stopped = time.monotonic() - sent
        finally:
            if process.returncode is None:
                process.kill()
    assert process.returncode == 130, err
    assert out.splitlines()[-1] == "busy: interrupted after 0 seed(s) from 0"
    assert stopped < 5, f"stopped {stopped:.1f}s after Ctrl-C"


def test_an_owner_that_applies_its_child_then_writes_its_status_ends_every_seed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Were the watch echo of its own writes news, each of its runs would start another at the
    same virtual instant (its status says when it ran, by the wall clock), and no seed would end."""
    spec = "tests.programs.owned_configmaps:plugin"
    assert main(["--plugin", spec, "--seeds", "3", "--duration", "10", "--seed-timeout", "60"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("owned-configmaps: 3 seed(s) from 0, 0 violation(s), ")
