"""Who waits on whom: dependents are re-triggered the moment a dependency is ready."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ._refs import ObjectRef

if TYPE_CHECKING:
    from ._controller import Controller

__all__ = ["DependencyIndex"]

logger = logging.getLogger("engine.dependencies")

_Waiter = tuple["Controller", ObjectRef]


class DependencyIndex:
    """Maps each dependency to the keys waiting on it.

    A run that ends with ``DependencyNotReady(refs)`` registers its key here (replacing what it
    waited on before). :meth:`mark_ready` triggers every waiter of a ref through its controller's
    ``trigger`` at once and forgets them. All methods are synchronous and never checkpoint.
    """

    def __init__(self) -> None:
        self._waiters: dict[ObjectRef, set[_Waiter]] = {}
        self._waits_on: dict[_Waiter, set[ObjectRef]] = {}
        self.wakeups = 0

    def wait(self, controller: Controller, key: ObjectRef, refs: Iterable[ObjectRef]) -> None:
        """Record that ``key`` of ``controller`` waits until any of ``refs`` is ready."""
        waiter = (controller, key)
        self.clear(controller, key)
        wanted = set(refs)
        self._waits_on[waiter] = wanted
        for ref in wanted:
            self._waiters.setdefault(ref, set()).add(waiter)

    def clear(self, controller: Controller, key: ObjectRef) -> None:
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

    def waiting_on(self, ref: ObjectRef) -> set[ObjectRef]:
        """Keys currently waiting on ``ref``."""
        return {key for _, key in self._waiters.get(ref, ())}

    def mark_ready(self, ref: ObjectRef, *, revision: str | None = None) -> int:
        """``ref`` is ready: trigger everything waiting on it. Returns how many were triggered."""
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
        for controller, key in sorted(waiters, key=lambda w: (w[0].name, w[1])):
            logger.debug("dependency %s ready: triggering %s", ref, key)
            controller.trigger(key, reason=f"dependency {ref} ready", revision=revision)
        self.wakeups += len(waiters)
        return len(waiters)
