"""Structured logging: JSON lines on a non-terminal, readable text on a terminal.

Keys follow controller-runtime's zap logs: ``level``, ``ts``, ``logger``, ``msg``, and, when
known, ``controller``, ``object``, ``namespace``, ``name``, ``reconcileID``.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import IO, Any

__all__ = ["JSONFormatter", "TextFormatter", "configure_logging"]

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys()) | {"message", "asctime"}
_REDACT = ("token", "password", "secret", "authorization", "key-data", "client-key")


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in vars(record).items():
        if key in _STANDARD or key.startswith("_") or value is None:
            continue
        if any(word in key.lower() for word in _REDACT):
            value = "<redacted>"
        out[key] = value
    return out


class JSONFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "level": record.levelname.lower(),
            "ts": record.created,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extras(record))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger msg key=value...`` for people at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        text = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            text += f"  {extras}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(level: int | str = logging.INFO, *, json_lines: bool | None = None, stream: IO[str] | None = None) -> None:
    """Send the engine's logs to ``stream`` (stderr): JSON lines unless it is a terminal."""
    stream = stream or sys.stderr
    if json_lines is None:
        json_lines = not stream.isatty()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter() if json_lines else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
