"""How a seed went, as reported, and the command that replays it."""

from __future__ import annotations

import attrs

from .._schedule import FaultKind
from .._trace import TraceEntry

__all__ = ["SimulationResult", "replay_command", "DEFAULT_DURATION", "DEFAULT_BOUND", "DEFAULT_SEED_TIMEOUT"]

DEFAULT_DURATION = 60.0
"""Seconds of virtual time with workload and faults."""
DEFAULT_BOUND = 300.0
"""Seconds of virtual time within which everything must converge once the faults stopped."""
DEFAULT_SEED_TIMEOUT = 300.0
"""Seconds of wall time one seed may take before it is reported as hung."""


@attrs.frozen
class SimulationResult:
    """How one seed went."""

    seed: int
    violation: str | None
    """The first guarantee broken, or ``None``."""
    replay: str
    """The command that replays this seed."""
    trace: tuple[TraceEntry, ...]
    digest: str
    """SHA-256 of the trace: the same seed gives the same digest."""
    faults: tuple[str, ...]
    """The fault schedule, described."""
    steps: int
    """Workload steps applied."""
    runs: int
    """Runs finished, over every replica."""
    virtual_seconds: float
    wall_seconds: float

    @property
    def ok(self) -> bool:
        return self.violation is None

    def report(self, last: int = 40) -> str:
        """The seed, the violation, the replay command and the last ``last`` trace entries."""
        head = f"seed {self.seed}: " + ("ok" if self.violation is None else f"VIOLATION: {self.violation}")
        lines = [head, f"replay: {self.replay}", "faults: " + (", ".join(self.faults) or "none")]
        if self.violation is not None:
            lines.append(f"last {min(last, len(self.trace))} of {len(self.trace)} trace entries (virtual seconds):")
            lines.extend(f"  {e}" for e in self.trace[-last:])
        return "\n".join(lines)


def replay_command(
    plugin: str | None, simulation: str | None, seed: int, kinds: frozenset[FaultKind], duration: float, bound: float,
    rbac: bool = True, scale_out: bool = False, webhooks: bool = True,
) -> str:
    """The ``python -m engine simulate`` command line that replays one seed run with these arguments."""
    parts = ["python -m engine simulate"]
    if plugin is not None:
        parts.append(f"--plugin {plugin}")
    if simulation is not None:
        parts.append(f"--simulation {simulation}")
    parts.append(f"--seed {seed}")
    if kinds != frozenset(FaultKind):
        parts.append("--faults " + (",".join(sorted(k.value for k in kinds)) or "none"))
    if duration != DEFAULT_DURATION:
        parts.append(f"--duration {duration:g}")
    if bound != DEFAULT_BOUND:
        parts.append(f"--bound {bound:g}")
    if not rbac:
        parts.append("--no-rbac")
    if scale_out:
        parts.append("--scale-out")
    if not webhooks:
        parts.append("--no-webhooks")
    return " ".join(parts)
