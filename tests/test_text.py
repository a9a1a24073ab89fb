from __future__ import annotations

import pytest

from engine._text import SUMMARY_LIMIT, summarize, truncate


def test_truncate_keeps_text_that_fits() -> None:
    assert truncate("hello", 5) == "hello"


def test_truncate_cuts_to_the_byte_limit_with_a_marker() -> None:
    assert truncate("hello world", 8) == "hello..."
    cut = truncate("é" * 10, 8)
    assert cut == "éé..." and len(cut.encode()) <= 8


def test_truncate_needs_room_for_the_marker() -> None:
    with pytest.raises(ValueError, match=r"^limit must be >= 3$"):
        truncate("hello", 2)


def test_summarize_names_the_type_and_caps_the_length() -> None:
    assert summarize(ValueError("bad value")) == "ValueError: bad value"
    assert summarize(KeyboardInterrupt()) == "KeyboardInterrupt"
    long = summarize(RuntimeError("x" * 2000))
    assert len(long) == SUMMARY_LIMIT and long.startswith("RuntimeError: x") and long.endswith("...")
    assert summarize(RuntimeError("x" * 100), limit=20) == "RuntimeError: xxx..."
