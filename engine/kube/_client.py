"""An httpx-based Kubernetes API client for trio.

Retry policy
------------
A request is retried only when doing it twice cannot do harm:

* **Reads** (``get``, ``list``, discovery) and **establishing a watch** are retried on
  ``429 Too Many Requests`` (waiting for ``Retry-After``), on ``5xx`` answers and on transport
  failures (connection refused or reset, timeouts).
* **Mutations** (``create``, ``update``, ``patch``, ``apply``, ``delete``) are retried only on
  ``429``: the API server's priority-and-fairness sheds such a request before acting on it. A
  ``5xx`` or a broken connection leaves it unknown whether the write happened, so those errors
  reach the caller, who knows whether the write is idempotent.
* Attempts are bounded by :attr:`RetryPolicy.max_attempts`; the delay between attempts is
  exponential with jitter (``base_delay * 2**n``, capped at ``max_delay``, scaled by a random
  factor in ``[0.5, 1]``) or the server's ``Retry-After`` when it sent one (up to
  ``max_retry_after``; a longer demand is not waited for and the error is raised).
* A stream that breaks *after* a watch was established is not retried here: the iterator raises
  and the caller (normally an :class:`Informer`) resumes from the last ``resourceVersion``.

All waiting uses trio's clock, so it runs in virtual time under ``trio.testing.MockClock``.
Request and response headers are never logged, so bearer tokens never reach the logs.
"""

from __future__ import annotations

import email.utils
import enum
import json
import logging
import math
import random
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Literal, Protocol

import attrs
import httpx
import trio

from ._errors import (
    AlreadyExistsError,
    ApiError,
    BadRequestError,
    ClientStateError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    NotFoundError,
    ResourceNotFoundError,
    ResponseError,
    ServerError,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
    WatchStalledError,
)
from ._resource import Resource, parse_resource_list, split_api_version

__all__ = [
    "Client",
    "ClientConfig",
    "RetryPolicy",
    "PatchType",
    "ObjectList",
    "WatchEvent",
    "WatchEventType",
    "WatchStream",
    "Selector",
    "error_from_status",
]

log = logging.getLogger("engine.kube.client")

Selector = str | Mapping[str, str]
"""A label or field selector: the string form (``"app=web,tier!=db"``) or a mapping of
equalities (``{"app": "web"}``)."""

PropagationPolicy = Literal["Foreground", "Background", "Orphan"]

_USER_AGENT = "trio-reconciler-engine/0.1"


class ClientConfig(Protocol):
    """What :class:`Client` needs from a configuration; :class:`engine.kube.Config` has it."""

    @property
    def namespace(self) -> str:
        """The default namespace for namespaced objects."""
        ...

    def httpx_client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.AsyncClient`` (``base_url``, ``verify``, ``auth``, ...)."""
        ...


@attrs.frozen
class RetryPolicy:
    """When and how long :class:`Client` waits before repeating a failed request.

    See the module documentation for which failures are retried for which requests.
    """

    max_attempts: int = attrs.field(default=5, validator=attrs.validators.ge(1))
    """Total attempts per request, the first included (``1`` disables retries)."""
    base_delay: float = attrs.field(default=0.2, validator=attrs.validators.gt(0))
    """Delay before the first retry, doubled for each further one."""
    max_delay: float = attrs.field(default=10.0, validator=attrs.validators.gt(0))
    """Cap on the exponential delay."""
    max_retry_after: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    """The longest ``Retry-After`` honoured; a longer one makes the error reach the caller."""

    def backoff(self, retry: int, rng: random.Random) -> float:
        """The jittered delay before retry number ``retry`` (``0`` for the first)."""
        return min(self.max_delay, self.base_delay * 2.0 ** min(retry, 62)) * rng.uniform(0.5, 1.0)


class PatchType(enum.Enum):
    """The patch formats the API server accepts, valued by their content type."""

    MERGE = "application/merge-patch+json"
    """RFC 7386 JSON merge patch."""
    JSON = "application/json-patch+json"
    """RFC 6902 JSON patch (a list of operations)."""
    STRATEGIC = "application/strategic-merge-patch+json"
    """Kubernetes strategic merge patch (built-in types only)."""
    APPLY = "application/apply-patch+yaml"
    """Server-side apply; needs a field manager."""


class WatchEventType(enum.Enum):
    """The type of a watch event (``ERROR`` events are raised, never yielded)."""

    ADDED = "ADDED"
    MODIFIED = "MODIFIED"
    DELETED = "DELETED"
    BOOKMARK = "BOOKMARK"


@attrs.frozen
class WatchEvent:
    """One event from a watch stream."""

    type: WatchEventType
    """What happened."""
    object: dict[str, Any]
    """The object after the change (before it, for ``DELETED``); for ``BOOKMARK`` only its
    ``metadata.resourceVersion`` is meaningful."""

    @property
    def resource_version(self) -> str | None:
        """The event's ``metadata.resourceVersion``, the point to resume a watch from."""
        rv = self.object.get("metadata", {}).get("resourceVersion")
        return rv if isinstance(rv, str) and rv else None


@attrs.frozen
class ObjectList:
    """One page of a list, or a whole list gathered by :meth:`Client.list_all`."""

    items: list[dict[str, Any]]
    """The objects, each with ``apiVersion`` and ``kind`` filled in."""
    resource_version: str
    """The list's ``metadata.resourceVersion``: where a watch that follows it starts."""
    continue_token: str | None = None
    """The token for the next page, ``None`` on the last page."""
    remaining_item_count: int | None = None
    """The server's estimate of the items after this page, when it gives one."""


def _selector(value: Selector | None) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    return ",".join(f"{k}={v}" for k, v in value.items()) or None


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        seconds = when.timestamp() - time.time()
    if math.isnan(seconds):
        return None
    return max(0.0, seconds)


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


def _error_from_response(response: httpx.Response) -> ApiError:
    body: Any = None
    try:
        body = json.loads(response.content)
    except ValueError:
        pass
    if not (isinstance(body, dict) and body.get("kind") == "Status"):
        body = None
    return error_from_status(
        body,
        code=response.status_code,
        retry_after=_retry_after(response.headers.get("retry-after")),
    )


def _decode_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise ResponseError(f"the API server's answer to {what} must be JSON") from exc
    if not isinstance(body, dict):
        raise ResponseError(f"the API server's answer to {what} must be a JSON object")
    return body


def _kind_of(item: dict[str, Any], list_kind: Any) -> str:
    if isinstance(list_kind, str) and list_kind.endswith("List"):
        return list_kind[: -len("List")]
    return str(item.get("kind", ""))


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPENED = "opened"
    CLOSED = "closed"


class Client:
    """A Kubernetes API client on ``httpx.AsyncClient``, used under trio.

    ::

        async with Client(Config.from_kubeconfig()) as client:
            cms = await client.resource("v1", "ConfigMap")
            obj = await client.get(cms, "settings", namespace="default")

    ``config`` is an :class:`engine.kube.Config` (anything with ``namespace`` and
    ``httpx_client_kwargs()``). ``transport`` replaces the network transport (for example
    ``ApiServer.memory_transport()`` or an ``httpx.MockTransport``); with it, proxy and TLS
    settings of the config are unused. ``timeout`` bounds each non-watch request;
    ``field_manager`` is the default manager for server-side apply; ``user_agent`` names the
    client to the server; ``rng`` drives retry jitter (seed it for reproducible tests). The client can
    be opened once; methods raise :class:`ClientStateError` outside ``async with``.

    Cancellation: entering is a checkpoint only when the config uses an exec credential plugin,
    which then runs at open (so a client certificate it returns can be installed) rather than
    at the first request; leaving closes the pool shielded. Each request method documents its own cancellation behaviour.

    Namespaces: for namespaced types, a ``namespace`` argument wins, then the object's
    ``metadata.namespace`` (for writes), then ``config.namespace``. ``list`` and ``watch`` with
    ``namespace=None`` span all namespaces. Returned objects are plain decoded JSON.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry: RetryPolicy = RetryPolicy(),
        timeout: float = 30.0,
        field_manager: str = "trio-reconciler-engine",
        user_agent: str = _USER_AGENT,
        rng: random.Random | None = None,
    ) -> None:
        self._config = config
        self._transport = transport
        self.retry = retry
        self._timeout = timeout
        self.field_manager = field_manager
        self._user_agent = user_agent
        self._rng = rng or random.Random()
        self._state = _State.UNOPENED
        self._http: httpx.AsyncClient | None = None
        self._discovery: dict[tuple[str, str], dict[str, Resource]] = {}

    @property
    def default_namespace(self) -> str:
        """The namespace used for namespaced objects when none is given (``config.namespace``)."""
        return self._config.namespace or "default"

    async def __aenter__(self) -> Client:
        if self._state is not _State.UNOPENED:
            raise ClientStateError("a Client can be opened only once")
        kwargs = dict(self._config.httpx_client_kwargs())
        await self._exec_client_certificate(kwargs)
        if self._transport is not None:
            for key in ("proxy", "verify", "cert", "mounts"):
                kwargs.pop(key, None)
            kwargs["transport"] = self._transport
            kwargs["trust_env"] = False
        headers = dict(kwargs.pop("headers", None) or {})
        headers.setdefault("User-Agent", self._user_agent)
        headers.setdefault("Accept", "application/json")
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(self._timeout), headers=headers, **kwargs
        )
        self._state = _State.OPENED
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _exec_client_certificate(self, kwargs: dict[str, Any]) -> None:
        get_credential = getattr(kwargs.get("auth"), "get_credential", None)
        ssl_context = getattr(self._config, "ssl_context", None)
        if self._transport is not None or get_credential is None or ssl_context is None:
            return
        credential = await get_credential()
        if getattr(credential, "client_certificate_data", None) is not None:
            kwargs["verify"] = ssl_context(credential=credential)

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent.

        Cancellation: the pool is closed inside a shielded scope, so a cancelled ``aclose``
        still releases its connections.
        """
        if self._state is _State.CLOSED:
            return
        self._state = _State.CLOSED
        if self._http is not None:
            with trio.CancelScope(shield=True):
                await self._http.aclose()

    def _client(self) -> httpx.AsyncClient:
        if self._state is not _State.OPENED or self._http is None:
            raise ClientStateError(
                f"a Client must be used inside 'async with' (it is {self._state.value})"
            )
        return self._http

    async def _sleep_before_retry(self, err: KubeErrorLike, retry: int, what: str) -> bool:
        delay = self.retry.backoff(retry, self._rng)
        if isinstance(err, TooManyRequestsError) and err.retry_after is not None:
            if err.retry_after > self.retry.max_retry_after:
                return False
            delay = err.retry_after
        log.warning(
            "retrying %s in %.3fs after %s (attempt %d of %d)",
            what,
            delay,
            type(err).__name__,
            retry + 2,
            self.retry.max_attempts,
            extra={"request": what, "error": type(err).__name__, "delay": delay, "attempt": retry + 2},
        )
        await trio.sleep(delay)
        return True

    @staticmethod
    def _retryable(err: Exception, safe: bool) -> bool:
        if isinstance(err, TooManyRequestsError):
            return True
        return safe and isinstance(err, ServerError | TransportError)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        safe: bool,
        stream: bool = False,
    ) -> httpx.Response:
        http = self._client()
        query = {k: v for k, v in (params or {}).items() if v is not None}
        content = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        headers = {"Content-Type": content_type} if content is not None else None
        timeout = httpx.Timeout(self._timeout, read=None) if stream else None
        what = f"{method} {path}"
        retry = 0
        while True:
            err: ApiError | TransportError
            try:
                request = http.build_request(
                    method,
                    path,
                    params=query,
                    content=content,
                    headers=headers,
                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                )
                response = await http.send(request, stream=stream)
            except httpx.TransportError as exc:
                err = TransportError(f"{what} failed: {type(exc).__name__}: {exc}")
                err.__cause__ = exc
            else:
                if response.status_code < 400:
                    log.debug("%s -> %d", what, response.status_code)
                    return response
                if stream:
                    try:
                        await response.aread()
                    except httpx.HTTPError:
                        pass
                    finally:
                        await response.aclose()
                err = _error_from_response(response)
                log.debug("%s -> %d %s", what, response.status_code, err.reason)
            if (
                retry + 1 < self.retry.max_attempts
                and self._retryable(err, safe)
                and await self._sleep_before_retry(err, retry, what)
            ):
                retry += 1
                continue
            raise err

    async def _request_json(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        safe: bool,
    ) -> dict[str, Any]:
        response = await self._send(
            method, path, params=params, body=body, content_type=content_type, safe=safe
        )
        return _decode_object(response, f"{method} {path}")

    def _namespace_for(
        self, resource: Resource, namespace: str | None, obj: Mapping[str, Any] | None = None
    ) -> str | None:
        if not resource.namespaced:
            return None
        if namespace is not None:
            return namespace
        if obj is not None:
            meta = obj.get("metadata")
            if isinstance(meta, Mapping) and meta.get("namespace"):
                return str(meta["namespace"])
        return self.default_namespace

    @staticmethod
    def _name_of(obj: Mapping[str, Any]) -> str:
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ValueError("the object must have metadata.name")
        return name

    def _with_type(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]:
        body = dict(obj)
        body.setdefault("apiVersion", resource.api_version)
        body.setdefault("kind", resource.kind)
        return body

    # --- discovery ---

    async def resource(self, api_version: str, kind: str) -> Resource:
        """Resolve ``apiVersion`` and ``kind`` (or plural name) to a :class:`Resource`.

        Answers from the discovery cache; on a miss the group-version's discovery document
        (``/api/v1`` or ``/apis/<group>/<version>``) is fetched again, so types added at runtime
        (new CRDs) are found. Raises :class:`ResourceNotFoundError` when the server does not
        serve it.

        Cancellation: a checkpoint only on a cache miss; cancelling leaves the cache as it was.
        """
        group, version = split_api_version(api_version)
        cached = self._discovery.get((group, version))
        if cached is not None and kind in cached:
            return cached[kind]
        found = await self._discover_group_version(group, version)
        if kind in found:
            return found[kind]
        raise ResourceNotFoundError(
            f"API discovery must list kind {kind!r} in {api_version!r}, and it does not"
        )

    async def resource_for(self, obj: Mapping[str, Any]) -> Resource:
        """Resolve the :class:`Resource` of an object from its ``apiVersion`` and ``kind``.

        Cancellation: as :meth:`resource`.
        """
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if not isinstance(api_version, str) or not isinstance(kind, str):
            raise ValueError("the object must have string apiVersion and kind")
        return await self.resource(api_version, kind)

    async def _discover_group_version(self, group: str, version: str) -> dict[str, Resource]:
        path = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            body = await self._request_json("GET", path, safe=True)
        except NotFoundError:
            self._discovery.pop((group, version), None)
            return {}
        found = parse_resource_list(group, version, body)
        self._discovery[(group, version)] = found
        return found

    async def discover(self) -> list[Resource]:
        """Walk ``/api`` and ``/apis``, refresh the whole discovery cache and return every type.

        Cancellation: a checkpoint; cancelling may leave part of the cache refreshed.
        """
        versions: list[tuple[str, str]] = []
        core = await self._request_json("GET", "/api", safe=True)
        versions += [("", v) for v in core.get("versions", []) if isinstance(v, str)]
        groups = await self._request_json("GET", "/apis", safe=True)
        for entry in groups.get("groups", []):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                continue
            for ver in entry.get("versions", []):
                if isinstance(ver, dict) and isinstance(ver.get("version"), str):
                    versions.append((entry["name"], ver["version"]))
        resources: list[Resource] = []
        for group, version in versions:
            found = await self._discover_group_version(group, version)
            resources += [r for key, r in found.items() if key == r.kind]
        return resources

    # --- reads ---

    async def get(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Read one object (or one of its subresources, such as ``"status"``).

        Retried per the read policy. Cancellation: a checkpoint; nothing to undo.
        """
        ns = self._namespace_for(resource, namespace)
        path = resource.path(namespace=ns, name=name, subresource=subresource)
        return await self._request_json("GET", path, safe=True)

    async def get_status(
        self, resource: Resource, name: str, *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Read an object through its ``status`` subresource.

        Cancellation: a checkpoint; nothing to undo.
        """
        return await self.get(resource, name, namespace=namespace, subresource="status")

    async def list(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Selector | None = None,
        field_selector: Selector | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        resource_version_match: str | None = None,
    ) -> ObjectList:
        """List one page of objects; ``namespace=None`` lists across all namespaces.

        With ``limit``, pass the returned ``continue_token`` back to get the next page (or use
        :meth:`list_all`). An expired continue token raises :class:`GoneError`.
        Retried per the read policy. Cancellation: a checkpoint; nothing to undo.
        """
        ns = namespace if resource.namespaced else None
        params = {
            "labelSelector": _selector(label_selector),
            "fieldSelector": _selector(field_selector),
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version,
            "resourceVersionMatch": resource_version_match,
        }
        path = resource.path(namespace=ns)
        body = await self._request_json("GET", path, params=params, safe=True)
        raw_items = body.get("items") or []
        if not isinstance(raw_items, list):
            raise ResponseError(f"the list answer of GET {path} must have an 'items' array")
        meta = body.get("metadata") or {}
        list_kind = body.get("kind")
        items: list[dict[str, Any]] = []
        for item in raw_items:
            if not isinstance(item, dict):
                log.warning("skipping a list item of %s that is not an object", resource)
                continue
            if "kind" not in item:
                item["kind"] = _kind_of(item, list_kind) or resource.kind
            item.setdefault("apiVersion", resource.api_version)
            items.append(item)
        remaining = meta.get("remainingItemCount")
        return ObjectList(
            items=items,
            resource_version=str(meta.get("resourceVersion") or ""),
            continue_token=meta.get("continue") or None,
            remaining_item_count=remaining if isinstance(remaining, int) else None,
        )

    async def list_all(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Selector | None = None,
        field_selector: Selector | None = None,
        page_size: int = 500,
    ) -> ObjectList:
        """List every object, following ``continue`` tokens ``page_size`` at a time.

        The result's ``resource_version`` is the first page's: the snapshot all pages belong to.
        Cancellation: a checkpoint; pages already read are discarded.
        """
        if page_size < 1:
            raise ValueError("page_size must be >= 1")
        items: list[dict[str, Any]] = []
        token: str | None = None
        resource_version: str | None = None
        while True:
            page = await self.list(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                field_selector=field_selector,
                limit=page_size,
                continue_token=token,
            )
            if resource_version is None:
                resource_version = page.resource_version
            items += page.items
            token = page.continue_token
            if not token:
                return ObjectList(items=items, resource_version=resource_version)

    # --- writes ---

    async def create(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """Create an object and return it as stored.

        Raises :class:`AlreadyExistsError` if it exists. Retried only on 429.
        Cancellation: a checkpoint; if cancelled after sending, the object may have been created.
        """
        ns = self._namespace_for(resource, namespace, obj)
        params = {"fieldManager": field_manager, "dryRun": "All" if dry_run else None}
        return await self._request_json(
            "POST",
            resource.path(namespace=ns),
            params=params,
            body=self._with_type(resource, obj),
            safe=False,
        )

    async def update(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> dict[str, Any]:
        """Replace an object (``PUT``) and return it as stored.

        The object's ``metadata.resourceVersion`` is sent, so the write succeeds only if the
        object has not changed since it was read; otherwise :class:`ConflictError` is raised.
        (Without a ``resourceVersion`` the server applies the update unconditionally.)
        Retried only on 429. Cancellation: a checkpoint; if cancelled after sending, the update
        may have been applied.
        """
        ns = self._namespace_for(resource, namespace, obj)
        path = resource.path(namespace=ns, name=self._name_of(obj), subresource=subresource)
        return await self._request_json(
            "PUT",
            path,
            params={"fieldManager": field_manager},
            body=self._with_type(resource, obj),
            safe=False,
        )

    async def update_status(
        self, resource: Resource, obj: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Replace an object's status through the ``status`` subresource (optimistic, as
        :meth:`update`).

        Cancellation: as :meth:`update`.
        """
        return await self.update(resource, obj, namespace=namespace, subresource="status")

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Patch an object and return it as stored.

        ``patch`` is a mapping (merge, strategic, apply) or a list of operations (JSON patch).
        For :attr:`PatchType.APPLY` the field manager defaults to the client's and ``force``
        takes over conflicting fields. Retried only on 429.
        Cancellation: a checkpoint; if cancelled after sending, the patch may have been applied.
        """
        ns = self._namespace_for(resource, namespace)
        path = resource.path(namespace=ns, name=name, subresource=subresource)
        params: dict[str, Any] = {"fieldManager": field_manager}
        if patch_type is PatchType.APPLY:
            params["fieldManager"] = field_manager or self.field_manager
            params["force"] = "true" if force else None
        elif force:
            raise ValueError("force applies only to PatchType.APPLY")
        return await self._request_json(
            "PATCH", path, params=params, body=patch, content_type=patch_type.value, safe=False
        )

    async def patch_status(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: PatchType = PatchType.MERGE,
        field_manager: str | None = None,
        force: bool = False,
    ) -> dict[str, Any]:
        """Patch an object's ``status`` subresource (see :meth:`patch`).

        Cancellation: as :meth:`patch`.
        """
        return await self.patch(
            resource,
            name,
            patch,
            namespace=namespace,
            patch_type=patch_type,
            subresource="status",
            field_manager=field_manager,
            force=force,
        )

    async def apply(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        *,
        namespace: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Server-side apply ``obj`` (its ``metadata.name`` names the target).

        Cancellation: as :meth:`patch`.
        """
        ns = self._namespace_for(resource, namespace, obj)
        return await self.patch(
            resource,
            self._name_of(obj),
            self._with_type(resource, obj),
            namespace=ns,
            patch_type=PatchType.APPLY,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        propagation_policy: PropagationPolicy | None = None,
        precondition_uid: str | None = None,
        precondition_resource_version: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any]:
        """Delete an object; returns the server's answer (the object, or a ``Status``).

        Preconditions make the delete fail with :class:`ConflictError` unless the object still
        has that uid / resourceVersion. Retried only on 429.
        Cancellation: a checkpoint; if cancelled after sending, the delete may have happened.
        """
        ns = self._namespace_for(resource, namespace)
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {
            k: v
            for k, v in (
                ("uid", precondition_uid),
                ("resourceVersion", precondition_resource_version),
            )
            if v is not None
        }
        if preconditions:
            options["preconditions"] = preconditions
        return await self._request_json(
            "DELETE", resource.path(namespace=ns, name=name), body=options, safe=False
        )

    # --- watch ---

    def watch(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: Selector | None = None,
        field_selector: Selector | None = None,
        resource_version: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int | None = None,
        idle_timeout: float | None = None,
    ) -> WatchStream:
        """Open a watch: use as ``async with client.watch(res, ...) as events: async for ...``.

        ``resource_version`` is where to start (from a list, or the last event seen);
        ``timeout_seconds`` asks the server to end the stream after that long; ``idle_timeout``
        makes the iterator raise :class:`WatchStalledError` when no bytes at all (not even a
        bookmark) arrive for that long. Establishing is retried per the read policy.
        """
        params = {
            "watch": "true",
            "labelSelector": _selector(label_selector),
            "fieldSelector": _selector(field_selector),
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if allow_bookmarks else None,
            "timeoutSeconds": timeout_seconds,
        }
        ns = namespace if resource.namespaced else None
        return WatchStream(self, resource, resource.path(namespace=ns), params, idle_timeout)


KubeErrorLike = ApiError | TransportError


_MAX_LINE = 64 * 1024 * 1024


class WatchStream:
    """An open watch: an async context manager and an async iterator of :class:`WatchEvent`.

    Lines that are not valid watch events (bad JSON, unknown type, an object without
    ``metadata.name`` or ``metadata.resourceVersion``) are logged and skipped. An ``ERROR``
    event is raised as the matching :class:`ApiError` (:class:`GoneError` for 410). A broken
    connection raises :class:`TransportError`; a server that ends the stream ends iteration.
    """

    def __init__(
        self,
        client: Client,
        resource: Resource,
        path: str,
        params: Mapping[str, Any],
        idle_timeout: float | None,
    ) -> None:
        self._client = client
        self._resource = resource
        self._path = path
        self._params = params
        self._idle_timeout = idle_timeout
        self._response: httpx.Response | None = None
        self._chunks: Any = None
        self._buffer = bytearray()
        self._scanned = 0
        self._eof = False
        self.skipped = 0
        """How many malformed lines this stream skipped."""

    async def __aenter__(self) -> WatchStream:
        """Establish the stream (retried per the read policy).

        Cancellation: a checkpoint; a half-open response is closed.
        """
        self._response = await self._client._send(
            "GET", self._path, params=self._params, safe=True, stream=True
        )
        self._chunks = self._response.aiter_bytes()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the stream and its connection. Idempotent.

        Cancellation: shielded, bounded to one second of trio time.
        """
        chunks, response = self._chunks, self._response
        self._chunks = self._response = None
        self._eof = True
        with trio.CancelScope(shield=True, deadline=trio.current_time() + 1.0):
            try:
                if chunks is not None:
                    await chunks.aclose()
            except (httpx.HTTPError, RuntimeError):
                pass
            if response is not None:
                try:
                    await response.aclose()
                except httpx.HTTPError:
                    pass

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        """The next valid event.

        Cancellation: a checkpoint; a cancelled read leaves the stream unusable (close it).
        """
        while True:
            line = await self._next_line()
            if line is None:
                raise StopAsyncIteration
            event = self._decode(line)
            if event is not None:
                return event

    async def _read_chunk(self) -> bytes | None:
        if self._chunks is None:
            return None
        try:
            if self._idle_timeout is None:
                return bytes(await self._chunks.__anext__())
            with trio.move_on_after(self._idle_timeout):
                return bytes(await self._chunks.__anext__())
        except StopAsyncIteration:
            return None
        except httpx.TransportError as exc:
            raise TransportError(
                f"the watch stream of {self._resource} broke: {type(exc).__name__}"
            ) from exc
        except httpx.HTTPError as exc:
            raise ResponseError(
                f"the watch stream of {self._resource} must be decodable: {type(exc).__name__}"
            ) from exc
        raise WatchStalledError(
            f"a watch on {self._resource} must deliver bytes within "
            f"{self._idle_timeout:g}s (idle_timeout), and none arrived"
        )

    async def _next_line(self) -> bytes | None:
        while True:
            newline = self._buffer.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._buffer[:newline])
                del self._buffer[: newline + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if self._eof:
                if self._buffer.strip():
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    self._scanned = 0
                    return line
                return None
            chunk = await self._read_chunk()
            if chunk is None:
                self._eof = True
            else:
                self._buffer += chunk
                if len(self._buffer) > _MAX_LINE:
                    raise ResponseError(
                        f"a watch event of {self._resource} must be at most {_MAX_LINE} bytes"
                    )

    def _skip(self, why: str, line: bytes) -> None:
        self.skipped += 1
        log.warning(
            "skipping a malformed watch line of %s: %s (%d bytes)", self._resource, why, len(line)
        )

    def _decode(self, line: bytes) -> WatchEvent | None:
        if not line.strip():
            return None
        try:
            data = json.loads(line)
        except ValueError:
            self._skip("not JSON", line)
            return None
        if not isinstance(data, dict):
            self._skip("not a JSON object", line)
            return None
        type_, obj = data.get("type"), data.get("object")
        if type_ == "ERROR":
            raise error_from_status(obj if isinstance(obj, dict) else None, code=500)
        try:
            event_type = WatchEventType(type_)
        except ValueError:
            self._skip("unknown event type", line)
            return None
        if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
            self._skip("object without metadata", line)
            return None
        meta = obj["metadata"]
        if event_type is not WatchEventType.BOOKMARK:
            name = meta.get("name")
            if not isinstance(name, str) or not name:
                self._skip("object without metadata.name", line)
                return None
            ns = meta.get("namespace")
            if ns is not None and not isinstance(ns, str):
                self._skip("object with a non-string metadata.namespace", line)
                return None
            obj.setdefault("apiVersion", self._resource.api_version)
            obj.setdefault("kind", self._resource.kind)
        rv = meta.get("resourceVersion")
        if not isinstance(rv, str) or not rv:
            self._skip("object without metadata.resourceVersion", line)
            return None
        return WatchEvent(type=event_type, object=obj)

