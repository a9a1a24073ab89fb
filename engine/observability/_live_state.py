"""What the live stream remembers, so a client that connects late sees more than what runs now.

:class:`LiveState` folds the same hooks the live stream fans out (triggers, run starts and
ends, readiness reports, events) into a bounded record: per object its last outcome, its
trigger's revision and the revision its controller reported (in an event), whether it runs or is queued, its dependencies and a short timeline of recent runs;
and the newest events. The live stream sends it to each client right after ``hello``.
Every method is synchronous, cheap and never checkpoints.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from .._outcome import Outcome, OutcomeKind
from .._refs import ObjectRef

if TYPE_CHECKING:
    from .._run import Run

__all__ = ["LiveState", "ObjectState", "NOT_READY_STEPS"]

NOT_READY_STEPS = frozenset({"failed", "terminal_error", "deadline", "dependency_not_ready"})
"""Run endings after which the object itself no longer counts as Ready."""


@attrs.define(eq=False)
class ObjectState:
    """One object of one controller, as the live stream remembers it."""

    controller: str
    ref: ObjectRef
    revision: str | None = None
    """The revision of the newest trigger seen (for a watched Kubernetes object, its
    resourceVersion)."""
    reported_revision: str | None = None
    """The revision the controller last reported for the object: the ``revision`` in the
    metadata of its newest event about it (for the bundles plugin, the applied ``r1``)."""
    queued: bool = False
    """A trigger was accepted since the last run started."""
    running: dict[str, Any] | None = None
    """``run_id``, ``attempt``, ``ts`` (wall clock start) and, when traced, ``trace_id`` of the run in progress."""
    last: dict[str, Any] | None = None
    """How the last run ended: ``step``, ``result``, ``ts``, ``duration`` and, when set,
    ``error``, ``reason``, ``delay``, ``attempt``, ``run_id``, ``trace_id``."""
    dependencies: tuple[str, ...] = ()
    """What the object last reported waiting on (kept after it stopped waiting)."""
    history: deque[tuple[str, float, float]] = attrs.field(factory=deque)
    """Recent runs, oldest first: ``(step, wall-clock start, duration)``."""

    def to_message(self, ready: dict[str, bool]) -> dict[str, Any]:
        key = str(self.ref)
        return {
            "controller": self.controller,
            "object": key,
            "kind": self.ref.kind,
            "namespace": self.ref.namespace,
            "name": self.ref.name,
            "revision": self.revision,
            "reported_revision": self.reported_revision,
            "queued": self.queued,
            "running": self.running,
            "last": self.last,
            "ready": ready.get(key),
            "dependencies": [{"object": dep, "ready": ready.get(dep, False)} for dep in self.dependencies],
            "history": [list(entry) for entry in self.history],
        }


class LiveState:
    """A bounded memory of objects and events for the live stream's connect-time snapshot.

    At most ``max_objects`` objects are kept (the least recently active ones are forgotten
    first), each with its ``history`` most recent runs; the newest ``max_events`` events. Ready
    reports are kept for as many refs; a ref's own failing run (``failed``,
    ``terminal_error``, ``deadline``, ``dependency_not_ready``) clears it.
    """

    def __init__(self, *, max_objects: int = 20_000, history: int = 12, max_events: int = 200) -> None:
        if max_objects < 1:
            raise ValueError("max_objects must be >= 1")
        if history < 1:
            raise ValueError("history must be >= 1")
        self._max_objects = max_objects
        self._history = history
        self._objects: OrderedDict[tuple[str, ObjectRef], ObjectState] = OrderedDict()
        self._ready: OrderedDict[str, bool] = OrderedDict()
        self.events: deque[tuple[str, ObjectRef, dict[str, Any]]] = deque(maxlen=max_events)
        """The newest events, oldest first: controller, involved object, live-stream message."""

    def __len__(self) -> int:
        return len(self._objects)

    def get(self, controller: str, ref: ObjectRef) -> ObjectState | None:
        return self._objects.get((controller, ref))

    def _state(self, controller: str, ref: ObjectRef) -> ObjectState:
        key = (controller, ref)
        state = self._objects.get(key)
        if state is None:
            state = self._objects[key] = ObjectState(controller, ref, history=deque(maxlen=self._history))
            if len(self._objects) > self._max_objects:
                self._objects.popitem(last=False)
        else:
            self._objects.move_to_end(key)
        return state

    def triggered(self, controller: str, ref: ObjectRef, revision: str | None) -> None:
        state = self._state(controller, ref)
        state.queued = True
        if revision is not None:
            state.revision = revision

    def started(self, controller: str, run: Run, now: float) -> None:
        state = self._state(controller, run.key)
        state.queued = False
        if run.trigger.revision is not None:
            state.revision = run.trigger.revision
        state.running = {"run_id": run.id, "attempt": run.attempt, "ts": now}
        if run.trace_id is not None:
            state.running["trace_id"] = run.trace_id

    def finished(self, controller: str, run: Run, outcome: Outcome, step: str, message: dict[str, Any]) -> None:
        """``message`` is the live-stream ``run`` message of this end (its fields are kept)."""
        state = self._state(controller, run.key)
        started = state.running["ts"] if state.running is not None else message["ts"] - message["duration"]
        state.running = None
        state.last = {
            name: message[name]
            for name in (
                "step", "result", "ts", "duration", "error", "reason", "delay", "attempt", "run_id", "trace_id"
            )
            if message.get(name) is not None
        }
        state.history.append((step, round(started, 3), message["duration"]))
        if outcome.kind is OutcomeKind.DEPENDENCY_NOT_READY:
            state.dependencies = tuple(str(dep) for dep in outcome.dependencies)
        if step in NOT_READY_STEPS:
            key = str(run.key)
            if key in self._ready:
                self._ready[key] = False

    def mark_ready(self, ref: ObjectRef) -> None:
        key = str(ref)
        self._ready[key] = True
        self._ready.move_to_end(key)
        if len(self._ready) > self._max_objects:
            self._ready.popitem(last=False)

    def event(self, entry: tuple[str, ObjectRef, dict[str, Any]]) -> None:
        """Remember an event; its ``revision``, if any, becomes the reported revision of the
        object (of that controller) it is about, if that object is remembered."""
        self.events.append(entry)
        controller, ref, message = entry
        revision = message.get("revision")
        state = self._objects.get((controller, ref))
        if revision is not None and state is not None:
            state.reported_revision = revision

    def objects(self, wants: Callable[[str, ObjectRef], bool] | None = None) -> list[dict[str, Any]]:
        """Every remembered object as a message entry, least recently active first.

        ``wants(controller, ref)``, if given, selects which.
        """
        return [
            state.to_message(self._ready)
            for (controller, ref), state in self._objects.items()
            if wants is None or wants(controller, ref)
        ]

