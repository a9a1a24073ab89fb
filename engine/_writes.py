"""Own writes: what a run wrote, so that the watch echo of its own writes is not news.

A client that writes on a run's behalf (``engine.kube.Client``) asks :func:`own_write` for a
note while the write is in flight and gives the note the revision the write returned. The
controller of the run keeps those revisions per key in its :class:`OwnWrites`; a trigger of the
key that carries one of them is the echo of the run's own write: it neither supersedes a run
nor adds one (it is dropped, and the revision is forgotten). Any other revision is news.

The echo may be seen before the write's answer reaches the run (the watch is faster than the
answer on a loaded machine): a trigger with a revision, for a key whose run has a write in
flight, is held until every write in flight of that key has its revision, then dropped if it
was an echo and applied at once otherwise; but never longer than :data:`ECHO_WAIT` seconds, so
that someone else's change during a slow write (a server that holds it) still supersedes the
run nearly at once. A trigger without a revision is never held.

What a run wrote is the echo's to consume only until the key runs again: a later run may have
read a cache that did not hold the write yet (a delayed watch), so when the key's next run
starts, the earlier runs' revisions are forgotten and their echoes are news (one more run).

A revision names one write on one cluster (a Kubernetes ``resourceVersion`` is the storage's
global revision), so the revision alone identifies the object written. What is remembered is
bounded in time: revisions older than :data:`ECHO_HORIZON` seconds are forgotten (a later echo
of one is news: one more run, never a lost one).
"""

from __future__ import annotations

import collections
import contextvars
from collections.abc import Callable
from types import TracebackType

import trio

from ._refs import ObjectRef, Trigger

__all__ = ["OwnWrites", "OwnWrite", "Writer", "ECHO_HORIZON", "ECHO_WAIT", "own_write", "writing_for"]

ECHO_HORIZON = 60.0
"""Seconds (trio time) a written revision is remembered, waiting for its echo."""

ECHO_WAIT = 0.5
"""Seconds (trio time) a trigger is held at most while a write of its key is in flight."""

_WRITER: contextvars.ContextVar[Writer | None] = contextvars.ContextVar(
    "engine_own_writes", default=None
)


class OwnWrites:
    """One controller's record of its runs' writes, and the triggers held while writes are in flight.

    ``retrigger`` is how a held trigger that is news is applied (the controller's ``trigger``,
    with the held trigger's sequence). Every method but :meth:`run` is synchronous and not a
    checkpoint.
    """

    __slots__ = ("_written", "_by_key", "_writing", "_held", "_deadlines", "_wake", "_settling", "_retrigger")

    def __init__(self, retrigger: Callable[[Trigger], object]) -> None:
        self._written: collections.OrderedDict[tuple[ObjectRef, str], float] = collections.OrderedDict()
        """(key, revision) -> when written; insertion order is the order written. Ordered for
        the horizon's look at the oldest entry: a plain ``dict`` would find it by scanning past
        the slots of every entry removed since its table was last rebuilt, thousands when a
        minute of writes whose echoes no predicate passed on is remembered."""
        self._by_key: dict[ObjectRef, set[str]] = {}
        """The revisions remembered, per key."""
        self._writing: dict[ObjectRef, int] = {}
        """Writes in flight, per key."""
        self._held: dict[ObjectRef, tuple[float, list[Trigger]]] = {}
        """Per key: when its held triggers are applied at the latest, and those triggers."""
        self._deadlines: collections.deque[tuple[float, ObjectRef]] = collections.deque()
        """(time a key's held triggers are applied at the latest, key), in that order."""
        self._wake: trio.Event | None = None
        self._settling: ObjectRef | None = None
        """The key whose held triggers are being applied (they are not held again)."""
        self._retrigger = retrigger

    def __bool__(self) -> bool:
        """Whether anything is remembered or in flight (when not, no trigger needs a look)."""
        return bool(self._written or self._writing)

    def __len__(self) -> int:
        """Revisions remembered now."""
        return len(self._written)

    def writer(self) -> Writer:
        """A writer for the current task (and the tasks it starts from now on): writes made
        while its :attr:`~Writer.key` is set are noted for that key's run. Synchronous."""
        writer = Writer(self)
        _WRITER.set(writer)
        return writer

    def screen(self, trigger: Trigger) -> bool:
        """Whether ``trigger`` (which carries a revision) goes on: ``False`` when it is the echo
        of an own write (dropped, and the revision forgotten) or is held until the key's writes
        in flight have their revisions."""
        key = trigger.ref
        if self._forget(key, trigger.revision):  # type: ignore[arg-type]
            return False
        if self._writing.get(key) and key != self._settling:
            held = self._held.get(key)
            if held is None:
                deadline = trigger.observed_at + ECHO_WAIT
                held = self._held[key] = (deadline, [])
                self._deadlines.append((deadline, key))
                if self._wake is not None:
                    self._wake.set()
            held[1].append(trigger)
            return False
        return True

    def started(self, key: ObjectRef) -> None:
        """A run of ``key`` starts: what its earlier runs wrote is forgotten (this run may not
        have seen it in its cache, so the echo of it is news)."""
        revisions = self._by_key.pop(key, None)
        if revisions:
            for revision in revisions:
                self._written.pop((key, revision), None)

    def _forget(self, key: ObjectRef, revision: str) -> bool:
        """Forget ``revision`` of ``key``; whether it was remembered."""
        if self._written.pop((key, revision), None) is None:
            return False
        revisions = self._by_key[key]
        revisions.discard(revision)
        if not revisions:
            del self._by_key[key]
        return True

    def began(self, key: ObjectRef) -> None:
        """A write on behalf of ``key``'s run is in flight."""
        self._writing[key] = self._writing.get(key, 0) + 1

    def ended(self, key: ObjectRef, revision: str | None) -> None:
        """A write on behalf of ``key``'s run ended; ``revision`` is what it returned (``None``
        when it failed or returned none). Once no write of the key is in flight, its held
        triggers are settled: echoes dropped, news applied at once."""
        now = trio.current_time()
        written = self._written
        if revision is not None:
            self._forget(key, revision)
            written[(key, revision)] = now
            self._by_key.setdefault(key, set()).add(revision)
        horizon = now - ECHO_HORIZON
        while written:
            oldest = next(iter(written))
            if written[oldest] >= horizon:
                break
            self._forget(*oldest)
        left = self._writing[key] - 1
        if left:
            self._writing[key] = left
            return
        del self._writing[key]
        if key in self._held:
            self._settle(key)

    def _settle(self, key: ObjectRef) -> None:
        self._settling = key
        try:
            for held in self._held.pop(key, (0.0, ()))[1]:
                if not self._forget(key, held.revision):  # type: ignore[arg-type]
                    self._retrigger(held)
        finally:
            self._settling = None

    async def run(self) -> None:
        """Apply held triggers whose :data:`ECHO_WAIT` ran out (their write still in flight),
        until cancelled. Cancellation: stops at once; held triggers stay held until their
        writes end."""
        deadlines = self._deadlines
        while True:
            if not deadlines:
                self._wake = trio.Event()
                await self._wake.wait()
                self._wake = None
                continue
            await trio.sleep_until(deadlines[0][0])
            now = trio.current_time()
            while deadlines and deadlines[0][0] <= now:
                deadline, key = deadlines.popleft()
                held = self._held.get(key)
                if held is not None and held[0] == deadline:
                    self._settle(key)


class Writer:
    """Whose writes a task makes now: the run of :attr:`key` (a worker sets it for each run),
    or nobody (``None``)."""

    __slots__ = ("writes", "key")

    def __init__(self, writes: OwnWrites) -> None:
        self.writes = writes
        self.key: ObjectRef | None = None


class OwnWrite:
    """A note of one write in flight on behalf of a run: use as ``with note:`` around the
    write, and set :attr:`revision` to what it returned before the block ends."""

    __slots__ = ("_writes", "_key", "revision")

    def __init__(self, writes: OwnWrites, key: ObjectRef) -> None:
        self._writes = writes
        self._key = key
        self.revision: str | None = None
        """The revision the write returned, once it did."""

    def __enter__(self) -> OwnWrite:
        self._writes.began(self._key)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._writes.ended(self._key, self.revision)


def own_write() -> OwnWrite | None:
    """A note for a write made now, or ``None`` outside a run (or in a run whose controller
    keeps no record). Synchronous, not a checkpoint."""
    writer = _WRITER.get()
    if writer is None or writer.key is None:
        return None
    return OwnWrite(writer.writes, writer.key)


def writing_for() -> ObjectRef | None:
    """The key whose run the current task writes for, or ``None`` outside a run (or in a run
    whose controller keeps no record). Synchronous, not a checkpoint."""
    writer = _WRITER.get()
    return None if writer is None else writer.key
