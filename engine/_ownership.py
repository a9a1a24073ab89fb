"""Which keys this process may run: the ownership gate of a scale-out replica.

Several replicas of one manager divide the 64-bit key space (:mod:`engine._keyspace`); each
runs only the keys of the ranges it owns. An :class:`OwnershipGate` is that decision for one
manager: every worker asks it before a run starts, and the ring (``engine.kube.HashRing``)
moves ranges in and out of it.

* **Handing out.** A worker that takes a key whose 64-bit key (``key_of(ref)``) is not in the
  owned ranges, or is not known yet (an object without a uid), does not run it: the key is
  *parked* (dropped from the queue, remembered) and runs again only after a later trigger or a
  :meth:`OwnershipGate.gain` of its range. Keys that ran here are parked too when their range
  is given up. So a replica keeps no queued work for keys it does not own, and a gained range
  re-runs every key of it this replica knows: a run the previous owner cut short (``HANDOVER``)
  is not lost.
* **Giving up.** :meth:`OwnershipGate.release` removes ranges at once (no key of them is handed
  out after the call), waits up to a grace for runs of those keys in progress to end, cancels
  the rest with :attr:`CancelCause.HANDOVER <engine.CancelCause.HANDOVER>` (not a failure, no
  Warning event, not retried here) and returns only once every such run has ended: then, and
  only then, the caller may tell other replicas the range is free.
* **Fencing.** :meth:`OwnershipGate.revoke` gives everything up synchronously and cancels
  every run at once, shields included (a replica that can no longer prove it is a member).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

from ._keyspace import KeyRanges
from ._outcome import CancelCause
from ._refs import ObjectRef, Triggerable
from ._run import Run


class Controller(Triggerable, Protocol):
    """What the gate needs of an :class:`engine.Controller`."""

    @property
    def running(self) -> dict[ObjectRef, Run]:
        """Runs in progress, by key (a copy)."""
        ...

__all__ = ["OwnershipGate", "OwnershipStatistics"]

logger = logging.getLogger("engine.ownership")

KeyFunction = Callable[[ObjectRef], "int | None"]
"""Maps a key to its 64-bit key-space position, or ``None`` while that is not known yet."""


@attrs.frozen
class OwnershipStatistics:
    """A snapshot of an :class:`OwnershipGate` (see :meth:`OwnershipGate.statistics`)."""

    owned: KeyRanges
    """The ranges whose keys are handed out now."""
    running: int
    """Runs in progress (all of them were admitted as owned when they started)."""
    parked: int
    """Keys not owned here (or whose key is unknown) that were taken from a queue, or that ran
    here before their range was given up; they run again when a trigger comes while owned, or
    when their range is gained."""
    handovers: int
    """Ranges given up through :meth:`OwnershipGate.release` or :meth:`OwnershipGate.revoke`."""
    handover_cancelled: int
    """Runs cancelled with ``HANDOVER`` because they outlasted a handover grace (or a revoke)."""
    last_handover_seconds: float | None
    """How long the last :meth:`OwnershipGate.release` took, from the call to the return."""


class OwnershipGate:
    """Decides which keys the workers of a :class:`engine.Manager` may run.

    ``key_of(ref)`` returns the key's position in the 64-bit key space (for Kubernetes objects
    the FNV-1a hash of ``metadata.uid``) or ``None`` while it is unknown; ``owned`` is the
    initial set of owned ranges (by default none: nothing runs until :meth:`gain`).

    Pass it as ``Manager(ownership=...)``. One gate serves one manager.
    """

    def __init__(self, key_of: KeyFunction, *, owned: KeyRanges | None = None) -> None:
        self._key_of = key_of
        self._owned = owned if owned is not None else KeyRanges.nothing()
        self._controllers: list[Controller] = []
        self._admitted: dict[tuple[Controller, ObjectRef], int] = {}
        self._parked: dict[tuple[Controller, ObjectRef], None] = {}
        self._ran: dict[tuple[Controller, ObjectRef], int] = {}
        self._changed = trio.Event()
        self._handovers = 0
        self._handover_cancelled = 0
        self._last_handover: float | None = None
        self.on_handover: list[Callable[[float], None]] = []
        """Callbacks ``f(seconds)`` called when a :meth:`release` returns (metrics)."""

    def __repr__(self) -> str:
        return f"<OwnershipGate owned={self._owned.share:.3f} running={len(self._admitted)}>"

    @property
    def key_of(self) -> KeyFunction:
        """The function that places a key in the key space; settable (before keys run), so a
        gate can be made before what knows the keys (``engine.kube.Cluster.key_of``)."""
        return self._key_of

    @key_of.setter
    def key_of(self, key_of: KeyFunction) -> None:
        self._key_of = key_of

    @property
    def owned(self) -> KeyRanges:
        """The ranges whose keys are handed out now."""
        return self._owned

    def owns(self, ref: ObjectRef) -> bool:
        """Whether a run of ``ref`` would start now. Synchronous."""
        key = self._key_of(ref)
        return key is not None and key in self._owned

    def running_in(self, ranges: KeyRanges) -> int:
        """How many runs in progress have a key in ``ranges``."""
        return sum(1 for key in self._admitted.values() if key in ranges)

    # -- called by controllers ---------------------------------------------------------------

    def attach(self, controller: Controller) -> None:
        """Serve ``controller`` (called by :meth:`engine.Controller.bind`). Synchronous."""
        if controller not in self._controllers:
            self._controllers.append(controller)

    def admit(self, controller: Controller, ref: ObjectRef) -> bool:
        """Called by a worker that took ``ref``: ``True`` to run it now, ``False`` to park it.

        Synchronous; the worker must start the run (or release the key) before its next
        checkpoint, so a :meth:`release` never misses a run it has to wait for.
        """
        key = self._key_of(ref)
        if key is None or key not in self._owned:
            self._parked[(controller, ref)] = None
            return False
        self._parked.pop((controller, ref), None)
        self._admitted[(controller, ref)] = key
        self._ran[(controller, ref)] = key
        return True

    def ended(self, controller: Controller, ref: ObjectRef) -> None:
        """Called by a worker when a run it admitted ended. Synchronous."""
        if self._admitted.pop((controller, ref), None) is not None:
            self._changed.set()
            self._changed = trio.Event()

    # -- moving ranges -----------------------------------------------------------------------

    def gain(self, ranges: KeyRanges) -> int:
        """Own ``ranges`` too, and trigger the parked keys that fall in them (keys taken here while
        not owned, and keys that ran here before their range was given up).

        Synchronous, not a checkpoint. The caller must have made sure no other replica runs
        keys of ``ranges`` any more. Returns how many parked keys were triggered.
        """
        if not ranges:
            return 0
        self._owned = self._owned | ranges
        woken = 0
        for controller, ref in list(self._parked):
            key = self._key_of(ref)
            if key is not None and key in ranges:
                del self._parked[(controller, ref)]
                if controller.trigger(ref, reason="key range gained") is not None:
                    woken += 1
        logger.info(
            "gained %.1f%% of the key space; now own %.1f%%", 100 * ranges.share, 100 * self._owned.share
        )
        return woken

    async def release(self, ranges: KeyRanges, *, grace: float) -> int:
        """Give ``ranges`` up; return once no run of their keys is in progress.

        At the call, synchronously, their keys stop being handed out. Runs of them in progress
        get up to ``grace`` seconds to finish; the rest are cancelled with
        ``CancelCause.HANDOVER`` (their ``ctx.shield`` sections still complete) and awaited.
        Returns how many runs were cancelled.

        Cancellation: a checkpoint. The ranges are given up in any case (that happened at the
        call); a cancelled wait says nothing about whether their runs ended, so the caller
        must not then report the ranges free.
        """
        if grace < 0:
            raise ValueError("grace must be >= 0")
        started = trio.current_time()
        self._owned = self._owned - ranges
        self._park_ran(ranges)
        self._handovers += 1
        cancelled = 0
        with trio.move_on_after(grace):
            await self._wait_idle(ranges)
        if self.running_in(ranges):
            cancelled = self._cancel(ranges, f"key range handed over: runs outlasted the {grace}s handover grace")
            await self._wait_idle(ranges)
        self._last_handover = trio.current_time() - started
        for callback in self.on_handover:
            callback(self._last_handover)
        logger.info(
            "released %.1f%% of the key space after %.3fs (%d run(s) cancelled); now own %.1f%%",
            100 * ranges.share, self._last_handover, cancelled, 100 * self._owned.share,
        )
        return cancelled

    def revoke(self, reason: str) -> int:
        """Give every range up at once and cancel every run, shields included (fencing).

        Synchronous, not a checkpoint; returns how many runs were cancelled. Await
        :meth:`wait_idle` to know they ended.
        """
        everything = KeyRanges.everything()
        self._owned = KeyRanges.nothing()
        self._park_ran(everything)
        self._handovers += 1
        n = self._cancel(everything, f"key ranges revoked: {reason}", force=True)
        logger.warning("revoked every key range (%s); %d run(s) cancelled", reason, n)
        return n

    def _park_ran(self, ranges: KeyRanges) -> None:
        for item, key in list(self._ran.items()):
            if key in ranges:
                del self._ran[item]
                self._parked[item] = None

    async def wait_idle(self) -> None:
        """Return once no run is in progress that is not owned any more.

        Cancellation: a checkpoint; nothing changes.
        """
        await self._wait_idle(KeyRanges.everything() - self._owned)

    async def _wait_idle(self, ranges: KeyRanges) -> None:
        while self.running_in(ranges):
            await self._changed.wait()
        await trio.lowlevel.checkpoint()

    def _cancel(self, ranges: KeyRanges, reason: str, *, force: bool = False) -> int:
        n = 0
        running: dict[Controller, dict[ObjectRef, Run]] = {}
        for (controller, ref), key in list(self._admitted.items()):
            if key not in ranges:
                continue
            if controller not in running:
                running[controller] = controller.running
            run = running[controller].get(ref)
            if run is None:
                continue
            if force:
                run.force_cancel(CancelCause.HANDOVER, reason)
            else:
                run.cancel(CancelCause.HANDOVER, reason)
            n += 1
        self._handover_cancelled += n
        return n

    def statistics(self) -> OwnershipStatistics:
        """A snapshot of the gate's state and counters."""
        return OwnershipStatistics(
            owned=self._owned,
            running=len(self._admitted),
            parked=len(self._parked),
            handovers=self._handovers,
            handover_cancelled=self._handover_cancelled,
            last_handover_seconds=self._last_handover,
        )

