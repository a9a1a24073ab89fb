"""Structured logging: JSON lines on a non-terminal, readable text on a terminal.

Keys follow controller-runtime's zap logs: ``level`` (``debug``, ``info``, ``warn``,
``error``, ``critical``), ``ts`` (seconds since the epoch), ``logger``, ``caller``, ``msg``,
and, when the record carries them, ``controller``, ``object``, ``namespace``, ``name``,
``reconcileID`` (``name`` is a reserved ``LogRecord`` attribute, so pass the object's name as
``extra={"object_name": ...}``; it is written as ``name``); ``error`` and ``stacktrace`` when an exception is attached. Any other
``extra=`` keys follow. A run's ``ctx.log`` adds the run's keys to every record.

Secrets are never written: the value of any extra whose key names a secret (``token``,
``password``, ``secret``, ``authorization``, ``cookie``, ``credential``, ``api_key``, client key
data), at any depth of nested mappings, becomes ``<redacted>``; the message, the error and the
traceback go through :func:`engine._text.redact` (bearer tokens, ``password=...``-style pairs,
URL passwords, PEM private keys), the same function event, status and live-stream messages use.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO, Any

from ._refs import ObjectRef
from ._text import REDACTED, is_secret_name, redact, redact_value

__all__ = ["JSONFormatter", "TextFormatter", "configure_logging"]

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {
    "message", "asctime", "taskName",
}
_LEVELS = {"WARNING": "warn", "CRITICAL": "critical"}
_FIRST = ("controller", "object", "namespace", "name", "reconcileID")


def _clean(value: Any) -> Any:
    if isinstance(value, ObjectRef):
        return str(value)
    return redact_value(value)


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    items = vars(record)
    known: dict[str, Any] = {key: items.get(key) for key in _FIRST}
    known["name"] = items.get("object_name")
    obj = known["object"]
    if isinstance(obj, ObjectRef):
        known["object"] = str(obj)
        if known["namespace"] is None:
            known["namespace"] = obj.namespace
        if known["name"] is None:
            known["name"] = obj.name
    out = {key: _clean(value) for key, value in known.items() if value is not None}
    for key, value in items.items():
        if key in _STANDARD or key in out or key == "object_name" or key.startswith("_") or value is None:
            continue
        out[key] = REDACTED if is_secret_name(key) else _clean(value)
    return out


def _error(record: logging.LogRecord) -> str | None:
    if not record.exc_info or record.exc_info[1] is None:
        return None
    exc = record.exc_info[1]
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return redact(text)


class JSONFormatter(logging.Formatter):
    """One JSON object per line, keyed as controller-runtime's zap production logs."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "level": _LEVELS.get(record.levelname, record.levelname.lower()),
            "ts": record.created,
            "logger": record.name,
            "caller": f"{record.filename}:{record.lineno}",
            "msg": redact(record.getMessage()),
        }
        entry.update(_extras(record))
        error = _error(record)
        if error is not None:
            entry["error"] = error
            entry["stacktrace"] = redact(self.formatException(record.exc_info))  # type: ignore[arg-type]
        elif record.stack_info:
            entry["stacktrace"] = redact(self.formatStack(record.stack_info))
        return json.dumps(entry, default=str)


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(text) if (" " in text or not text) and isinstance(value, str) else text


class TextFormatter(logging.Formatter):
    """``time level logger: msg  key=value...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={_text_value(v)}" for k, v in _extras(record).items())
        level = _LEVELS.get(record.levelname, record.levelname.lower())
        text = f"{self.formatTime(record, '%H:%M:%S')} {level.upper():<5} {record.name}: {redact(record.getMessage())}"
        if extras:
            text += f"  {extras}"
        if record.exc_info and record.exc_info[1] is not None:
            text += "\n" + redact(self.formatException(record.exc_info))
        return text


def configure_logging(
    level: int | str = logging.INFO, *, json_lines: bool | None = None, stream: IO[str] | None = None
) -> logging.Handler:
    """Send all logs to ``stream`` (stderr): JSON lines unless it is a terminal.

    Replaces the root logger's handlers and sets its level (a name such as ``"debug"`` is
    accepted); returns the handler installed.
    """
    stream = stream if stream is not None else sys.stderr
    if json_lines is None:
        isatty = getattr(stream, "isatty", None)
        json_lines = not (callable(isatty) and isatty())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
