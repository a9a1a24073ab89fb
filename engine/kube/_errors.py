"""Exceptions raised by :mod:`engine.kube`.

::

    EngineError                    (engine._errors)
    └── KubeError                  anything engine.kube raises
        ├── ConfigError            a kubeconfig or in-cluster configuration is malformed
        │                          or incomplete, or its credentials cannot be obtained
        ├── ApiError               the API server answered with an error Status
        │   └── NotFoundError, ConflictError, AlreadyExistsError, GoneError, ...
        ├── TransportError         the API server could not be reached / the connection broke
        ├── ResponseError          the server's answer broke the protocol
        ├── ResourceNotFoundError  discovery does not know a group/version and kind
        ├── WatchStalledError      a watch stream went silent past its idle timeout
        └── ClientStateError       a client used before opening or after closing

Messages state the rule that was broken and name the file and field concerned; they never
contain tokens, passwords, key material or exec plugin output.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from engine._errors import EngineError, LifecycleError

__all__ = [
    "AlreadyExistsError",
    "ApiError",
    "BadRequestError",
    "ClientStateError",
    "ConfigError",
    "ConflictError",
    "ForbiddenError",
    "GoneError",
    "InvalidError",
    "KubeError",
    "NotFoundError",
    "ResourceNotFoundError",
    "ResponseError",
    "ServerError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
    "WatchStalledError",
    "error_from_status",
]


class KubeError(EngineError):
    """Root of everything engine.kube raises."""


class ConfigError(KubeError):
    """A kubeconfig or in-cluster configuration is malformed or incomplete.

    ``path`` is the file concerned (``None`` for an in-memory kubeconfig) and ``field`` the
    dotted location inside it, such as ``"users[name=dev].user.client-key-data"``
    (``None`` when the whole file is at fault).
    """

    path: str | None
    field: str | None

    def __init__(
        self, message: str, *, path: str | os.PathLike[str] | None = None, field: str | None = None
    ) -> None:
        self.path = os.fspath(path) if path is not None else None
        self.field = field
        self.reason = message
        where = []
        if self.path is not None:
            where.append(self.path)
        if field is not None:
            where.append(field)
        super().__init__(f"{': '.join(where)}: {message}" if where else message)


# --- API errors (engine.kube._client, built by error_from_status) ---


class ApiError(KubeError):
    """The API server answered with an error ``Status``.

    Built from the server's ``Status`` body (``kind: Status``) when there is one, else from the
    HTTP status line. ``status`` is the decoded ``Status`` object (``None`` when the body was
    not one), ``code`` the HTTP code, ``reason`` the machine-readable reason such as
    ``"NotFound"``, ``message`` the server's human-readable message and ``details`` the
    ``Status.details`` mapping (``{}`` when absent).

    ::

        ApiError
        ├── BadRequestError          400
        ├── UnauthorizedError        401
        ├── ForbiddenError           403
        ├── NotFoundError            404
        ├── ConflictError            409 (optimistic-concurrency conflict)
        ├── AlreadyExistsError       409 with reason AlreadyExists
        ├── GoneError                410 (resourceVersion too old, continue token expired)
        ├── InvalidError             422 (``causes`` lists the failed fields)
        ├── TooManyRequestsError     429 (``retry_after`` from the Retry-After header)
        └── ServerError              5xx
    """

    status: dict[str, Any] | None
    code: int
    reason: str
    message: str
    details: dict[str, Any]

    def __init__(
        self,
        message: str,
        *,
        code: int,
        reason: str = "",
        status: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.reason = reason
        self.message = message
        details = status.get("details") if status else None
        self.details = details if isinstance(details, dict) else {}
        super().__init__(f"{code} {reason}: {message}" if reason else f"{code}: {message}")


class BadRequestError(ApiError):
    """400: the request was malformed."""


class UnauthorizedError(ApiError):
    """401: the server did not accept the credentials."""


class ForbiddenError(ApiError):
    """403: the credentials are not allowed to do this."""


class NotFoundError(ApiError):
    """404: the object (or the resource type) does not exist."""


class ConflictError(ApiError):
    """409: the write was based on a stale ``resourceVersion`` (or another conflict)."""


class AlreadyExistsError(ApiError):
    """409 with reason ``AlreadyExists``: a create named an object that exists."""


class GoneError(ApiError):
    """410: the requested ``resourceVersion`` or ``continue`` token is too old."""


class InvalidError(ApiError):
    """422: the object failed validation; ``causes`` lists ``{reason, message, field}``."""

    @property
    def causes(self) -> list[dict[str, Any]]:
        causes = self.details.get("causes")
        return [c for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []


class TooManyRequestsError(ApiError):
    """429: the server shed the request without acting on it.

    ``retry_after`` is the server's ``Retry-After`` delay in seconds, ``None`` if it sent none.
    """

    retry_after: float | None

    def __init__(
        self,
        message: str,
        *,
        code: int,
        reason: str = "",
        status: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, code=code, reason=reason, status=status)
        self.retry_after = retry_after


class ServerError(ApiError):
    """5xx: the server failed; the request may or may not have been applied."""


class TransportError(KubeError):
    """The API server could not be reached, or the connection failed mid-request.

    The underlying ``httpx`` exception is the ``__cause__``.
    """


class ResponseError(KubeError):
    """The API server's answer broke the protocol (for example a body that is not JSON)."""


class ResourceNotFoundError(KubeError):
    """API discovery does not know the requested group/version and kind."""


class WatchStalledError(KubeError):
    """A watch stream delivered no bytes within its idle timeout and was abandoned."""


class ClientStateError(KubeError, LifecycleError):
    """A client was used outside its lifecycle (before it was opened or after it was closed)."""


_ERRORS_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    410: GoneError,
    422: InvalidError,
    429: TooManyRequestsError,
}


def error_from_status(
    status: Mapping[str, Any] | None,
    *,
    code: int,
    retry_after: float | None = None,
) -> ApiError:
    """Build the typed :class:`ApiError` for a ``Status`` body (or its absence) and HTTP code.

    ``Status.code`` takes precedence over ``code`` when the body carries one (watch ``ERROR``
    events arrive on a ``200`` stream).
    """
    body = dict(status) if isinstance(status, Mapping) else None
    if body is not None and isinstance(body.get("code"), int) and body["code"] >= 400:
        code = body["code"]
    reason = str(body.get("reason") or "") if body else ""
    message = str(body.get("message") or "") if body else ""
    if not message:
        message = f"the API server answered HTTP {code} without a Status message"
    cls: type[ApiError]
    if code == 409 and reason == "AlreadyExists":
        cls = AlreadyExistsError
    elif code >= 500:
        cls = ServerError
    else:
        cls = _ERRORS_BY_CODE.get(code, ApiError)
    if cls is TooManyRequestsError:
        if retry_after is None and body:
            details = body.get("details")
            if isinstance(details, dict) and isinstance(details.get("retryAfterSeconds"), int):
                retry_after = float(details["retryAfterSeconds"])
        return TooManyRequestsError(
            message, code=code, reason=reason, status=body, retry_after=retry_after
        )
    return cls(message, code=code, reason=reason, status=body)
