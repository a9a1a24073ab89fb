from __future__ import annotations

import email.utils
import random
import time

import pytest

from engine._backoff import jittered_backoff, parse_retry_after


def test_backoff_doubles_up_to_the_cap_and_jitters_downwards() -> None:
    rng = random.Random(7)
    for attempt, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (500, 5.0)]:
        delay = jittered_backoff(attempt, base=0.5, cap=5.0, rng=rng)
        assert ceiling / 2 <= delay <= ceiling


def test_backoff_draws_one_value_from_the_given_rng() -> None:
    a, b = random.Random(3), random.Random(3)
    assert jittered_backoff(2, base=1.0, cap=10.0, rng=a) == 4.0 * b.uniform(0.5, 1.0)
    assert a.random() == b.random()


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, None), ("", None), ("120", 120.0), ("1.5", 1.5), ("-3", 0.0), ("nan", None), ("soon", None)],
)
def test_retry_after_seconds(value: str | None, expected: float | None) -> None:
    assert parse_retry_after(value) == expected


def test_retry_after_http_date() -> None:
    future = email.utils.formatdate(time.time() + 100, usegmt=True)
    seconds = parse_retry_after(future)
    assert seconds is not None and 90 < seconds <= 100
    assert parse_retry_after(email.utils.formatdate(time.time() - 100, usegmt=True)) == 0.0
