"""The simulation's verdict: the first guarantee broken ends the run, and the trace says how it came to that."""

from __future__ import annotations

import attrs
import trio

from .._trace import Trace

__all__ = ["Verdict"]


@attrs.define(eq=False)
class Verdict:
    """The trace of one seed and its first violation; :meth:`fail` cancels :attr:`scope`, in
    which the whole run goes."""

    trace: Trace = attrs.field(factory=Trace)
    violation: str | None = None
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    def fail(self, message: str) -> None:
        """Record the first violation and end the simulation. Not a checkpoint."""
        if self.violation is None:
            self.violation = message
            self.trace.add("sim", "VIOLATE", message)
            self.trace.closed = True
            self.scope.cancel(reason="invariant violated")
