"""When the client repeats a failed request, and how long it waits first.

A request is retried only when doing it twice cannot do harm:

* **Reads** (``get``, ``list``, discovery) and **establishing a watch** are retried on
  ``429 Too Many Requests`` (waiting for ``Retry-After``), on ``5xx`` answers and on transport
  failures (connection refused or reset, timeouts), except a server certificate that fails
  verification (:class:`TLSVerificationError`): that is configuration, not bad luck.
* **Mutations** (``create``, ``update``, ``patch``, ``apply``, ``delete``) are retried only on
  ``429``: the API server's priority-and-fairness sheds such a request before acting on it. A
  ``5xx`` or a broken connection leaves it unknown whether the write happened, so those errors
  reach the caller, who knows whether the write is idempotent.
* Attempts are bounded by :attr:`RetryPolicy.max_attempts`; the delay between attempts is
  exponential with jitter (``base_delay * 2**n``, capped at ``max_delay``, scaled by a random
  factor in ``[0.5, 1]``) or the server's ``Retry-After`` when it sent one (up to
  ``max_retry_after``; a longer demand is not waited for and the error is raised).
* A stream that breaks *after* a watch was established is not retried here: the iterator raises
  and the caller (normally an :class:`Informer`) resumes from the last ``resourceVersion``.

All waiting uses trio's clock, so it runs in virtual time under ``trio.testing.MockClock``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import attrs
import trio

from engine._backoff import jittered_backoff, parse_retry_after
from engine._text import summarize

from ._errors import ApiError, ServerError, TLSVerificationError, TooManyRequestsError, TransportError

__all__ = ["RetryPolicy", "call_with_retries", "parse_retry_after", "retry_after_of"]

log = logging.getLogger("engine.kube.client")

T = TypeVar("T")


@attrs.frozen
class RetryPolicy:
    """When and how long :class:`Client` waits before repeating a failed request.

    See the module documentation for which failures are retried for which requests.
    """

    max_attempts: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    """Total attempts per request, the first included (``1`` disables retries)."""
    base_delay: float = attrs.field(default=0.2, validator=attrs.validators.gt(0))
    """Delay before the first retry, doubled for each further one."""
    max_delay: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    """Cap on the exponential delay."""
    max_retry_after: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    """The longest ``Retry-After`` honoured; a longer one makes the error reach the caller."""

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The jittered delay before retry number ``retry`` (``0`` for the first)."""
        return jittered_backoff(retry, base=self.base_delay, cap=self.max_delay, rng=rng)

    def retryable(self, err: Exception, *, safe: bool) -> bool:
        """Whether ``err`` may be retried: ``429`` always, ``5xx`` and transport failures only
        for ``safe`` requests (reads and establishing a watch), a certificate that fails
        verification never."""
        if isinstance(err, TooManyRequestsError):
            return True
        if isinstance(err, TLSVerificationError):
            return False
        return safe and isinstance(err, ServerError | TransportError)


def retry_after_of(err: BaseException) -> float | None:
    """The delay the API server asked for with ``err``, ``None`` if it asked for none.

    A ``429``'s ``Retry-After`` (header or ``Status.details.retryAfterSeconds``), or a ``5xx``
    ``Status.details.retryAfterSeconds``.
    """
    if isinstance(err, TooManyRequestsError) and err.retry_after is not None:
        return err.retry_after
    if isinstance(err, ServerError):
        seconds = err.details.get("retryAfterSeconds")
        if isinstance(seconds, int | float) and seconds >= 0:
            return float(seconds)
    return None


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    *,
    policy: RetryPolicy,
    rng: random.Random,
    safe: bool,
    what: str,
    failed: ApiError | TransportError | None = None,
) -> T:
    """Await ``attempt()`` until it succeeds or raises an error that must reach the caller.

    ``attempt`` raises :class:`ApiError` or :class:`TransportError` on failure; those
    ``policy`` allows are retried after its backoff (or a ``429``'s ``Retry-After``, when no
    longer than ``policy.max_retry_after``), anything else propagates at once. ``what`` names
    the request in log lines. ``failed``: the first attempt was made already, by the caller,
    and raised this error (it is handled as if ``attempt()`` had raised it here).

    Cancellation: a checkpoint; cancelled while waiting to retry, nothing more is attempted.
    """
    retry = 0
    while True:
        try:
            if failed is not None:
                err, failed = failed, None
                raise err
            return await attempt()
        except (ApiError, TransportError) as err:
            if retry + 1 >= policy.max_attempts or not policy.retryable(err, safe=safe):
                raise
            delay = policy.backoff(retry, rng)
            if isinstance(err, TooManyRequestsError) and err.retry_after is not None:
                if err.retry_after > policy.max_retry_after:
                    raise
                delay = err.retry_after
            log.warning(
                "retrying %s in %.3fs after %s (attempt %d of %d)",
                what,
                delay,
                summarize(err),
                retry + 2,
                policy.max_attempts,
                extra={
                    "request": what,
                    "error": type(err).__name__,
                    "delay": delay,
                    "attempt": retry + 2,
                },
            )
        await trio.sleep(delay)
        retry += 1
