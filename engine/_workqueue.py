"""A work queue with client-go's semantics and priorities, on trio.

Invariants:

* a key is ready at most once (``_dirty`` holds the keys to hand out);
* a key is handed to at most one worker at a time (``_processing``);
* ``add`` while a key is processing marks it dirty (and ``_redo``); ``done`` re-delivers it
  right away;
* the highest priority ready first, first in, first out within a priority;
* a key keeps the best priority it was given until it is handed out (``_prio``; a pending
  delay keeps its own in ``_delay_prio``);
* no starvation: at most ``max_overtakes`` hand-outs in a row pass over the key that has been
  ready longest (``_overtakes``).

A ready key is an entry in the lane of its priority, so the head of a lane is its oldest key.
The ``NORMAL`` lane holds bare keys (every trigger's path: no allocation); an entry of another
lane is ``(order, normals, key)``: its rank among the entries of the other lanes, and how many
entries the ``NORMAL`` lane had taken before it. So the ``NORMAL`` head, the
``_normal_in - len(_normal)``-th entry of its lane, is older than another head exactly when
that number is below the other's ``normals``, and the oldest ready key is found among the
heads without a ticket per key. A key raised to a better priority while ready gets a new
entry in the better lane; its old entry stays behind, counted in ``_stale`` of its lane, and
is dropped when it reaches the head (a key's stale entries in a lane always come before its
live one there).
"""

from __future__ import annotations

import collections
import heapq
import math
from collections.abc import Callable, Hashable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Generic, Protocol, TypeVar

import attrs
import outcome
import trio

from ._errors import QueueShutDown
from ._ratelimit import RateLimiter, default_rate_limiter
from ._refs import Priority

__all__ = ["WorkQueue", "WorkQueueStatistics", "QueueObserver"]

K = TypeVar("K", bound=Hashable)

_NORMAL = Priority.NORMAL
_HIGH = Priority.HIGH
_LANES = (Priority.HIGH, Priority.NORMAL, Priority.LOW)
"""The priorities, best first: the order of :attr:`WorkQueue._lanes`."""


class QueueObserver(Protocol):
    """Receives queue activity, for metrics. Every method is called synchronously."""

    def on_add(self, key: Hashable) -> None:
        """``key`` entered the ready channel."""

    def on_get(self, key: Hashable, queued_for: float) -> None:
        """``key`` was handed to a worker after waiting ``queued_for`` seconds."""

    def on_done(self, key: Hashable, worked_for: float) -> None:
        """A worker finished ``key`` after ``worked_for`` seconds."""

    def on_retry(self, key: Hashable) -> None:
        """``key`` was scheduled for a rate-limited retry."""


@attrs.frozen
class WorkQueueStatistics:
    """A snapshot of a :class:`WorkQueue`."""

    depth: int
    """Keys in the ready channel, waiting for a worker."""
    processing: int
    """Keys handed to a worker and not yet ``done``."""
    waiting: int
    """Keys with a pending delay (``add_after`` or a rate-limited retry)."""
    adds_total: int
    """Keys that entered the ready channel since the queue was made."""
    retries_total: int
    """Rate-limited retries scheduled since the queue was made."""
    shut_down: bool
    """Whether :meth:`WorkQueue.shutdown` was called."""
    longest_processing: float
    """Seconds the longest-running key has been processing (0 when none)."""
    last_delay_ends_in: float = 0.0
    """Seconds until the last pending delay ends (0 when none): with rate-limited retries
    after many failures, up to the rate limiter's cap."""
    depth_by_priority: Mapping[Priority, int] = attrs.field(factory=dict)
    """Keys in the ready channel, by priority (every priority, 0 when none)."""
    longest_wait_by_priority: Mapping[Priority, float] = attrs.field(factory=dict)
    """Seconds the longest-ready key of each priority has been ready (0 when none). The queue
    times keys only while it has an observer; without one every wait is 0."""


class WorkQueue(Generic[K]):
    """Deduplicating, rate-limited, delaying priority work queue.

    Keys become ready by :meth:`add` (now), :meth:`add_after` (later) or
    :meth:`add_rate_limited` (after the rate limiter's delay), each at a :class:`Priority`
    (``NORMAL`` unless given). Workers call :meth:`get`, do the work, and must call
    :meth:`done`.

    Priorities: the highest priority ready key is handed out first, and keys of one priority
    first in, first out (in the order they reached that priority). A key keeps the best
    priority it was given until it is handed out: adding a ready key at a better priority
    moves it to the back of that priority, adding it at a worse one changes nothing, a key
    added while processing is re-delivered at the best priority it was added at, and a
    delayed key becomes ready at the best priority its delays were given (if it is ready
    already by then, at a worse one, it moves up). :attr:`handed_out_priority` tells the
    priority a key was handed out at, so a requeue can keep it.

    No starvation, the bound: at most ``max_overtakes`` hand-outs in a row pass over the key
    that has been ready longest (they hand out a younger key of a higher priority); the next
    one hands it out. So a key that becomes ready while ``n`` keys are ready is handed out
    within ``(n + 1) * (max_overtakes + 1)`` hand-outs, however many higher-priority keys
    arrive meanwhile; with no higher-priority key arriving, within ``n + 1``. The default, 32,
    leaves lower priorities at least one hand-out in 33 under a flood of changes.

    Delays need the queue's timer task: run :meth:`run` in a nursery (``await
    nursery.start(queue.run)``). Without it, immediate adds still work and delayed keys wait.

    An immediate :meth:`add` pre-empts a pending delay for the same key: the key is delivered
    now, and the run that happens in between *consumes* the delay (a key's pending delay is
    dropped when the key is handed to a worker). So a periodic ``add_after`` is not run twice
    when an event-driven run came first; the run that did happen schedules the next one.

    ``add`` and ``get`` cost O(1); delays cost O(log n).
    """

    def __init__(
        self,
        *,
        rate_limiter: RateLimiter | None = None,
        observer: QueueObserver | None = None,
        name: str = "",
        max_overtakes: int = 32,
    ) -> None:
        if max_overtakes < 0:
            raise ValueError("max_overtakes must be >= 0")
        self.name = name
        self.max_overtakes = max_overtakes
        """How many hand-outs in a row may pass over the key ready longest (see the class)."""
        self._normal: collections.deque[K] = collections.deque()
        self._high: collections.deque[tuple[int, int, K]] = collections.deque()
        self._low: collections.deque[tuple[int, int, K]] = collections.deque()
        self._lanes: tuple[collections.deque[Any], ...] = (self._high, self._normal, self._low)
        """The ready keys, one lane per priority, best first (see the module)."""
        self._stale: tuple[dict[K, int], ...] = tuple({} for _ in _LANES)
        """Per lane, the keys with entries left behind by a move to a better lane, and how many."""
        self._ranked = 0
        """Entries in the ``HIGH`` and ``LOW`` lanes, and stale entries: while there are none,
        ``get`` takes the head of the ``NORMAL`` lane without looking further."""
        self._queued = 0
        """Live entries in the lanes."""
        self._flight: set[K] = set()
        """Keys handed straight to a waiting getter that has not resumed yet (ready, in no lane)."""
        self._normal_in = 0
        """Entries the ``NORMAL`` lane has taken."""
        self._others_in = 0
        """Entries the other lanes have taken."""
        self._direct = 0
        """Keys handed straight to a waiting getter."""
        self._moves = 0
        """Entries made by a move to a better lane (entries that are not adds)."""
        self._overtakes = 0
        """Hand-outs in a row that passed over the key ready longest."""
        self._prio: dict[K, Priority] = {}
        """The priority of each dirty key that is not ``NORMAL``."""
        self._delay_prio: dict[K, Priority] = {}
        """The priority of each pending delay that is not ``NORMAL``."""
        self._getters: collections.OrderedDict[trio.lowlevel.Task, None] = collections.OrderedDict()
        self._dirty: dict[K, Any] = {}
        """Keys to hand out (ready, or processing and added again), each with the note its
        adder left (``None`` from :meth:`add`; the controller's trigger from
        :meth:`add_noted`), which goes with the key when it is handed out."""
        self._processing: dict[K, float] = {}
        """Keys handed out and not ``done``: the trio time each was handed out."""
        self._redo: set[K] = set()
        """The dirty keys that are processing (ready again at ``done``): a set that is empty
        but for them, so ``done`` does not look every key up in ``_dirty``."""
        self._queued_at: dict[K, float] = {}
        self._waiting: dict[K, tuple[float, int]] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._heap_seq = 0
        self._limiter: RateLimiter = rate_limiter if rate_limiter is not None else default_rate_limiter()
        self._observer = observer
        self._failing: set[K] = set()
        self._shut = False
        self._idle = trio.Event()
        self._timer_scope: trio.CancelScope | None = None
        self._sleep_scope: trio.CancelScope | None = None
        self._now: Callable[[], float] = trio.current_time
        """``trio.current_time``, or while :meth:`run` runs, the run's clock read directly."""
        self.handed_out_at = 0.0
        """When the key that :meth:`get` or :meth:`get_nowait` returned last was handed out:
        what :meth:`started_at` says for it, without a lookup. Read it before your next
        checkpoint (another task may take a key after it); the controller's worker does."""
        self.handed_out_note: Any = None
        """The note that key carried (see :meth:`add_noted`; ``None`` if none), read the same
        way."""
        self.handed_out_priority: Priority = _NORMAL
        """The priority that key was handed out at, read the same way."""
        self._retries_total = 0

    @property
    def observer(self) -> QueueObserver | None:
        """The queue's observer (metrics); settable, ``None`` for none."""
        return self._observer

    @observer.setter
    def observer(self, observer: QueueObserver | None) -> None:
        self._observer = observer

    # -- adding ------------------------------------------------------------------------------

    def add(self, key: K, priority: Priority = _NORMAL) -> bool:
        """Make ``key`` ready now at ``priority``, unless it already is (then it keeps the
        better of its priority and ``priority``).

        If ``key`` is being processed it is marked dirty and re-delivered right after
        :meth:`done`. Returns ``False`` (and does nothing) once the queue is shut down, else
        ``True``. Not a checkpoint; never blocks.
        """
        return self.add_noted(key, None, priority) is not False

    def add_noted(self, key: K, note: Any, priority: Priority = _NORMAL) -> Any:
        """:meth:`add`, and keep ``note`` with ``key`` until it is handed out (it is
        :attr:`handed_out_note` then; ``None`` never replaces a note). The controller's
        trigger path: a key's newest trigger rides in the queue's own record of the key, so a
        run costs no lookup in a map of the controller's.

        If ``key`` was dirty already with a note (not ``None``), that note stays and is
        returned; the caller may put its own in its place with :meth:`replace_note`. Otherwise
        returns ``None``, or ``False`` (and does nothing) once the queue is shut down. Not a
        checkpoint; never blocks.
        """
        if self._shut:
            return False
        dirty = self._dirty
        size = len(dirty)
        kept = dirty.setdefault(key, note)
        if len(dirty) == size:
            if kept is None:
                dirty[key] = note
            if priority is not _NORMAL or self._prio:
                self._raise(key, priority)
            return kept
        if priority is not _NORMAL:
            self._prio[key] = priority
            if key in self._processing:
                self._redo.add(key)
            else:
                self._enqueue(key)
            return None
        processing = self._processing
        if processing and key in processing:
            self._redo.add(key)
            return None
        # _enqueue(key), inlined: this is every trigger's path.
        if self._getters:
            # A worker is waiting, so no key is ready: hand this one over directly.
            task, _ = self._getters.popitem(last=False)
            self._direct += 1
            self._flight.add(key)
            self._overtakes = 0
            trio.lowlevel.reschedule(task, outcome.Value(key))
        else:
            self._queued += 1
            self._normal_in += 1
            self._normal.append(key)
        if self._observer is not None:
            self._queued_at[key] = trio.current_time()
            self._observer.on_add(key)
        return None

    def replace_note(self, key: K, note: Any) -> None:
        """Put ``note`` in place of the note of ``key``, which must be dirty (call it right
        after :meth:`add_noted` returned the note ``key`` had). Not a checkpoint."""
        self._dirty[key] = note

    def _raise(self, key: K, priority: Priority) -> None:
        """Give dirty ``key`` ``priority`` if that is better than its own; a ready key moves to
        the back of the better lane."""
        prio = self._prio
        current = prio.get(key, _NORMAL)
        if priority <= current:
            return
        if priority is _NORMAL:
            del prio[key]
        else:
            prio[key] = priority
        if key in self._processing or key in self._flight:
            return
        stale = self._stale[_LANES.index(current)]
        stale[key] = stale.get(key, 0) + 1
        self._ranked += 1
        self._moves += 1
        self._append(key, priority)

    def _append(self, key: K, priority: Priority) -> None:
        if priority is _NORMAL:
            self._normal_in += 1
            self._normal.append(key)
        else:
            self._others_in += 1
            self._ranked += 1
            (self._high if priority is _HIGH else self._low).append((self._others_in, self._normal_in, key))

    def _enqueue(self, key: K) -> None:
        if self._getters:
            task, _ = self._getters.popitem(last=False)
            self._direct += 1
            self._flight.add(key)
            self._overtakes = 0
            trio.lowlevel.reschedule(task, outcome.Value(key))
        else:
            self._queued += 1
            self._append(key, self._prio.get(key, _NORMAL) if self._prio else _NORMAL)
        if self._observer is not None:
            self._queued_at[key] = trio.current_time()
            self._observer.on_add(key)

    def add_after(self, key: K, delay: float, priority: Priority = _NORMAL) -> bool:
        """Make ``key`` ready after ``delay`` seconds (immediately if ``delay <= 0``) at
        ``priority``.

        If ``key`` already has a pending delay, the earlier deadline and the better priority
        win. The delay is consumed if ``key`` is handed to a worker before it expires. Returns
        ``False`` once shut down. Not a checkpoint.
        """
        if self._shut:
            return False
        if delay <= 0:
            return self.add(key, priority)
        deadline = trio.current_time() + delay
        current = self._waiting.get(key)
        if priority is not _NORMAL or self._delay_prio:
            best = max(priority, self._delay_prio.get(key, _NORMAL)) if current is not None else priority
            if best is _NORMAL:
                self._delay_prio.pop(key, None)
            else:
                self._delay_prio[key] = best
        if current is not None and current[0] <= deadline:
            return True
        self._heap_seq += 1
        self._waiting[key] = (deadline, self._heap_seq)
        heapq.heappush(self._heap, (deadline, self._heap_seq, key))
        sleep_scope = self._sleep_scope
        if sleep_scope is not None and deadline < sleep_scope.deadline:
            sleep_scope.deadline = deadline
        return True

    def add_rate_limited(self, key: K, priority: Priority = _NORMAL) -> bool:
        """Schedule a retry of ``key`` after the rate limiter's delay for it, at ``priority``.

        Each call counts one more failure for ``key`` (see :meth:`num_requeues`) until
        :meth:`forget`. Returns ``False`` once shut down. Not a checkpoint.
        """
        if self._shut:
            return False
        self._retries_total += 1
        self._failing.add(key)
        if self._observer is not None:
            self._observer.on_retry(key)
        return self.add_after(key, self._limiter.when(key), priority)

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure count (call on success). Does not touch a pending delay."""
        if self._failing and key in self._failing:
            self._failing.discard(key)
            self._limiter.forget(key)

    @property
    def failing_keys(self) -> AbstractSet[K]:
        """The keys with rate-limited retries since they were last forgotten: a live view, the
        same set for the queue's life (empty: :meth:`num_requeues` is 0 and :meth:`forget`
        does nothing for every key)."""
        return self._failing

    def ready_in(self, key: K) -> float | None:
        """Seconds until ``key``'s pending delay (:meth:`add_after`, :meth:`add_rate_limited`)
        makes it ready, ``0.0`` if it is due; ``None`` if it has none. Not a checkpoint."""
        waiting = self._waiting.get(key)
        if waiting is None:
            return None
        return max(0.0, waiting[0] - trio.current_time())

    def num_requeues(self, key: K) -> int:
        """How many rate-limited retries ``key`` had since it was last forgotten."""
        return self._limiter.num_requeues(key) if self._failing and key in self._failing else 0

    # -- taking ------------------------------------------------------------------------------

    def get_nowait(self) -> K:
        """Take a ready key without waiting, or raise ``trio.WouldBlock`` if there is none.

        Raises :class:`QueueShutDown` once the queue is shut down. Not a checkpoint.
        """
        if self._shut:
            raise QueueShutDown(f"work queue {self.name!r} is shut down")
        if not self._queued:
            raise trio.WouldBlock
        self._queued -= 1
        if self._ranked:
            return self._take(self._pop_ranked())
        self._overtakes = 0
        return self._take(self._normal.popleft())

    async def get(self) -> K:
        """Wait for a ready key and hand it to the caller, who must later call :meth:`done`.

        Raises :class:`QueueShutDown` once the queue is shut down; keys still ready then are
        dropped.

        Cancellation: a checkpoint; if cancelled, no key is taken and the queue is unchanged.
        """
        if self._shut:
            raise QueueShutDown(f"work queue {self.name!r} is shut down")
        key: K
        if self._queued:
            await trio.lowlevel.checkpoint_if_cancelled()
            # _pop(), inlined: this is every run's path.
            self._queued -= 1
            if self._ranked:
                key = self._pop_ranked()
            else:
                self._overtakes = 0
                key = self._normal.popleft()
            # In no lane and not processing until this task resumes: in flight, so an add
            # meanwhile does not take it for a ready key and move it to a better lane.
            self._flight.add(key)
            await trio.lowlevel.cancel_shielded_checkpoint()
            self._flight.discard(key)
        else:
            task = trio.lowlevel.current_task()
            getters = self._getters
            getters[task] = None

            def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
                del getters[task]
                return trio.lowlevel.Abort.SUCCEEDED

            key = await trio.lowlevel.wait_task_rescheduled(abort)
            self._flight.discard(key)
        if self._shut:
            raise QueueShutDown(f"work queue {self.name!r} is shut down")
        # _take(key), inlined: this is every run's path.
        now = self.handed_out_at = self._now()
        self.handed_out_note = self._dirty.pop(key, None)
        self.handed_out_priority = self._prio.pop(key, _NORMAL) if self._prio else _NORMAL
        self._processing[key] = now
        if self._waiting and key in self._waiting:
            del self._waiting[key]
            self._delay_prio.pop(key, None)
        if self._observer is not None:
            self._observer.on_get(key, now - self._queued_at.pop(key, now))
        return key

    def _take(self, key: K) -> K:
        now = self.handed_out_at = self._now()
        self.handed_out_note = self._dirty.pop(key, None)
        self.handed_out_priority = self._prio.pop(key, _NORMAL) if self._prio else _NORMAL
        self._processing[key] = now
        if self._waiting and key in self._waiting:
            del self._waiting[key]
            self._delay_prio.pop(key, None)
        if self._observer is not None:
            self._observer.on_get(key, now - self._queued_at.pop(key, now))
        return key

    def _pop_ranked(self) -> K:
        """Remove and return the next key to hand out, when more than the ``NORMAL`` lane may
        hold entries (``get`` takes the head of that lane itself otherwise)."""
        high, normal, low = self._high, self._normal, self._low
        stale_high, stale_normal, stale_low = self._stale
        if stale_high:
            self._strip(high, stale_high, True)
        if stale_normal:
            self._strip(normal, stale_normal, False)
        if stale_low:
            self._strip(low, stale_low, True)
        other = high if high else low
        if low and high and low[0][0] < high[0][0]:
            other = low
        oldest: collections.deque[Any] = normal if normal and (
            not other or self._normal_in - len(normal) < other[0][1]
        ) else other
        best: collections.deque[Any] = high if high else (normal if normal else low)
        if best is oldest:
            self._overtakes = 0
        elif self._overtakes >= self.max_overtakes:
            self._overtakes = 0
            best = oldest
        else:
            self._overtakes += 1
        if best is normal:
            return normal.popleft()
        self._ranked -= 1
        key: K = best.popleft()[2]
        return key

    def _strip(self, lane: collections.deque[Any], stale: dict[K, int], entries: bool) -> None:
        """Drop the stale entries at the head of ``lane`` (``entries``: a lane of tuples)."""
        while lane:
            head = lane[0][2] if entries else lane[0]
            left = stale.get(head)
            if left is None:
                return
            lane.popleft()
            self._ranked -= 1
            if left == 1:
                del stale[head]
            else:
                stale[head] = left - 1

    def is_processing(self, key: K) -> bool:
        """Whether ``key`` was handed out and is not ``done`` yet."""
        return key in self._processing

    def started_at(self, key: K) -> float:
        """trio clock time at which ``key`` was handed out; ``KeyError`` if not processing."""
        return self._processing[key]

    def done(self, key: K) -> None:
        """Mark ``key`` finished; if it was added meanwhile, it is ready again at once.

        Calling ``done`` for a key that is not processing raises ``ValueError``. Not a
        checkpoint.
        """
        try:
            started = self._processing.pop(key)
        except KeyError:
            raise ValueError(f"done() called for {key!r}, which is not being processed") from None
        if self._observer is not None:
            self._observer.on_done(key, trio.current_time() - started)
        if self._shut:
            if not self._processing:
                self._idle.set()
            return
        redo = self._redo
        if redo and key in redo:
            redo.discard(key)
            self._enqueue(key)

    # -- lifecycle ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop accepting and handing out keys. Idempotent; not a checkpoint.

        Waiting and future :meth:`get` calls raise :class:`QueueShutDown`; keys that are ready
        or delayed are dropped. Keys already handed out may still be :meth:`done`;
        :meth:`drain` waits for them.
        """
        if self._shut:
            return
        self._shut = True
        for lane, stale in zip(self._lanes, self._stale, strict=True):
            lane.clear()
            stale.clear()
        self._ranked = self._queued = 0
        self._prio.clear()
        self._delay_prio.clear()
        getters, self._getters = self._getters, collections.OrderedDict()
        for task in getters:
            trio.lowlevel.reschedule(task, outcome.Error(QueueShutDown(f"work queue {self.name!r} is shut down")))
        self._dirty.clear()
        self._redo.clear()
        self._waiting.clear()
        self._heap.clear()
        self._queued_at.clear()
        if self._timer_scope is not None:
            self._timer_scope.cancel(reason="work queue shut down")
        if not self._processing:
            self._idle.set()

    @property
    def shut_down(self) -> bool:
        """Whether :meth:`shutdown` was called."""
        return self._shut

    async def drain(self) -> None:
        """Wait until the queue is shut down and every handed-out key is ``done``.

        Cancellation: a checkpoint; nothing changes; call again to keep waiting.
        """
        await self._idle.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the timer that moves delayed keys to the ready channel, until :meth:`shutdown`.

        ``task_status.started()`` at once.

        Cancellation: delayed keys stay pending; they are delivered if the timer runs again.
        """
        self._now = trio.lowlevel.current_clock().current_time
        try:
            await self._run_timer(task_status)
        finally:
            self._now = trio.current_time

    async def _run_timer(self, task_status: trio.TaskStatus[None]) -> None:
        with trio.CancelScope() as timer_scope:
            self._timer_scope = timer_scope
            if self._shut:
                timer_scope.cancel()
            task_status.started()
            heap = self._heap
            while True:
                self._fire_due()
                with trio.CancelScope(deadline=heap[0][0] if heap else math.inf) as sleep_scope:
                    self._sleep_scope = sleep_scope
                    await trio.sleep_forever()
                self._sleep_scope = None
        self._timer_scope = None

    def _fire_due(self) -> None:
        heap = self._heap
        now = trio.current_time()
        while heap and heap[0][0] <= now:
            deadline, seq, key = heapq.heappop(heap)
            if self._waiting.get(key) == (deadline, seq):
                del self._waiting[key]
                self.add(key, self._delay_prio.pop(key, _NORMAL) if self._delay_prio else _NORMAL)

    def __len__(self) -> int:
        """Number of keys ready and waiting for a worker."""
        return self._queued + len(self._flight) if not self._shut else 0

    def statistics(self) -> WorkQueueStatistics:
        """A snapshot of the queue's state and counters."""
        now = trio.current_time()
        longest = now - min(self._processing.values()) if self._processing else 0.0
        depths: dict[Priority, int] = {}
        waits: dict[Priority, float] = {}
        for priority, lane, stale in zip(_LANES, self._lanes, self._stale, strict=True):
            depths[priority] = 0 if self._shut else len(lane) - sum(stale.values())
            waits[priority] = 0.0
            skip = dict(stale)
            for entry in lane:
                key = entry if lane is self._normal else entry[2]
                if skip.get(key):
                    skip[key] -= 1
                    continue
                waits[priority] = now - self._queued_at.get(key, now)
                break
        return WorkQueueStatistics(
            depth=len(self),
            processing=len(self._processing),
            waiting=len(self._waiting),
            adds_total=self._normal_in + self._others_in + self._direct - self._moves,
            retries_total=self._retries_total,
            shut_down=self._shut,
            longest_processing=longest,
            last_delay_ends_in=max((d for d, _ in self._waiting.values()), default=now) - now,
            depth_by_priority=depths,
            longest_wait_by_priority=waits,
        )
