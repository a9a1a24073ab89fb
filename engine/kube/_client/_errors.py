"""Exceptions raised by :mod:`engine.kube`.

::

    EngineError                    (engine._errors)
    └── KubeError                  anything engine.kube raises
        ├── ConfigError            a kubeconfig or in-cluster configuration is malformed
        │                          or incomplete, or its credentials cannot be obtained
        ├── ApiError               the API server answered with an error Status
        │   └── NotFoundError, ConflictError, AlreadyExistsError, GoneError, ...
        ├── TransportError         the API server could not be reached / the connection broke
        │   └── TLSVerificationError  its certificate failed verification (never retried)
        ├── ResponseError          the server's answer broke the protocol
        ├── ResourceNotFoundError  discovery does not know a group/version and kind
        ├── WatchStalledError      a watch stream went silent past its idle timeout
        ├── MissingPermissionsError  the credentials lack permissions a run needs (_access)
        ├── WebhookError           the webhook server cannot start (_webhook_server)
        └── ClientStateError       a client used before opening or after closing

Messages state the rule that was broken and name the file and field concerned; they never
contain tokens, passwords, key material or exec plugin output.
"""

from __future__ import annotations

import errno
import os
import socket
import ssl
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

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
    "TLSVerificationError",
    "TooManyRequestsError",
    "TransportError",
    "UnauthorizedError",
    "WatchStalledError",
    "error_from_status",
    "transport_error",
    "transport_reason",
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


# --- API errors (engine.kube._client._client, built by error_from_status) ---


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

    The message says which (``cannot reach the API server at URL: connection refused``) and
    why; ``server`` is the API server's URL and ``request`` the request (``"GET /api/v1"``)
    when known. The underlying ``httpx`` exception is the ``__cause__``.
    """

    server: str | None
    request: str | None

    def __init__(self, message: str, *, server: str | None = None, request: str | None = None) -> None:
        super().__init__(message)
        self.server = server
        self.request = request


class TLSVerificationError(TransportError):
    """The API server's certificate failed verification: signed by an authority the client does
    not trust, issued for another host name, expired or not yet valid.

    Retrying cannot help, so the client never does. The message reads as kubectl's
    (``x509: certificate signed by unknown authority``) and names the server and where the
    trusted authorities came from (``ca_source``). ``verify_code`` is OpenSSL's verification
    error code.
    """

    ca_source: str | None
    verify_code: int | None

    def __init__(
        self,
        message: str,
        *,
        server: str | None = None,
        request: str | None = None,
        ca_source: str | None = None,
        verify_code: int | None = None,
    ) -> None:
        super().__init__(message, server=server, request=request)
        self.ca_source = ca_source
        self.verify_code = verify_code


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


# --- transport failures (engine.kube._client._client, engine.kube._client._watch) ---

# OpenSSL X509_V_ERR_* codes, worded as Go's crypto/x509 (and so kubectl) words them.
_UNKNOWN_AUTHORITY = frozenset({2, 18, 19, 20, 21})
_EXPIRED = frozenset({9, 10})
_NAME_MISMATCH = frozenset({62, 64})
class AnswerTimeout(httpx.ReadTimeout):
    """An answer (other than a watch) that kept arriving, too slowly to be whole within the
    request's read timeout; its message says so."""


_TIMEOUTS = {
    httpx.ConnectTimeout: "timed out connecting",
    httpx.ReadTimeout: "timed out waiting for the answer",
    httpx.WriteTimeout: "timed out sending the request",
    httpx.PoolTimeout: "timed out waiting for a free connection",
}


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the members of exception groups among them."""
    seen: set[int] = set()
    todo = [exc]
    while todo and len(seen) < 50:
        current = todo.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        if isinstance(current, BaseExceptionGroup):
            todo.extend(current.exceptions)
        for nxt in (current.__cause__, current.__context__):
            if nxt is not None:
                todo.append(nxt)


def _x509_reason(err: ssl.SSLCertVerificationError, host: str) -> str:
    code = err.verify_code
    if code in _UNKNOWN_AUTHORITY:
        return "x509: certificate signed by unknown authority"
    if code in _EXPIRED:
        return "x509: certificate has expired or is not yet valid"
    if code in _NAME_MISMATCH:
        return f"x509: certificate is not valid for {host}"
    message = (err.verify_message or err.reason or str(err)).strip().rstrip(".")
    return f"x509: {message}"


def _os_reason(err: OSError) -> str | None:
    if isinstance(err, socket.gaierror):
        return f"cannot resolve the host name: {err.strerror}" if err.strerror else "cannot resolve the host name"
    if err.errno is not None and err.errno in errno.errorcode:
        return os.strerror(err.errno).lower()
    return None


def transport_reason(exc: BaseException) -> str:
    """The most telling reason found in ``exc``'s chain, never empty: ``connection refused``,
    ``timed out connecting``, ``tls error: ...``, else the first message found."""
    for current in _chain(exc):
        if isinstance(current, AnswerTimeout):
            return str(current)
        for kind, text in _TIMEOUTS.items():
            if isinstance(current, kind):
                return text
    for current in _chain(exc):
        if isinstance(current, ssl.SSLError) and not isinstance(current, ssl.SSLCertVerificationError):
            return f"TLS error: {current.reason or current.strerror or type(current).__name__}".lower()
    for current in _chain(exc):
        if isinstance(current, OSError) and not isinstance(current, ssl.SSLError):
            found = _os_reason(current)
            if found:
                return found
    for current in _chain(exc):
        if not isinstance(current, BaseExceptionGroup) and str(current).strip():
            return " ".join(str(current).split())
    return type(exc).__name__


def transport_error(
    exc: httpx.TransportError,
    *,
    server: str,
    request: str,
    ca_source: str | None = None,
    server_name: str | None = None,
) -> TransportError:
    """Translate an ``httpx`` transport failure of ``request`` to ``server`` into the error to
    raise (its ``__cause__`` is left to the caller: ``raise transport_error(...) from exc``).

    A certificate verification failure, however deep in the chain, becomes a
    :class:`TLSVerificationError` naming ``ca_source`` (the host checked is ``server_name``
    when set, else the server's host); a failure to connect says the server cannot be
    reached and why; a connection that broke mid-request says so. The reason is never empty.
    """
    server = server.rstrip("/")
    for current in _chain(exc):
        if isinstance(current, ssl.SSLCertVerificationError):
            host = server_name or httpx.URL(server).host
            trust = f" (trusted authorities: {ca_source})" if ca_source else ""
            return TLSVerificationError(
                f"cannot verify the certificate of the API server at {server}: "
                f"{_x509_reason(current, host)}{trust}",
                server=server,
                request=request,
                ca_source=ca_source,
                verify_code=current.verify_code,
            )
    reason = transport_reason(exc)
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol | httpx.ProxyError):
        return TransportError(
            f"cannot reach the API server at {server}: {reason}", server=server, request=request
        )
    return TransportError(
        f"{request}: the connection to the API server at {server} failed: {reason}",
        server=server,
        request=request,
    )
