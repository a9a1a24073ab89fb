"""The renew-deadline fencing loop that leader election and the ring share.

A replica that holds a Lease may act (run keys, write) only while its last successful renewal
is younger than ``renew_deadline``, which is shorter than the Lease's duration: so it stops
acting before anyone else may take the Lease over. :class:`FencingKeeper` is that rule in one
place:

- :meth:`FencingKeeper.expired`: the holder's last renewal is ``renew_deadline`` old; the
  caller fences (stops acting) before it does anything else;
- :meth:`FencingKeeper.attempt`: one renewal (or acquisition) attempt, cut off at the renew
  deadline while holding (so an attempt never outlives the right to act), or after
  ``renew_deadline`` otherwise; API errors and the cut-off are counted and logged, never raised;
- :meth:`FencingKeeper.next_wake`: when to try again: ``retry_period`` with jitter, never later
  than the renew deadline while holding, so the expiry is seen on time.

:class:`LeaseClock` writes the ``MicroTime`` values of one holder's Lease: from trio's clock
(virtual under ``MockClock``), strictly increasing.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from ..._backoff import jittered_backoff
from ..._text import summarize
from .._client._errors import KubeError

__all__ = ["FencingKeeper", "LeaseClock", "check_timings"]

T = TypeVar("T")

_MICROSECOND = dt.timedelta(microseconds=1)


def check_timings(*, lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """Raise ``ValueError`` unless ``0 < retry_period < renew_deadline < lease_duration`` (finite):
    the order that lets a holder retry before its deadline and stop before anyone may take over."""
    if not retry_period > 0:
        raise ValueError("retry_period must be > 0")
    if not renew_deadline > retry_period:
        raise ValueError("renew_deadline must be greater than retry_period")
    if not lease_duration > renew_deadline:
        raise ValueError("lease_duration must be greater than renew_deadline")
    if math.isinf(lease_duration):
        raise ValueError("lease_duration must be finite")


class FencingKeeper:
    """The renew deadline of one Lease holder: when it must stop acting, how long one attempt
    may take, when to try again. ``subject`` names what is held in log lines (``"renewing
    lease ns/name failed: ..."``)."""

    def __init__(
        self, *, renew_deadline: float, retry_period: float, rng: random.Random | None, subject: str,
        logger: logging.Logger,
    ) -> None:
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.subject = subject
        self._rng = rng
        self._logger = logger
        self.renewed_at: float | None = None
        """When the last successful renewal (or acquisition) started; kept after a drop."""
        self.holding = False
        """Whether a Lease is held: between :meth:`renewed` and :meth:`dropped`."""
        self.failed = 0
        """Attempts that raised an API error or ran out of time."""

    def renewed(self, started: float) -> None:
        """A renewal (or acquisition) that started at ``started`` succeeded: the holder may
        act until ``started + renew_deadline``."""
        self.renewed_at = started
        self.holding = True

    def dropped(self) -> None:
        """The Lease is no longer held (lost, fenced or released)."""
        self.holding = False

    @property
    def deadline(self) -> float | None:
        """When the holder must have stopped acting; ``None`` when nothing is held."""
        if not self.holding:
            return None
        assert self.renewed_at is not None
        return self.renewed_at + self.renew_deadline

    def expired(self, now: float) -> bool:
        """Whether a Lease is held and ``now`` is past its renew deadline: the caller fences."""
        deadline = self.deadline
        return deadline is not None and now >= deadline

    async def attempt(
        self, started: float, action: Callable[[], Awaitable[T]], what: str, *, until: float | None = None
    ) -> T | None:
        """Run one ``action`` (a renewal or an acquisition, ``what`` in log lines), cut off at
        the renew deadline while holding, else ``renew_deadline`` after ``started``. Its result,
        or ``None`` when it raised a :class:`KubeError` or was cut off (counted in
        :attr:`failed`, logged as a warning). ``until`` replaces the cut-off: the ring passes
        the deadline it held before it fenced itself, so the attempt right after a fence ends
        at once and the member joins again only at its next wake, a retry period later.

        Cancellation: from outside, propagates; the action is cancelled with it.
        """
        deadline = self.deadline if until is None else until
        with trio.move_on_at(max(deadline if deadline is not None else started + self.renew_deadline, started)) as cut:
            try:
                return await action()
            except KubeError as exc:
                self.failed += 1
                self._logger.warning("%s %s failed: %s", what, self.subject, summarize(exc))
                return None
        if cut.cancelled_caught:
            self.failed += 1
            self._logger.warning("%s %s did not finish within %gs", what, self.subject, self.renew_deadline)
        return None

    def next_wake(self) -> float:
        """When the next attempt starts: ``retry_period`` from now with jitter, and never after
        the renew deadline while holding."""
        wake = trio.current_time() + jittered_backoff(0, base=self.retry_period, cap=self.retry_period, rng=self._rng)
        deadline = self.deadline
        return wake if deadline is None else min(wake, deadline)


class LeaseClock:
    """``MicroTime`` values for the Lease one holder writes: wall time read through trio's
    clock (so virtual time moves it), each strictly later than the one before."""

    def __init__(self) -> None:
        self._wall_offset: float | None = None
        self._last: dt.datetime | None = None

    def now(self) -> dt.datetime:
        """The next timestamp to write."""
        if self._wall_offset is None:
            self._wall_offset = time.time() - trio.current_time()
        when = dt.datetime.fromtimestamp(self._wall_offset + trio.current_time(), dt.UTC)
        if self._last is not None and when <= self._last:
            when = self._last + _MICROSECOND
        self._last = when
        return when
