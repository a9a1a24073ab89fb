"""The trace of a simulation: what happened, in order, in virtual time."""

from __future__ import annotations

import hashlib

import attrs
import trio

__all__ = ["TraceEntry", "Trace"]


@attrs.frozen
class TraceEntry:
    """One line of a trace."""

    time: float
    """Seconds of virtual time since the simulation started."""
    actor: str
    """``sim`` (workload and faults), ``api`` (writes), or a replica (``replica-1.2``: slot
    1, second start)."""
    what: str
    """``step``, ``fault``, ``replica``, ``trigger``, ``start``, ``end``, ``ready``, ``write``,
    ``refused`` (a workload write an admission webhook refused), ``admitted`` (a write the
    admission check excused), ..."""
    text: str

    def __str__(self) -> str:
        return f"{self.time:9.3f}  {self.actor:<11} {self.what:<7} {self.text}"


@attrs.define(eq=False)
class Trace:
    """Entries in the order they happened; times are relative to ``origin`` (trio time)."""

    origin: float = 0.0
    entries: list[TraceEntry] = attrs.field(factory=list)
    closed: bool = False
    """Once closed (after a violation, while everything is cancelled), entries are ignored."""

    def add(self, actor: str, what: str, text: str) -> None:
        """Append an entry stamped with the current trio time, unless closed. Not a checkpoint."""
        if not self.closed:
            self.entries.append(TraceEntry(round(trio.current_time() - self.origin, 6), actor, what, text))

    def digest(self) -> str:
        """A SHA-256 of every entry: equal digests mean equal traces."""
        h = hashlib.sha256()
        for entry in self.entries:
            h.update(str(entry).encode())
            h.update(b"\n")
        return h.hexdigest()

    def tail(self, count: int) -> list[TraceEntry]:
        return self.entries[-count:] if count > 0 else []
