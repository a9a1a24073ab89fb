"""Exceptions raised by :mod:`engine.apiserver`.

::

    EngineError                    (engine._errors)
    └── ApiServerError             the embedded API server was misused
        └── RequestRejected        the server refused a request; carries the Status body

Messages state the rule that was broken; they never contain key material or tokens.
"""

from __future__ import annotations

from typing import Any

from engine._errors import EngineError

__all__ = ["ApiServerError", "RequestRejected"]


class ApiServerError(EngineError):
    """The embedded API server was used outside its lifecycle or misconfigured."""


class RequestRejected(ApiServerError):
    """The server refused a request the way the real API server would.

    ``code`` is the HTTP status code, ``reason`` the machine-readable ``Status.reason``
    (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Invalid``, ...; ``""`` for none, as etcd's
    errors have) and ``status`` the complete
    ``Status`` object the server answers with.
    """

    code: int
    reason: str
    status: dict[str, Any]

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
        }
        if reason:
            body["reason"] = reason
        body["code"] = code
        if details is not None:
            body["details"] = details
        self.status = body
