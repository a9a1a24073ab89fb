"""Rate limiters for retries, with client-go's default controller limiter as the default."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol

import trio

__all__ = [
    "RateLimiter",
    "ExponentialBackoffLimiter",
    "TokenBucketLimiter",
    "MaxOfLimiter",
    "default_rate_limiter",
]

Clock = Callable[[], float]


class RateLimiter(Protocol):
    """Decides how long a key waits before its next retry."""

    def when(self, key: Hashable) -> float:
        """Record one more failure of ``key`` and return the delay (seconds) before its retry."""
        ...

    def forget(self, key: Hashable) -> None:
        """Reset the failure history of ``key``."""
        ...

    def num_requeues(self, key: Hashable) -> int:
        """How many times ``key`` failed since it was last forgotten."""
        ...


class ExponentialBackoffLimiter:
    """Per-key exponential backoff: ``base * 2**failures``, capped at ``cap``.

    Defaults are client-go's: 5 ms doubling to a 1000 s cap.
    """

    def __init__(self, *, base: float = 0.005, cap: float = 1000.0) -> None:
        if base <= 0:
            raise ValueError("base must be > 0")
        if cap < base:
            raise ValueError("cap must be >= base")
        self._base = base
        self._cap = cap
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        if failures >= 64:
            return self._cap
        return min(self._base * (2.0**failures), self._cap)

    def forget(self, key: Hashable) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: Hashable) -> int:
        return self._failures.get(key, 0)


class TokenBucketLimiter:
    """An overall token bucket shared by all keys (client-go's ``BucketRateLimiter``).

    Each ``when`` reserves one token; when none is left the caller waits until one will have
    been refilled. Defaults: 10 tokens per second, burst 100. Time comes from trio's clock.
    """

    def __init__(self, *, rate: float = 10.0, burst: int = 100, clock: Clock | None = None) -> None:
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if burst < 1:
            raise ValueError("burst must be >= 1")
        self._rate = rate
        self._burst = float(burst)
        self._clock = clock or trio.current_time
        self._tokens = float(burst)
        self._last: float | None = None

    def when(self, key: Hashable) -> float:
        now = self._clock()
        if self._last is not None:
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self._rate

    def forget(self, key: Hashable) -> None:
        pass

    def num_requeues(self, key: Hashable) -> int:
        return 0


class MaxOfLimiter:
    """Combines limiters: the delay is the longest any of them asks for."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, key: Hashable) -> float:
        return max([limiter.when(key) for limiter in self._limiters])

    def forget(self, key: Hashable) -> None:
        for limiter in self._limiters:
            limiter.forget(key)

    def num_requeues(self, key: Hashable) -> int:
        return max([limiter.num_requeues(key) for limiter in self._limiters])


def default_rate_limiter() -> MaxOfLimiter:
    """client-go's ``DefaultControllerRateLimiter``: per-key 5 ms..1000 s, overall 10/s burst 100."""
    return MaxOfLimiter(ExponentialBackoffLimiter(), TokenBucketLimiter())
