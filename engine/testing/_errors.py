"""Exceptions raised by :mod:`engine.testing`.

::

    EngineError                    (engine._errors)
    ├── ApiServerError             the embedded API server was misused
    │   └── RequestRejected        the server refused a request; carries the Status body
    ├── HarnessError               a test harness was misused, or asked for what its target lacks
    │   └── WaitTimeout            a wait ended at its timeout (also an AssertionError)
    └── EnvTestError               a real control plane (etcd, kube-apiserver) did not start

Messages state the rule that was broken; they never contain key material or tokens.
"""

from __future__ import annotations

from typing import Any

from engine._errors import EngineError

__all__ = ["ApiServerError", "EnvTestError", "HarnessError", "RequestRejected", "WaitTimeout"]


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


class HarnessError(EngineError):
    """A test harness was used outside its lifecycle, or asked for something its target lacks
    (fault injection or the server object against a real API server)."""


class WaitTimeout(HarnessError, AssertionError):
    """A wait of the test harness did not see its condition within its timeout.

    It is an ``AssertionError`` too, so pytest reports it as a failed expectation; the message
    says what was awaited and the last state seen.
    """


class EnvTestError(EngineError):
    """A real control plane could not be started: binaries missing, or not ready in time."""
