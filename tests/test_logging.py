from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from engine import (
    Controller,
    JSONFormatter,
    Manager,
    ObjectRef,
    RunContext,
    TextFormatter,
    configure_logging,
)
from engine._text import redact

from ._secrets import SECRET_CASES
from ._support import running

REF = ObjectRef("Widget", "w1", "ns")


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def record(msg: str = "hello", level: int = logging.INFO, exc: BaseException | None = None, **extra: object) -> logging.LogRecord:
    rec = logging.getLogger("engine.test").makeRecord(
        "engine.test", level, "/src/engine/_x.py", 12, msg, (), (type(exc), exc, exc.__traceback__) if exc else None,
        extra=extra,
    )
    return rec


def test_json_lines_use_zap_keys() -> None:
    line = JSONFormatter().format(record(
        "reconciled", logging.WARNING, controller="c", object=REF, reconcileID="c-1", revision="v2",
    ))
    entry = json.loads(line)
    assert list(entry) == [
        "level", "ts", "logger", "caller", "msg", "controller", "object", "namespace", "name", "reconcileID", "revision",
    ]
    assert entry["level"] == "warn"
    assert isinstance(entry["ts"], float)
    assert (entry["logger"], entry["caller"], entry["msg"]) == ("engine.test", "_x.py:12", "reconciled")
    assert (entry["controller"], entry["object"], entry["namespace"], entry["name"]) == ("c", "Widget/ns/w1", "ns", "w1")
    assert entry["reconcileID"] == "c-1"


def test_exceptions_become_error_and_stacktrace() -> None:
    try:
        raise ValueError("bad value")
    except ValueError as exc:
        caught = exc
    entry = json.loads(JSONFormatter().format(record("failed", logging.ERROR, exc=caught)))
    assert entry["error"] == "ValueError: bad value"
    assert entry["stacktrace"].startswith("Traceback (most recent call last):")
    assert json.loads(JSONFormatter().format(record("x", logging.CRITICAL)))["level"] == "critical"


def test_secrets_are_never_written() -> None:
    try:
        raise PermissionError("login failed for password=hunter2")
    except PermissionError as exc:
        caught = exc
    rec = record(
        "calling with Authorization: Bearer eyJhbGciOi.secret-part and token=abc123",
        logging.ERROR, exc=caught,
        api_token="t-123", client_key_data="LS0tLS1", headers={"Authorization": "Bearer zzz", "Accept": "json"},
    )
    for formatter in (JSONFormatter(), TextFormatter()):
        text = formatter.format(rec)
        for secret in ("eyJhbGciOi", "secret-part", "abc123", "hunter2", "t-123", "LS0tLS1", "zzz"):
            assert secret not in text, (formatter, secret)
    entry = json.loads(JSONFormatter().format(rec))
    assert entry["msg"] == "calling with Authorization: Bearer <redacted> and token=<redacted>"
    assert entry["api_token"] == entry["client_key_data"] == "<redacted>"
    assert entry["headers"] == {"Authorization": "<redacted>", "Accept": "json"}
    assert redact("nothing secret here: key=value") == "nothing secret here: key=value"


def test_text_lines_for_people() -> None:
    text = TextFormatter().format(record("reconciled", controller="c", object=REF, reconcileID="c-1", note="two words"))
    assert re.fullmatch(
        r'\d\d:\d\d:\d\d INFO  engine\.test: reconciled  controller=c object=Widget/ns/w1 namespace=ns name=w1 '
        r'reconcileID=c-1 note="two words"',
        text,
    ), text


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_configure_logging_picks_json_off_a_terminal_and_text_on_one(restore_root: None) -> None:
    pipe, tty = io.StringIO(), _TTY()
    handler = configure_logging("debug", stream=pipe)
    assert isinstance(handler.formatter, JSONFormatter)
    assert logging.getLogger().level == logging.DEBUG
    logging.getLogger("engine.x").debug("to a pipe")
    assert json.loads(pipe.getvalue())["msg"] == "to a pipe"
    handler = configure_logging(stream=tty)
    assert isinstance(handler.formatter, TextFormatter)
    logging.getLogger("engine.x").info("to a terminal")
    assert "INFO  engine.x: to a terminal" in tty.getvalue()
    assert isinstance(configure_logging(stream=tty, json_lines=True).formatter, JSONFormatter)
    assert logging.getLogger().handlers == [logging.getLogger().handlers[0]]


async def test_a_runs_log_lines_carry_its_run_id(autojump_clock: trio.testing.MockClock, restore_root: None) -> None:
    stream = io.StringIO()
    configure_logging(stream=stream)

    async def reconcile(ctx: RunContext) -> None:
        ctx.log.info("applying %d objects", 3)
        if ctx.attempt == 1:
            raise RuntimeError("apply failed")

    manager = Manager(handle_signals=False)
    controller = manager.add_controller(Controller("widgets", reconcile))
    async with running(manager):
        controller.trigger(REF)
        await trio.sleep(5)
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    applying = [e for e in entries if e["msg"] == "applying 3 objects"]
    assert [e["reconcileID"] for e in applying] == ["widgets-1", "widgets-2"]
    for e in applying:
        assert e["logger"] == "engine.reconciler.widgets"
        assert (e["controller"], e["object"], e["namespace"], e["name"]) == ("widgets", "Widget/ns/w1", "ns", "w1")
    (error,) = [e for e in entries if e["msg"] == "reconciler error"]
    assert (error["level"], error["controller"], error["object"], error["reconcileID"]) == (
        "error", "widgets", "Widget/ns/w1", "widgets-1",
    )
    assert error["error"] == "RuntimeError: apply failed"
    assert error["retryIn"] == 0.005
    assert "stacktrace" not in error
    assert [e for e in entries if "stacktrace" in e] == []


@pytest.mark.parametrize("json_lines", [True, False])
async def test_a_failed_run_is_one_line_with_its_cause_and_retry_and_the_traceback_only_at_debug(
    autojump_clock: trio.testing.MockClock, restore_root: None, json_lines: bool
) -> None:
    async def reconcile(ctx: RunContext) -> None:
        raise RuntimeError("apply failed")

    for level in ("INFO", "DEBUG"):
        stream = io.StringIO()
        configure_logging(level, stream=stream, json_lines=json_lines)
        manager = Manager(handle_signals=False)
        controller = manager.add_controller(Controller("widgets", reconcile))
        async with running(manager):
            controller.trigger(REF)
            await trio.sleep(0.1)
        lines = [line for line in stream.getvalue().splitlines() if "apply failed" in line]
        failures = [line for line in lines if "reconciler error" in line and "traceback" not in line]
        assert len(failures) >= 3, lines
        for line in failures:
            assert "Traceback" not in line and "retryIn" in line
        tracebacks = "Traceback (most recent call last)" in stream.getvalue()
        assert tracebacks is (level == "DEBUG")
        if level == "INFO":
            assert lines == failures


@pytest.mark.parametrize(("text", "secret"), SECRET_CASES)
def test_no_kind_of_secret_reaches_a_log_line(text: str, secret: str) -> None:
    try:
        raise RuntimeError(text)
    except RuntimeError as exc:
        caught = exc
    rec = record(f"request failed: {text}", logging.ERROR, exc=caught, detail=text)
    for formatter in (JSONFormatter(), TextFormatter()):
        assert secret not in formatter.format(rec), formatter


def test_refs_and_triggers_in_extras_are_written_as_their_text_not_as_lists() -> None:
    from engine import Trigger

    trigger = Trigger(REF, reason="changed", sequence=3)
    entry = json.loads(JSONFormatter().format(record("waiting", refs=[REF, REF], trigger=trigger, pair=("a", "b"))))
    assert entry["refs"] == ["Widget/ns/w1", "Widget/ns/w1"]
    assert entry["trigger"] == str(trigger)
    assert entry["pair"] == ["a", "b"]
