"""Text for logs, events, status conditions and error messages: secrets masked, one cap, one
marker, one format.

:func:`redact` is the one place that decides what looks like a secret in free text; log
records, event messages, status condition messages, live-stream messages and the reprs of
configuration objects all go through it (or through :func:`summarize`, which uses it).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._refs import ObjectRef, Trigger

__all__ = [
    "REDACTED",
    "SUMMARY_LIMIT",
    "is_secret_name",
    "redact",
    "redact_value",
    "summarize",
    "truncate",
]

SUMMARY_LIMIT = 500
"""The longest summary :func:`summarize` returns, in UTF-8 bytes."""

REDACTED = "<redacted>"
"""What a masked secret is replaced with."""

_MARKER = "..."

_SECRET_WORDS = (
    "token", "password", "passwd", "secret", "authorization", "cookie", "credential",
    "api_key", "apikey", "api-key", "key-data", "key_data", "client-key", "client_key",
    "private_key", "private-key", "access_key", "access-key",
)
_SECRET_NAME = (
    r"[\w-]*?(?:token|password|passwd|secret|credential|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|client[_-]?key(?:[_-]?data)?)[\w-]*"
)
_VALUE = r"[^\s\"',;&]+"
_SECRET_TEXT = re.compile(
    # PEM private keys (the END line may have been cut off).
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*)"
    # Base64 of a PEM block, as in a kubeconfig's client-key-data.
    r"|LS0tLS1CRUdJTi[A-Za-z0-9+/=]*"
    # user:password@ in a URL (a proxy URL, a webhook URL).
    r"|(?P<url>\b[a-z][a-z0-9+.-]*://[^\s/:@\"']*:)[^\s/@\"']+(?=@)"
    # Authorization headers, with or without their scheme.
    rf"|(?P<auth>\bauthorization[\"']?\s*[=:]\s*[\"']?(?:(?:bearer|basic|token|negotiate)\s+)?){_VALUE}"
    rf"|(?P<bearer>\bbearer\s+){_VALUE}"
    # An environment entry as a kubeconfig exec stanza or a pod spec writes it.
    rf"|(?P<env>(?<![\w-])[\"']?name[\"']?\s*[=:]\s*[\"']?[\w.-]+[\"']?\s*,\s*[\"']?value[\"']?\s*[=:]\s*[\"']?){_VALUE}"
    # name=value / name: value where the name says it holds a secret.
    rf"|(?P<pair>\b{_SECRET_NAME}[\"']?\s*[=:]\s*[\"']?){_VALUE}",
    re.IGNORECASE | re.DOTALL,
)


def is_secret_name(name: str) -> bool:
    """Whether a key, header, field or variable called ``name`` holds a secret
    (``token``, ``password``, ``Authorization``, ``client-key-data``, ...)."""
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS)


def _mask(match: re.Match[str]) -> str:
    keep = match.group("url") or match.group("auth") or match.group("bearer") or match.group("env")
    keep = keep or match.group("pair") or ""
    return keep + REDACTED


def redact(text: str) -> str:
    """``text`` with every secret it appears to hold replaced by ``<redacted>``: bearer
    tokens and ``Authorization`` values, PEM private keys (and base64-encoded PEM blocks),
    the password of a ``scheme://user:password@host`` URL, the value of an environment entry
    (``name: X, value: Y``) and of any ``name=value`` or ``name: value`` pair whose name says
    it is secret (``token``, ``password``, ``secret``, ``api_key``, ``client-key-data``, ...).
    """
    return _SECRET_TEXT.sub(_mask, text)


def redact_value(value: Any, *, depth: int = 0) -> Any:
    """A copy of ``value`` fit to show: in mappings (up to 5 levels deep) the value of every
    key :func:`is_secret_name` flags becomes ``<redacted>``; strings go through :func:`redact`;
    an :class:`~engine.ObjectRef` or :class:`~engine.Trigger` becomes its ``str``; other lists
    and tuples become lists; anything else is returned as is."""
    if isinstance(value, (ObjectRef, Trigger)):
        return str(value)
    if isinstance(value, Mapping) and depth < 5:
        return {
            str(k): REDACTED if is_secret_name(str(k)) else redact_value(v, depth=depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)) and depth < 5:
        return [redact_value(v, depth=depth + 1) for v in value]
    if isinstance(value, str):
        return redact(value)
    return value


def truncate(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` UTF-8 bytes, else its longest prefix that fits with
    ``"..."`` appended. A multi-byte character is never split.

    Raises ``ValueError`` if ``limit`` cannot hold the marker.
    """
    if limit < len(_MARKER):
        raise ValueError(f"limit must be >= {len(_MARKER)}")
    data = text.encode()
    if len(data) <= limit:
        return text
    return data[: limit - len(_MARKER)].decode(errors="ignore") + _MARKER


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


def summarize(error: BaseException, *, limit: int = SUMMARY_LIMIT) -> str:
    """A one-line description of ``error`` for a log line, an event, a status condition or
    another error's message: ``"TypeName: message"`` (just ``"TypeName"`` when the message is
    empty), secrets masked by :func:`redact`, line breaks and runs of spaces folded into one
    space, cut to ``limit`` UTF-8 bytes by :func:`truncate`. An exception group holding one
    exception is described by that exception. Never a traceback.
    """
    error = _leaf(error)
    message = str(error)
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return truncate(" ".join(redact(text).split()), limit)
