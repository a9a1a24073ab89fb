from __future__ import annotations

import pytest

from engine._text import REDACTED, SUMMARY_LIMIT, redact, redact_value, summarize, truncate

from ._secrets import SECRET_CASES


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


@pytest.mark.parametrize(("text", "secret"), SECRET_CASES)
def test_redact_masks_every_kind_of_secret(text: str, secret: str) -> None:
    masked = redact(text)
    assert secret not in masked
    assert REDACTED in masked


def test_redact_keeps_what_is_not_secret() -> None:
    assert redact("proxy http://alice:hunter2@proxy.local:3128 down") == (
        "proxy http://alice:<redacted>@proxy.local:3128 down"
    )
    assert redact("Authorization: Bearer abc.def") == "Authorization: Bearer <redacted>"
    assert redact("AWS_SECRET_ACCESS_KEY=xyz REGION=eu") == "AWS_SECRET_ACCESS_KEY=<redacted> REGION=eu"
    assert redact("key=value at https://example.com:443/path, 3 tokens left") == (
        "key=value at https://example.com:443/path, 3 tokens left"
    )
    assert redact('secrets "db-password" not found') == 'secrets "db-password" not found'


def test_redact_value_masks_secret_keys_at_any_depth() -> None:
    assert redact_value({"headers": {"Authorization": "x"}, "note": "token=abc", "n": 1}) == {
        "headers": {"Authorization": REDACTED}, "note": f"token={REDACTED}", "n": 1,
    }


@pytest.mark.parametrize(("text", "secret"), SECRET_CASES)
def test_summarize_is_one_redacted_line(text: str, secret: str) -> None:
    summary = summarize(RuntimeError(text))
    assert summary.startswith("RuntimeError: ")
    assert secret not in summary
    assert "\n" not in summary


def test_summarize_describes_a_group_of_one_by_its_exception() -> None:
    group = ExceptionGroup("Exceptions from Trio nursery", [ValueError("child failed")])
    assert summarize(BaseExceptionGroup("outer", [group])) == "ValueError: child failed"
    assert summarize(ExceptionGroup("two", [ValueError("a"), KeyError("b")])) == "ExceptionGroup: two (2 sub-exceptions)"
