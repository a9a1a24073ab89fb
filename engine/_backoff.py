"""Retry timing shared by every retry loop: one jittered exponential backoff, one ``Retry-After``.

Both are plain functions of their inputs (plus a random source for the jitter), with no
knowledge of what is being retried.
"""

from __future__ import annotations

import email.utils
import math
import random
import time

__all__ = ["jittered_backoff", "parse_retry_after"]

_MAX_DOUBLINGS = 62


def jittered_backoff(
    attempt: int, *, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """The delay before retry number ``attempt`` (``0`` for the first retry).

    Exponential (``base * 2**attempt``, capped at ``cap``), scaled by a random factor in
    ``[0.5, 1]`` so that clients failing together do not retry together, and never later than
    the un-jittered delay. ``rng`` is the random source (the ``random`` module's when ``None``);
    one value is drawn per call.
    """
    delay = min(cap, base * 2.0 ** min(max(attempt, 0), _MAX_DOUBLINGS))
    uniform = rng.uniform if rng is not None else random.uniform
    return delay * uniform(0.5, 1.0)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait according to an HTTP ``Retry-After`` header value, ``None`` if unusable.

    Accepts both forms of RFC 9110: delay seconds (``"120"``) and an HTTP date, which is turned
    into the delay from now (wall clock). A date in the past or a negative number gives ``0``;
    an absent, empty, malformed or ``NaN`` value gives ``None``.
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)
