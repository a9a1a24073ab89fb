"""Sources: where triggers come from (a channel, a timer, a mapping from other objects).

Read-your-trigger: a source raises a trigger only after the state it announces is readable
by the reconciler (for example, after a cache was updated). Every trigger goes through
its target's ``trigger`` (:meth:`Controller.trigger <engine.Controller.trigger>`), so a
supersede is never separated from its enqueue. A source's target is any
:class:`~engine.Triggerable`; a controller is one.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Generic, Protocol, TypeVar, runtime_checkable

import attrs
import trio

from ._refs import ObjectRef, Priority, Triggerable
from ._text import summarize, truncate

__all__ = ["Source", "WarmSource", "Change", "ChannelSource", "TimerSource", "MappedSource"]

logger = logging.getLogger("engine.sources")

T = TypeVar("T")


class Source(Protocol):
    """Something the manager runs in its sources nursery, cancelled first at shutdown."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Raise triggers until cancelled; call ``task_status.started()`` once running.

        Cancellation: the manager cancels sources first at shutdown; a source must stop at
        once and must not have raised half of the triggers of one observation.
        """
        ...


@runtime_checkable
class WarmSource(Source, Protocol):
    """A source that can run before its triggers are wanted: a warm standby's cache.

    A manager with leader election and ``enable_warmup`` (the default) calls
    :meth:`hold_triggers`, then starts the source while it waits for leadership, and once it
    leads runs :meth:`release_triggers` in the sources nursery while its controllers start. An
    informer is one (:class:`engine.kube.Informer`): held, it lists and watches and keeps its
    cache current, and calls no handler.
    """

    def hold_triggers(self) -> None:
        """From now on keep the source's state current but raise no trigger. Synchronous."""
        ...

    async def release_triggers(self) -> None:
        """Trigger as usual from now on (before the first checkpoint), and raise the triggers
        a fresh start would raise for the state held now (for a cache: every cached object, as
        listed), yielding between batches so that runs start meanwhile; return when done.
        Does nothing when not held.

        Cancellation: the manager cancels it with the sources at shutdown; the triggers not
        raised yet are not.
        """
        ...


@attrs.frozen
class Change:
    """An item for :class:`ChannelSource`: a key plus why, at which revision and priority."""

    ref: ObjectRef
    reason: str = "changed"
    revision: str | None = None
    priority: Priority = Priority.NORMAL


class ChannelSource:
    """Triggers ``controller`` for every :class:`ObjectRef` or :class:`Change` received.

    Send an item only once the state it announces is readable. Runs until the channel is
    closed or the source is cancelled (at shutdown); if cancelled, unreceived items stay in the
    channel.
    """

    def __init__(self, controller: Triggerable, receive: trio.MemoryReceiveChannel[ObjectRef | Change]) -> None:
        self.controller = controller
        self._receive = receive

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Trigger for each item received until the channel is closed; ``started()`` at once.

        Cancellation: stops at once; an item is either received and triggered or left in the
        channel, never lost in between (triggering does not checkpoint).
        """
        task_status.started()
        async for item in self._receive:
            if isinstance(item, Change):
                self.controller.trigger(item.ref, reason=item.reason, revision=item.revision, priority=item.priority)
            else:
                self.controller.trigger(item, reason="changed")


class TimerSource:
    """Periodic resync: every ``interval`` seconds (jittered by ``±jitter`` of it), triggers
    every key ``keys()`` returns, at ``priority`` (``LOW``: a resync is not news, changes run
    first). Time is trio's clock. If cancelled, it just stops.

    A round for which ``keys()`` raises is skipped whole (logged, counted in :attr:`errors`
    and in the target's ``trigger_errors``); the next round comes as usual.
    """

    def __init__(
        self,
        controller: Triggerable,
        keys: Callable[[], Iterable[ObjectRef] | ObjectRef],
        *,
        interval: float,
        jitter: float = 0.1,
        rng: random.Random | None = None,
        priority: Priority = Priority.LOW,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        self.controller = controller
        self._keys = keys
        self._interval = interval
        self._jitter = jitter
        self._rng = rng or random.Random()
        self._priority = priority
        self.errors = 0
        """Resync rounds skipped because ``keys()`` raised."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Trigger every key each interval, forever; ``started()`` at once.

        Cancellation: stops at once, while sleeping; a resync round is never cut in half (it
        does not checkpoint).
        """
        task_status.started()
        while True:
            spread = self._interval * self._jitter
            await trio.sleep(self._interval + self._rng.uniform(-spread, spread))
            try:
                keys = self._keys()
                refs = [keys] if isinstance(keys, ObjectRef) else list(keys)
            except Exception as exc:
                self.errors += 1
                _count_trigger_error(self.controller)
                logger.error(
                    "key function of timer source raised; resync round skipped: %s", summarize(exc),
                    exc_info=exc, extra={"controller": self.controller.name},
                )
                continue
            sequence = self.controller.next_sequence()
            for ref in refs:
                self.controller.trigger(ref, reason="resync", sequence=sequence, priority=self._priority)


class MappedSource(Generic[T]):
    """Maps an event on one object to keys of ``controller`` (for example dependents of a source).

    Call :meth:`handle` from a watch handler (synchronous, after the cache holds the event's
    object), or give ``receive`` to have :meth:`run` consume a channel of events. One event is
    one observation: every key it maps to is triggered with one sequence number.

    ``mapper`` returns the keys: an iterable of :class:`ObjectRef`, or one ref alone (refs are
    tuples, but one ref is never taken for its fields). It is user code: if it raises for one
    event, that event is skipped (logged once with its key, as ``describe(event)`` gives it,
    counted in :attr:`errors` and in the target's ``trigger_errors``); every other event flows
    on and the source keeps running.
    Without ``describe``, a Kubernetes-shaped mapping is named by its kind, namespace and name.
    """

    def __init__(
        self,
        controller: Triggerable,
        mapper: Callable[[T], Iterable[ObjectRef] | ObjectRef],
        receive: trio.MemoryReceiveChannel[T] | None = None,
        *,
        reason: str = "mapped",
        describe: Callable[[T], str] | None = None,
    ) -> None:
        self.controller = controller
        self._mapper = mapper
        self._receive = receive
        self._reason = reason
        self._describe = describe
        self.errors = 0
        """Events skipped because ``mapper`` raised for them."""

    def handle(self, event: T, *, revision: str | None = None, priority: Priority = Priority.NORMAL) -> int:
        """Trigger every key ``event`` maps to, at ``priority``; returns how many. Synchronous,
        no checkpoint."""
        return self.handle_many((event,), revision=revision, priority=priority)

    def handle_many(
        self, events: Iterable[T], *, revision: str | None = None, priority: Priority = Priority.NORMAL
    ) -> int:
        """Trigger the union of the keys several views of one change map to (old and new
        object of an update), each once, with one sequence number, at ``priority``."""
        sequence = self.controller.next_sequence()
        seen: set[ObjectRef] = set()
        for event in events:
            try:
                mapped = self._mapper(event)
                refs = [mapped] if isinstance(mapped, ObjectRef) else list(mapped)
            except Exception as exc:
                self._skip(event, exc)
                continue
            for ref in refs:
                if ref not in seen:
                    seen.add(ref)
                    self.controller.trigger(
                        ref, reason=self._reason, revision=revision, sequence=sequence, priority=priority
                    )
        return len(seen)

    def _skip(self, event: T, error: Exception) -> None:
        self.errors += 1
        _count_trigger_error(self.controller)
        try:
            item = self._describe(event) if self._describe is not None else _describe(event)
        except Exception:
            item = f"an item of type {type(event).__name__}"
        logger.error(
            "mapper of source %r raised for %s; item skipped: %s", self._reason, item, summarize(error),
            extra={"controller": self.controller.name, "object": item},
        )
        logger.debug("mapper traceback", exc_info=error)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Handle each event received until the channel is closed (without ``receive``, just
        wait until cancelled); ``started()`` at once.

        Cancellation: stops at once; an event is either received and handled or left in the
        channel (handling does not checkpoint).
        """
        task_status.started()
        if self._receive is None:
            await trio.sleep_forever()
            return
        async for event in self._receive:
            self.handle(event)


def _count_trigger_error(target: Triggerable) -> None:
    count = getattr(target, "count_trigger_error", None)
    if callable(count):
        count()


def _describe(item: object) -> str:
    if isinstance(item, ObjectRef):
        return str(item)
    if isinstance(item, Mapping) and isinstance(item.get("metadata"), Mapping):
        return str(ObjectRef.from_object(item))
    return truncate(repr(item), 200)

