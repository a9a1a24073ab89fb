"""Events: emitted without awaiting, correlated, and delivered by sink tasks.

``emit`` puts an event in a bounded memory channel and returns; it never awaits and never
raises into the caller. A dispatcher task (in the manager's services nursery) correlates
events as client-go does (identical events counted, similar ones aggregated, a per-object spam
limit) and hands each to every sink's own bounded queue. Each sink is drained by its own task,
so a stuck sink delays neither another sink nor any reconcile. Whatever is dropped is counted
per sink and reason.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from ._refs import ObjectRef
from ._text import redact, redact_value, summarize

__all__ = [
    "EventType",
    "Event",
    "EventSink",
    "EventRecorder",
    "ObjectEvents",
    "EventCorrelator",
    "EventRecorderStatistics",
    "EventSinkStatistics",
]

logger = logging.getLogger("engine.events")


class EventType(enum.Enum):
    NORMAL = "Normal"
    WARNING = "Warning"


@attrs.frozen
class Event:
    """One event about one object, as sinks receive it."""

    involved: ObjectRef
    """The object the event is about."""
    type: EventType
    reason: str
    """A short CamelCase reason, for example ``ReconciliationSucceeded``."""
    message: str
    controller: str = ""
    """The reporting controller."""
    timestamp: float = 0.0
    """Wall-clock time (seconds since the epoch) of the newest occurrence."""
    first_timestamp: float = 0.0
    """Wall-clock time of the first occurrence this event aggregates."""
    count: int = 1
    """How many occurrences this event stands for (client-go's ``count``)."""
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    """Free-form annotations, for example the revision."""
    run_id: str | None = None
    """The run that emitted it, if any."""


class EventSink(Protocol):
    """Where events go. ``deliver`` may take long or raise; the recorder isolates it."""

    name: str

    async def deliver(self, event: Event) -> None:
        """Deliver one event. Raise to report it lost (it is counted as failed).

        The recorder calls it from the sink's own task, one event at a time; it may take long.

        Cancellation: the recorder cancels it when a shutdown's ``event_flush_timeout``
        elapses; give up the delivery in flight and let ``Cancelled`` propagate. That event
        counts as neither delivered nor failed; those queued behind it count as
        ``not_flushed``.
        """
        ...


@attrs.frozen
class EventSinkStatistics:
    """Counters of one sink, in :class:`EventRecorderStatistics`."""

    delivered: int
    """Events the sink's ``deliver`` returned for."""
    failed: int
    """Events the sink's ``deliver`` raised for."""


@attrs.frozen
class EventRecorderStatistics:
    """A snapshot of an :class:`EventRecorder`'s counters."""

    emitted: int
    """Calls to ``emit`` (including events dropped afterwards)."""
    sinks: Mapping[str, EventSinkStatistics]
    """Counters per sink name."""
    drops: Mapping[tuple[str, str], int]
    """Dropped events by ``(sink name, reason)``, as :meth:`EventRecorder.drops` returns them."""


@attrs.define
class _Spam:
    tokens: float
    last: float


class EventCorrelator:
    """client-go's event correlation: aggregation, identical-event counting, spam filtering.

    * Similar events (same object, type, reason, controller) beyond ``max_similar`` within
      ``similar_window`` seconds are combined into one whose message says so.
    * Identical events (same also in message) within ``similar_window`` are one event with an
      increasing ``count``.
    * Per object, a token bucket (``spam_burst``, one token per ``spam_refill`` seconds) limits
      what reaches sinks; events beyond it are dropped (counted as ``spam``).

    Time comes from trio's clock. All methods are synchronous.
    """

    def __init__(
        self,
        *,
        max_similar: int = 10,
        similar_window: float = 600.0,
        spam_burst: int = 25,
        spam_refill: float = 300.0,
        max_entries: int = 4096,
    ) -> None:
        self._max_similar = max_similar
        self._window = similar_window
        self._burst = float(spam_burst)
        self._refill = spam_refill
        self._max_entries = max_entries
        self._similar: dict[tuple[Any, ...], tuple[float, set[str]]] = {}
        self._identical: dict[tuple[Any, ...], tuple[float, Event]] = {}
        self._spam: dict[tuple[Any, ...], _Spam] = {}

    def correlate(self, event: Event) -> Event | None:
        """Return the event to deliver (possibly aggregated), or ``None`` if spam-filtered."""
        now = trio.current_time()
        if not self._allow(event, now):
            return None
        similar_key = (event.involved, event.type, event.reason, event.controller)
        first, messages = self._similar.get(similar_key, (now, set()))
        if now - first > self._window:
            first, messages = now, set()
        messages.add(event.message)
        self._similar[similar_key] = (first, messages)
        if len(messages) > self._max_similar:
            event = attrs.evolve(
                event, message=f"(combined from similar events): {event.message}"
            )
        identical_key = (*similar_key, event.message)
        previous = self._identical.get(identical_key)
        if previous is not None and now - previous[0] <= self._window:
            event = attrs.evolve(
                event,
                count=previous[1].count + 1,
                first_timestamp=previous[1].first_timestamp,
            )
        self._identical[identical_key] = (now, event)
        self._trim()
        return event

    def _allow(self, event: Event, now: float) -> bool:
        key = (event.involved, event.controller)
        state = self._spam.get(key)
        if state is None:
            state = self._spam[key] = _Spam(tokens=self._burst, last=now)
        else:
            state.tokens = min(self._burst, state.tokens + (now - state.last) / self._refill)
            state.last = now
        if state.tokens < 1.0:
            return False
        state.tokens -= 1.0
        return True

    def _trim(self) -> None:
        for table in (self._similar, self._identical, self._spam):
            while len(table) > self._max_entries:
                del table[next(iter(table))]


@attrs.define(eq=False)
class _SinkSlot:
    sink: EventSink
    send: trio.MemorySendChannel[Event]
    receive: trio.MemoryReceiveChannel[Event]
    delivered: int = 0
    failed: int = 0


class EventRecorder:
    """Records events without ever blocking the caller, and feeds them to sinks.

    Run :meth:`run` in the manager's services nursery (the manager does this). Until it runs,
    events wait in the bounded buffer (default 1024 events); beyond it they are dropped and
    counted under ``("*", "buffer_full")``.
    """

    def __init__(
        self,
        *,
        buffer_size: int = 1024,
        sink_buffer_size: int = 256,
        correlator: EventCorrelator | None = None,
        controller: str = "",
    ) -> None:
        if buffer_size < 1:
            raise ValueError("buffer_size must be >= 1")
        self._send, self._receive = trio.open_memory_channel[Event](buffer_size)
        self._sink_buffer_size = sink_buffer_size
        self._correlator = correlator if correlator is not None else EventCorrelator()
        self._slots: list[_SinkSlot] = []
        self._taps: list[Callable[[Event], None]] = []
        self._drops: dict[tuple[str, str], int] = {}
        self._emitted = 0
        self._closed = False
        self._done = trio.Event()
        self.controller = controller

    # -- emitting ----------------------------------------------------------------------------

    def emit(
        self,
        involved: ObjectRef,
        type: EventType,
        reason: str,
        message: str,
        *,
        controller: str | None = None,
        metadata: Mapping[str, str] | None = None,
        run_id: str | None = None,
    ) -> None:
        """Record one event. Never awaits, never raises; O(1). Dropped (and counted) if full.

        Secrets in ``message`` and ``metadata`` are masked (:func:`engine._text.redact`) before any sink sees it.
        """
        try:
            now = time.time()
            event = Event(
                involved=involved,
                type=type,
                reason=str(reason),
                message=redact(str(message)),
                controller=self.controller if controller is None else str(controller),
                timestamp=now,
                first_timestamp=now,
                metadata=redact_value(dict(metadata)) if metadata else {},
                run_id=run_id,
            )
            self._emitted += 1
            for tap in self._taps:
                tap(event)
            if self._closed:
                self._count_drop("*", "closed")
                return
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self._count_drop("*", "buffer_full")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._count_drop("*", "closed")
        except Exception:  # emit must never raise into a reconciler
            self._count_drop("*", "error")
            logger.exception("event could not be recorded")

    def normal(self, involved: ObjectRef, reason: str, message: str, **kwargs: Any) -> None:
        """Emit a ``Normal`` event. See :meth:`emit`."""
        self.emit(involved, EventType.NORMAL, reason, message, **kwargs)

    def warning(self, involved: ObjectRef, reason: str, message: str, **kwargs: Any) -> None:
        """Emit a ``Warning`` event. See :meth:`emit`."""
        self.emit(involved, EventType.WARNING, reason, message, **kwargs)

    def for_object(self, involved: ObjectRef, *, controller: str = "", run_id: str | None = None) -> ObjectEvents:
        """An emitter bound to one object, as reconcilers get it in ``ctx.events``."""
        return ObjectEvents(self, involved, controller, run_id)

    # -- sinks -------------------------------------------------------------------------------

    def add_sink(self, sink: EventSink, *, buffer_size: int | None = None) -> None:
        """Attach a sink with its own bounded queue. Add sinks before :meth:`run` starts."""
        size = self._sink_buffer_size if buffer_size is None else buffer_size
        send, receive = trio.open_memory_channel[Event](size)
        self._slots.append(_SinkSlot(sink=sink, send=send, receive=receive))

    def add_tap(self, tap: Callable[[Event], None]) -> None:
        """Call ``tap(event)`` synchronously with every event as it is emitted, before
        correlation, buffering and sinks (a test's record that no sink can hold up). A tap
        must not raise or checkpoint; one that raises makes :meth:`emit` drop that event
        (counted as ``error``)."""
        self._taps.append(tap)

    @property
    def sinks(self) -> list[EventSink]:
        return [slot.sink for slot in self._slots]

    def _count_drop(self, sink: str, reason: str, count: int = 1) -> None:
        key = (sink, reason)
        self._drops[key] = self._drops.get(key, 0) + count

    def drops(self) -> dict[tuple[str, str], int]:
        """Dropped events by ``(sink name, reason)``; sink ``"*"`` is the recorder itself.

        Reasons: ``buffer_full``, ``closed``, ``spam``, ``error`` (recorder); ``queue_full``,
        ``not_flushed`` (per sink).
        """
        return dict(self._drops)

    def statistics(self) -> EventRecorderStatistics:
        """A snapshot of the counters: emitted, per-sink delivered/failed, drops."""
        return EventRecorderStatistics(
            emitted=self._emitted,
            sinks={
                slot.sink.name: EventSinkStatistics(delivered=slot.delivered, failed=slot.failed)
                for slot in self._slots
            },
            drops=self.drops(),
        )

    # -- running -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Dispatch events to sinks until :meth:`close`, then let sinks drain.

        Returns once every sink delivered what it had queued. Either way, sinks with an
        ``aclose()`` method are closed (shielded, at most 1 s each), and the recorder is closed:
        events emitted afterwards are counted as ``closed``.

        Cancellation: (the flush timeout of a shutdown, or a forced one) deliveries in flight
        are abandoned; events still queued for a sink, and events still in the recorder's own
        buffer (for every sink), are counted as that sink's ``not_flushed``; sinks are still
        closed.
        """
        try:
            async with trio.open_nursery() as nursery:
                for slot in self._slots:
                    nursery.start_soon(self._drain_sink, slot)
                task_status.started()
                async for event in self._receive:
                    try:
                        correlated = self._correlator.correlate(event)
                    except Exception:
                        self._count_drop("*", "error")
                        logger.exception("event could not be correlated; dropped")
                        continue
                    if correlated is None:
                        self._count_drop("*", "spam")
                        continue
                    for slot in self._slots:
                        try:
                            slot.send.send_nowait(correlated)
                        except trio.WouldBlock:
                            self._count_drop(slot.sink.name, "queue_full")
                for slot in self._slots:
                    slot.send.close()
        finally:
            # Nothing dispatches after this: later emits count as closed, and what is still in
            # the recorder's own buffer was lost for every sink, as what a sink had queued.
            self._closed = True
            self._send.close()
            undispatched = self._receive.statistics().current_buffer_used
            self._receive.close()
            for slot in self._slots:
                left = slot.receive.statistics().current_buffer_used + undispatched
                if left:
                    self._count_drop(slot.sink.name, "not_flushed", left)
                aclose = getattr(slot.sink, "aclose", None)
                if aclose is not None:
                    with trio.CancelScope(shield=True, deadline=trio.current_time() + 1.0):
                        try:
                            await aclose()
                        except Exception:
                            logger.warning("event sink %s failed to close", slot.sink.name, exc_info=True)
            self._done.set()

    async def _drain_sink(self, slot: _SinkSlot) -> None:
        async for event in slot.receive:
            try:
                await slot.sink.deliver(event)
            except Exception as exc:
                slot.failed += 1
                logger.warning(
                    "event sink %s failed to deliver %s %s: %s",
                    slot.sink.name, event.reason, event.involved, summarize(exc),
                )
            else:
                slot.delivered += 1

    def close(self) -> None:
        """Stop accepting events; the dispatcher delivers what is buffered, then returns.

        Idempotent; not a checkpoint. Events emitted afterwards are counted as ``closed``.
        """
        if not self._closed:
            self._closed = True
            self._send.close()

    async def wait_flushed(self) -> None:
        """Wait until :meth:`run` has returned (everything delivered, or it was cancelled).

        Cancellation: a checkpoint; nothing changes.
        """
        await self._done.wait()


class ObjectEvents:
    """An event emitter bound to one object: ``ctx.events.normal(reason, message)``.

    Never awaits and never raises.
    """

    __slots__ = ("_recorder", "_involved", "_controller", "_run_id")

    def __init__(self, recorder: EventRecorder, involved: ObjectRef, controller: str, run_id: str | None) -> None:
        self._recorder = recorder
        self._involved = involved
        self._controller = controller
        self._run_id = run_id

    def normal(self, reason: str, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        self._recorder.emit(
            self._involved, EventType.NORMAL, reason, message,
            controller=self._controller, metadata=metadata, run_id=self._run_id,
        )

    def warning(self, reason: str, message: str, *, metadata: Mapping[str, str] | None = None) -> None:
        self._recorder.emit(
            self._involved, EventType.WARNING, reason, message,
            controller=self._controller, metadata=metadata, run_id=self._run_id,
        )
