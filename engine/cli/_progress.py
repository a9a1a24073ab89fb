"""What ``python -m engine run`` prints on a terminal while it runs: one line per change that
matters; and :class:`SeedProgress`, the one line ``python -m engine simulate`` keeps up to date.

:class:`TerminalProgress` is a run observer. It prints when an object becomes Ready (as its
plugin reports it, see ``Manager.mark_ready``) or, for objects that report no readiness, is
first reconciled; fails (the error, once per distinct error, until it recovers); waits for its
dependencies; is woken because a dependency became Ready; starts a rollout (a change to an
object already reconciled or Ready; not a trigger at ``Priority.LOW``, which a list, a relist
or a resync raised: a joining replica or a restarted runner listing an object changes
nothing) and finishes it (its next successful run, with how long
the rollout took); and when a run is superseded. :meth:`TerminalProgress.report_shutdown` prints the shutdown's progress:
runs in flight and grace left, until every run ended.

The hooks only format a line and put it in a bounded buffer (lines beyond it are counted in
:attr:`TerminalProgress.dropped`); :meth:`TerminalProgress.run` writes them out, so a slow
terminal never slows the engine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import IO

import attrs
import trio

from .._controller import Controller, RunObserver
from .._manager import Manager
from .._outcome import Outcome, OutcomeKind
from .._refs import ObjectRef, Priority, Trigger
from .._run import Run
from .._text import summarize

__all__ = ["SeedProgress", "TerminalProgress", "counted"]

_BUFFER = 1024
_NOT_A_ROLLOUT = frozenset({"requeue"})
"""Trigger reasons that re-run an object without a change to roll out."""


def show(ref: ObjectRef) -> str:
    """``Kind namespace/name``, the way kubectl users read an object."""
    return f"{ref.kind} {ref.namespace}/{ref.name}" if ref.namespace else f"{ref.kind} {ref.name}"


@attrs.define
class _Object:
    ready: bool = False
    reconciled: bool = False
    failing: str | None = None
    waiting: tuple[ObjectRef, ...] = ()
    rollout_since: float | None = None


class TerminalProgress(RunObserver):
    """Prints the progress of ``manager``'s objects to ``out``, one line each; see the module doc.

    Add it with ``manager.add_observer(progress)`` and run :meth:`run` in a nursery that
    outlives the manager; :meth:`close` it once the manager returned.
    """

    def __init__(self, manager: Manager, out: IO[str]) -> None:
        self._manager = manager
        self._out = out
        self._objects: dict[ObjectRef, _Object] = {}
        self._send, self._receive = trio.open_memory_channel[str](_BUFFER)
        self._changed = trio.Event()
        self._cancelled = 0
        self.dropped = 0
        """Lines not printed because the buffer was full."""

    # -- output ----------------------------------------------------------------------------

    def say(self, word: str, subject: str, detail: str = "") -> None:
        """Queue one line ``HH:MM:SS  word  subject  detail``. Synchronous, never blocks."""
        line = f"{time.strftime('%H:%M:%S')}  {word:<10} {subject}" + (f"  {detail}" if detail else "")
        try:
            self._send.send_nowait(line)
        except trio.WouldBlock:
            self.dropped += 1

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write queued lines until :meth:`close` was called and every line is written.

        Cancellation: lines still queued are not written.
        """
        task_status.started()
        async for line in self._receive:
            self._out.write(line + "\n")
            self._out.flush()

    def close(self) -> None:
        """No more lines: :meth:`run` returns once the queued ones are written. Idempotent."""
        self._send.close()

    # -- run observer hooks ------------------------------------------------------------------

    def _object(self, ref: ObjectRef) -> _Object:
        state = self._objects.get(ref)
        if state is None:
            state = self._objects[ref] = _Object()
        return state

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        state = self._object(trigger.ref)
        reason = trigger.reason or "changed"
        if (
            (state.ready or state.reconciled)
            and state.rollout_since is None
            and reason not in _NOT_A_ROLLOUT
            and trigger.priority is not Priority.LOW
        ):
            state.rollout_since = trio.current_time()
            self.say("rollout", show(trigger.ref), reason)
        if superseded is not None:
            self.say("superseded", show(trigger.ref), f"run {superseded.id} cancelled: {reason}")

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        state = self._object(run.key)
        kind = outcome.kind
        if kind is OutcomeKind.SUCCEEDED or kind is OutcomeKind.REQUEUE_AFTER:
            if state.rollout_since is not None:
                took = trio.current_time() - state.rollout_since
                after = f" after {run.attempt} attempts" if state.failing is not None else ""
                self.say("reconciled", show(run.key), f"rollout finished in {took:.1f} s{after}")
                state.rollout_since = None
            elif state.failing is not None:
                self.say("recovered", show(run.key), f"after {run.attempt} attempts")
            elif not state.reconciled and not state.ready:
                duration = (run.finished_at or run.started_at) - run.started_at
                self.say("reconciled", show(run.key), f"in {duration:.2f} s")
            state.failing = None
            state.reconciled = True
            state.waiting = ()
        elif kind.is_failure:
            state.ready = False
            error = summarize(outcome.error) if outcome.error is not None else (outcome.reason or kind.value)
            if error != state.failing:
                retry = "not retried" if kind is OutcomeKind.TERMINAL else "retried with backoff"
                self.say("failed", show(run.key), f"{error} (attempt {run.attempt}, {retry})")
            state.failing = error
        elif kind is OutcomeKind.DEPENDENCY_NOT_READY:
            state.ready = False
            if outcome.dependencies != state.waiting:
                self.say("waiting", show(run.key), "for " + ", ".join(show(d) for d in outcome.dependencies))
            state.waiting = outcome.dependencies
        elif kind is OutcomeKind.SHUTDOWN:
            self._cancelled += 1
        self._changed.set()

    def on_ready(self, ref: ObjectRef, revision: str | None) -> None:
        state = self._object(ref)
        if not state.ready:
            self.say("ready", show(ref))
        state.ready = True
        state.failing = None
        state.waiting = ()
        for dependent in sorted(self._manager.dependencies.waiting_on(ref)):
            self.say("woken", show(dependent), f"its dependency {show(ref)} is ready")

    # -- shutdown ----------------------------------------------------------------------------

    def _in_flight(self) -> int:
        return sum(len(c.running) for c in self._manager.controllers)

    async def report_shutdown(self, reason: str, *, tick: float = 5.0) -> None:
        """Print the graceful shutdown's progress, started by a stop for ``reason``: runs in
        flight and grace left whenever a run ends and every ``tick`` seconds, then how long the
        drain took and how many runs were cancelled at its end. Returns once no run is in flight.

        Cancellation: stops reporting; nothing else changes.
        """
        manager = self._manager
        start = trio.current_time()
        grace = manager.grace_period
        self._cancelled = 0
        in_flight = self._in_flight()
        self.say("stopping", f"on {reason}", f"{_runs(in_flight)} in flight, grace period {grace:g} s")
        while in_flight:
            self._changed = trio.Event()
            with trio.move_on_after(tick):
                await self._changed.wait()
            in_flight = self._in_flight()
            left = grace - (trio.current_time() - start)
            if in_flight and left > 0:
                self.say("draining", f"{_runs(in_flight)} in flight", f"{left:.0f} s of grace left")
        cancelled = f", {_runs(self._cancelled)} cancelled at the end of the grace period" if self._cancelled else ""
        self.say(
            "drained",
            f"all runs ended in {trio.current_time() - start:.1f} s{cancelled}",
            f"flushing events (up to {manager.event_flush_timeout:g} s)",
        )


def counted(n: int, noun: str) -> str:
    """``1 run``, ``2 runs``: ``n`` and ``noun``, with an ``s`` unless ``n`` is 1."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _runs(n: int) -> str:
    return counted(n, "run")


class SeedProgress:
    """One line on a terminal, rewritten in place, telling how far ``simulate`` is: seeds done
    (of ``total``), violations so far and seeds per second of wall time.

    :meth:`update` rewrites the line at most once per ``interval`` seconds of ``clock``
    (and always on the first call); :meth:`clear` erases it, before the results are printed.
    Writes nothing at all when ``out`` is not a terminal.
    """

    def __init__(
        self, out: IO[str], total: int, *, interval: float = 0.25, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._out = out
        self._total = total
        self._interval = interval
        self._clock = clock
        self._enabled = out.isatty()
        self._started = clock()
        self._shown_at: float | None = None
        self._shown = False

    def update(self, done: int, violations: int) -> None:
        """Show ``done`` seeds finished with ``violations`` among them (throttled)."""
        if not self._enabled:
            return
        now = self._clock()
        if self._shown_at is not None and now - self._shown_at < self._interval:
            return
        self._shown_at = now
        elapsed = now - self._started
        rate = f"{done / elapsed:.1f} seeds/s" if done and elapsed > 0 else "first seed running"
        line = f"{done}/{self._total} seeds, {counted(violations, 'violation')}, {rate}"
        self._out.write(f"\r{line}\033[K")
        self._out.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the line if one is shown."""
        if self._shown:
            self._out.write("\r\033[K")
            self._out.flush()
            self._shown = False
