"""A work queue with client-go's semantics, on trio.

Invariants:

* a key is ready at most once (``_dirty`` holds the keys to hand out);
* a key is handed to at most one worker at a time (``_processing``);
* ``add`` while a key is processing marks it dirty (and ``_redo``); ``done`` re-delivers it
  right away;
* ready keys are handed out first in, first out.
"""

from __future__ import annotations

import collections
import heapq
import math
from collections.abc import Callable, Hashable
from collections.abc import Set as AbstractSet
from typing import Any, Generic, Protocol, TypeVar

import attrs
import outcome
import trio

from ._errors import QueueShutDown
from ._ratelimit import RateLimiter, default_rate_limiter

__all__ = ["WorkQueue", "WorkQueueStatistics", "QueueObserver"]

K = TypeVar("K", bound=Hashable)


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


class WorkQueue(Generic[K]):
    """Deduplicating, rate-limited, delaying work queue.

    Keys become ready by :meth:`add` (now), :meth:`add_after` (later) or
    :meth:`add_rate_limited` (after the rate limiter's delay). Workers call :meth:`get`, do the
    work, and must call :meth:`done`.

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
    ) -> None:
        self.name = name
        self._ready_keys: collections.deque[K] = collections.deque()
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
        self._ready = 0
        self._shut = False
        self._idle = trio.Event()
        self._timer_scope: trio.CancelScope | None = None
        self._sleep_scope: trio.CancelScope | None = None
        self._adds_total = 0
        self._now: Callable[[], float] = trio.current_time
        """``trio.current_time``, or while :meth:`run` runs, the run's clock read directly."""
        self.handed_out_at = 0.0
        """When the key that :meth:`get` or :meth:`get_nowait` returned last was handed out:
        what :meth:`started_at` says for it, without a lookup. Read it before your next
        checkpoint (another task may take a key after it); the controller's worker does."""
        self.handed_out_note: Any = None
        """The note that key carried (see :meth:`add_noted`; ``None`` if none), read the same
        way."""
        self._retries_total = 0

    @property
    def observer(self) -> QueueObserver | None:
        """The queue's observer (metrics); settable, ``None`` for none."""
        return self._observer

    @observer.setter
    def observer(self, observer: QueueObserver | None) -> None:
        self._observer = observer

    # -- adding ------------------------------------------------------------------------------

    def add(self, key: K) -> bool:
        """Make ``key`` ready now, unless it already is.

        If ``key`` is being processed it is marked dirty and re-delivered right after
        :meth:`done`. Returns ``False`` (and does nothing) once the queue is shut down, else
        ``True``. Not a checkpoint; never blocks.
        """
        return self.add_noted(key, None) is not False

    def add_noted(self, key: K, note: Any) -> Any:
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
            return kept
        processing = self._processing
        if processing and key in processing:
            self._redo.add(key)
            return None
        # _enqueue(key), inlined: this is every trigger's path.
        self._ready += 1
        self._adds_total += 1
        if self._getters:
            task, _ = self._getters.popitem(last=False)
            trio.lowlevel.reschedule(task, outcome.Value(key))
        else:
            self._ready_keys.append(key)
        if self._observer is not None:
            self._queued_at[key] = trio.current_time()
            self._observer.on_add(key)
        return None

    def replace_note(self, key: K, note: Any) -> None:
        """Put ``note`` in place of the note of ``key``, which must be dirty (call it right
        after :meth:`add_noted` returned the note ``key`` had). Not a checkpoint."""
        self._dirty[key] = note

    def _enqueue(self, key: K) -> None:
        self._ready += 1
        self._adds_total += 1
        if self._getters:
            # A worker is waiting, so no key is ready: hand this one over directly.
            task, _ = self._getters.popitem(last=False)
            trio.lowlevel.reschedule(task, outcome.Value(key))
        else:
            self._ready_keys.append(key)
        if self._observer is not None:
            self._queued_at[key] = trio.current_time()
            self._observer.on_add(key)

    def add_after(self, key: K, delay: float) -> bool:
        """Make ``key`` ready after ``delay`` seconds (immediately if ``delay <= 0``).

        If ``key`` already has a pending delay, the earlier deadline wins. The delay is consumed
        if ``key`` is handed to a worker before it expires. Returns ``False`` once shut down.
        Not a checkpoint.
        """
        if self._shut:
            return False
        if delay <= 0:
            return self.add(key)
        deadline = trio.current_time() + delay
        current = self._waiting.get(key)
        if current is not None and current[0] <= deadline:
            return True
        self._heap_seq += 1
        self._waiting[key] = (deadline, self._heap_seq)
        heapq.heappush(self._heap, (deadline, self._heap_seq, key))
        sleep_scope = self._sleep_scope
        if sleep_scope is not None and deadline < sleep_scope.deadline:
            sleep_scope.deadline = deadline
        return True

    def add_rate_limited(self, key: K) -> bool:
        """Schedule a retry of ``key`` after the rate limiter's delay for it.

        Each call counts one more failure for ``key`` (see :meth:`num_requeues`) until
        :meth:`forget`. Returns ``False`` once shut down. Not a checkpoint.
        """
        if self._shut:
            return False
        self._retries_total += 1
        self._failing.add(key)
        if self._observer is not None:
            self._observer.on_retry(key)
        return self.add_after(key, self._limiter.when(key))

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
        if not self._ready_keys:
            raise trio.WouldBlock
        return self._take(self._ready_keys.popleft())

    async def get(self) -> K:
        """Wait for a ready key and hand it to the caller, who must later call :meth:`done`.

        Raises :class:`QueueShutDown` once the queue is shut down; keys still ready then are
        dropped.

        Cancellation: a checkpoint; if cancelled, no key is taken and the queue is unchanged.
        """
        if self._shut:
            raise QueueShutDown(f"work queue {self.name!r} is shut down")
        key: K
        if self._ready_keys:
            await trio.lowlevel.checkpoint_if_cancelled()
            key = self._ready_keys.popleft()
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            task = trio.lowlevel.current_task()
            getters = self._getters
            getters[task] = None

            def abort(_: trio.lowlevel.RaiseCancelT) -> trio.lowlevel.Abort:
                del getters[task]
                return trio.lowlevel.Abort.SUCCEEDED

            key = await trio.lowlevel.wait_task_rescheduled(abort)
        if self._shut:
            raise QueueShutDown(f"work queue {self.name!r} is shut down")
        # _take(key), inlined: this is every run's path.
        self._ready -= 1
        now = self.handed_out_at = self._now()
        self.handed_out_note = self._dirty.pop(key, None)
        self._processing[key] = now
        if self._waiting:
            self._waiting.pop(key, None)
        if self._observer is not None:
            self._observer.on_get(key, now - self._queued_at.pop(key, now))
        return key

    def _take(self, key: K) -> K:
        self._ready -= 1
        now = self.handed_out_at = self._now()
        self.handed_out_note = self._dirty.pop(key, None)
        self._processing[key] = now
        if self._waiting:
            self._waiting.pop(key, None)
        if self._observer is not None:
            self._observer.on_get(key, now - self._queued_at.pop(key, now))
        return key

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
        self._ready_keys.clear()
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
                self.add(key)

    def __len__(self) -> int:
        """Number of keys ready and waiting for a worker."""
        return self._ready if not self._shut else 0

    def statistics(self) -> WorkQueueStatistics:
        """A snapshot of the queue's state and counters."""
        now = trio.current_time()
        longest = now - min(self._processing.values()) if self._processing else 0.0
        return WorkQueueStatistics(
            depth=len(self),
            processing=len(self._processing),
            waiting=len(self._waiting),
            adds_total=self._adds_total,
            retries_total=self._retries_total,
            shut_down=self._shut,
            longest_processing=longest,
            last_delay_ends_in=max((d for d, _ in self._waiting.values()), default=now) - now,
        )
