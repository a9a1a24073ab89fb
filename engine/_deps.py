"""Who waits on whom: dependents are re-triggered the moment a dependency is ready."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable

from ._refs import ObjectRef, Triggerable

__all__ = ["DependencyIndex"]

logger = logging.getLogger("engine.dependencies")

_Waiter = tuple[Triggerable, ObjectRef]


class DependencyIndex:
    """Maps each dependency to the keys waiting on it.

    A run that ends with ``DependencyNotReady(refs)`` registers its key here (replacing what it
    waited on before). :meth:`mark_ready` triggers every waiter of a ref through its controller's
    ``trigger`` at once and forgets them. All methods are synchronous and never checkpoint.

    A dependency that became ready *while* its dependent was running (after the run checked it,
    before the run registered its wait) is caught too: the index remembers when each ref was
    last reported ready (the newest ``max_remembered``), and :meth:`wait` re-triggers at once
    if one of the refs was reported ready after the run started.
    """

    def __init__(self, *, max_remembered: int = 4096) -> None:
        self._waiters: dict[ObjectRef, set[_Waiter]] = {}
        self._waits_on: dict[_Waiter, set[ObjectRef]] = {}
        self._ready_at: OrderedDict[ObjectRef, int] = OrderedDict()
        self._epoch = 0
        self._max_remembered = max_remembered
        self.wakeups = 0

    @property
    def epoch(self) -> int:
        """Counts :meth:`mark_ready` calls; a run records it when it starts."""
        return self._epoch

    def wait(
        self, controller: Triggerable, key: ObjectRef, refs: Iterable[ObjectRef], *, since: int | None = None
    ) -> bool:
        """Record that ``key`` of ``controller`` waits until any of ``refs`` is ready.

        If one of ``refs`` was reported ready after :attr:`epoch` was ``since`` (the run's
        start), the key is triggered at once instead, and ``True`` is returned.
        """
        wanted = set(refs)
        self.clear(controller, key)
        if since is not None:
            for ref in wanted:
                at = self._ready_at.get(ref)
                if at is not None and at > since:
                    self.wakeups += 1
                    controller.trigger(key, reason=f"dependency {ref} became ready during the run")
                    return True
        waiter = (controller, key)
        self._waits_on[waiter] = wanted
        for ref in wanted:
            self._waiters.setdefault(ref, set()).add(waiter)
        return False

    def clear(self, controller: Triggerable, key: ObjectRef) -> None:
        """Forget what ``key`` waits on (its new run decides afresh)."""
        if not self._waits_on:
            return
        waiter = (controller, key)
        for ref in self._waits_on.pop(waiter, ()):
            waiters = self._waiters.get(ref)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiters[ref]

    def begin(self, controller: Triggerable, key: ObjectRef) -> int:
        """A run of ``key`` starts: forget what ``key`` waits on (as :meth:`clear`) and return
        the :attr:`epoch` the run records. Synchronous; one call on every run's path."""
        if self._waits_on:
            self.clear(controller, key)
        return self._epoch

    def waiting_on(self, ref: ObjectRef) -> set[ObjectRef]:
        """Keys currently waiting on ``ref``."""
        return {key for _, key in self._waiters.get(ref, ())}

    def mark_ready(self, ref: ObjectRef, *, revision: str | None = None) -> int:
        """``ref`` is ready: trigger everything waiting on it. Returns how many were triggered."""
        self._epoch += 1
        self._ready_at[ref] = self._epoch
        self._ready_at.move_to_end(ref)
        if len(self._ready_at) > self._max_remembered:
            self._ready_at.popitem(last=False)
        waiters = self._waiters.pop(ref, None)
        if not waiters:
            return 0
        for waiter in waiters:
            refs = self._waits_on.pop(waiter, set())
            for other in refs - {ref}:
                others = self._waiters.get(other)
                if others is not None:
                    others.discard(waiter)
                    if not others:
                        del self._waiters[other]
        for controller, key in sorted(waiters, key=lambda w: (w[0].name, w[1].kind, w[1].group, w[1].namespace or "", w[1].name)):
            logger.debug("dependency %s ready: triggering %s", ref, key)
            controller.trigger(key, reason=f"dependency {ref} ready", revision=revision)
        self.wakeups += len(waiters)
        return len(waiters)
