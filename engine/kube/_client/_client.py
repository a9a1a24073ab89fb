"""An httpx-based Kubernetes API client for trio.

Which failed requests are retried, and after how long, is described in
:mod:`engine.kube._client._retry`; watch streams are read by :class:`WatchStream` (``_watch``). All
waiting uses trio's clock, so it runs in virtual time under ``trio.testing.MockClock``.
Request and response headers are never logged, so bearer tokens never reach the logs.
"""

from __future__ import annotations

import enum
import logging
import random
from collections.abc import Mapping
from functools import partial
from types import TracebackType
from typing import Any, Literal, Protocol, overload

import attrs
import httpx
import trio

from ..._tracing import request_span
from ..._writes import OwnWrite, own_write
from . import _json
from ._config import Config
from ._errors import (
    ApiError,
    ClientStateError,
    NotFoundError,
    ResourceNotFoundError,
    ResponseError,
    TransportError,
    error_from_status,
    transport_error,
)
from ._forbidden import ForbiddenLog
from ._request import RequestOptions
from ._resource import Resource, parse_resource_list, split_api_version
from ._retry import RetryPolicy, call_with_retries, parse_retry_after
from ._sender import Sender, open_sender
from ._watch import WatchEvent, WatchEventType, WatchStream
from ._wire import resource_version_of

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
    "ServerVersion",
    "error_from_status",
]

log = logging.getLogger("engine.kube.client")

Selector = str | Mapping[str, str]
"""A label or field selector: the string form (``"app=web,tier!=db"``) or a mapping of
equalities (``{"app": "web"}``)."""

PropagationPolicy = Literal["Foreground", "Background", "Orphan"]

_USER_AGENT = "trio-reconciler-engine/0.1"
_DEFAULT_RETRY = RetryPolicy()
_READ = RequestOptions(safe=True)


class ClientConfig(Protocol):
    """What :class:`Client` needs from a configuration; :class:`engine.kube.Config` has it."""

    @property
    def namespace(self) -> str:
        """The default namespace for namespaced objects."""
        ...

    def httpx_client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``httpx.AsyncClient`` (``base_url``, ``verify``, ``auth``, ...)."""
        ...


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
    shard_selector: str | None = None
    """``metadata.shardInfo.selector``: the ``shardSelector`` the server applied, as it
    echoes it (only servers that filter by it do, and only on lists of built-in kinds)."""


@attrs.frozen
class ServerVersion:
    """What the API server says it is (``GET /version``), as ``kubectl version`` shows it."""

    major: int
    """``1`` for every Kubernetes release."""
    minor: int
    """``36`` for v1.36.2 (a distribution's ``"36+"`` is read as 36)."""
    git_version: str
    """The full version, ``v1.36.2`` (a distribution's build carries a suffix)."""

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> ServerVersion:
        """From the ``/version`` answer; :class:`ValueError` naming the field that is not a number."""
        numbers = []
        for field in ("major", "minor"):
            digits = str(body.get(field, "")).rstrip("+")
            if not digits.isdigit():
                raise ValueError(f"/version field {field!r} is not a number: {body.get(field)!r}")
            numbers.append(int(digits))
        return cls(numbers[0], numbers[1], str(body.get("gitVersion", "")))

    def __str__(self) -> str:
        return self.git_version or f"v{self.major}.{self.minor}"


def _shard_info(meta: Mapping[str, Any]) -> str | None:
    info = meta.get("shardInfo")
    selector = info.get("selector") if isinstance(info, dict) else None
    return selector if isinstance(selector, str) and selector else None


def _selector(value: Selector | None) -> str | None:
    if value is None or isinstance(value, str):
        return value or None
    return ",".join(f"{k}={v}" for k, v in value.items()) or None


def join_selectors(*selectors: Selector | None) -> str | None:
    """The label selector matching what every one of ``selectors`` matches (``None`` if none)::

        join_selectors("app=web", {"tier": "front"}, None) == "app=web,tier=front"
    """
    return ",".join(s for s in map(_selector, selectors) if s) or None


def _error_from_response(response: httpx.Response) -> ApiError:
    body: Any = None
    try:
        body = _json.loads(response.content)
    except ValueError:
        pass
    if not (isinstance(body, dict) and body.get("kind") == "Status"):
        body = None
    return error_from_status(
        body,
        code=response.status_code,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


def _decode_object(response: httpx.Response, what: str) -> dict[str, Any]:
    try:
        body = _json.loads(response.content)
    except ValueError as exc:
        raise ResponseError(f"the API server's answer to {what} must be JSON") from exc
    if not isinstance(body, dict):
        raise ResponseError(f"the API server's answer to {what} must be a JSON object")
    return body


def _kind_of(item: dict[str, Any], list_kind: Any) -> str:
    if isinstance(list_kind, str) and list_kind.endswith("List"):
        return list_kind[: -len("List")]
    return str(item.get("kind", ""))


class _Unasked(enum.Enum):
    UNASKED = "unasked"


_UNASKED = _Unasked.UNASKED


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
    ``httpx_client_kwargs()``). Requests go through the engine's own HTTP/1.1 transport
    (``engine.kube._client._transport``: one origin, reused connections, TLS from the config), or
    through ``httpx.AsyncClient``'s pool when a proxy applies (``proxy-url``, or
    ``HTTPS_PROXY`` and friends), decided once, when the client opens (the senders of
    ``engine.kube._client._sender``). ``transport`` replaces the network transport (for example
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
        retry: RetryPolicy = _DEFAULT_RETRY,
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
        self._sender: Sender | None = None
        self._server = ""
        self._discovery: dict[tuple[str, str], dict[str, Resource]] = {}
        self.forbidden = ForbiddenLog()
        """Every 403 answer, counted per verb and resource; the first of each is logged."""

    @property
    def default_namespace(self) -> str:
        """The namespace used for namespaced objects when none is given (``config.namespace``)."""
        return self._config.namespace or "default"

    async def __aenter__(self) -> Client:
        if self._state is not _State.UNOPENED:
            raise ClientStateError("a Client can be opened only once")
        if self._transport is not None and isinstance(self._config, Config):
            kwargs = self._config.httpx_client_kwargs(tls=False)
        else:
            kwargs = dict(self._config.httpx_client_kwargs())
        await self._exec_client_certificate(kwargs)
        headers = httpx.Headers(kwargs.pop("headers", None) or {})
        headers.setdefault("User-Agent", self._user_agent)
        headers.setdefault("Accept", "application/json")
        headers.setdefault("Accept-Encoding", "gzip, deflate")
        self._server = str(httpx.URL(kwargs.get("base_url") or "")).rstrip("/")
        self._sender = open_sender(kwargs, headers, self._timeout, self._transport)
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
        with trio.CancelScope(shield=True):
            if self._sender is not None:
                await self._sender.aclose()

    def _check_open(self) -> None:
        if self._state is not _State.OPENED:
            raise ClientStateError(
                f"a Client must be used inside 'async with' (it is {self._state.value})"
            )

    async def _send(self, method: str, path: str, options: RequestOptions) -> httpx.Response:
        """Send a request with retries; a 4xx or 5xx answer raises its :class:`ApiError`.

        Cancellation: a checkpoint; a cancelled exchange closes its connection.
        """
        self._check_open()
        sender = self._sender
        assert sender is not None
        what = f"{method} {path}"

        async def attempt() -> httpx.Response:
            try:
                response = await sender.send(method, path, options)
            except httpx.TransportError as exc:
                raise self._transport_error(exc, what) from exc
            if response.status_code < 400:
                log.debug("%s -> %d", what, response.status_code)
                return response
            if options.stream:
                try:
                    await response.aread()
                except httpx.HTTPError:
                    pass
                finally:
                    await response.aclose()
            elif not options.load:
                response.read()
            err = _error_from_response(response)
            log.debug("%s -> %d %s", what, response.status_code, err.reason)
            if response.status_code == 403:
                self.forbidden.record(err)
            raise err

        span = request_span(method, path)
        if span is not None:
            return await span.around(call_with_retries(
                attempt, policy=self.retry if options.retry is None else options.retry, rng=self._rng,
                safe=options.safe, what=what,
            ))
        # Untraced: the first attempt is awaited here, one coroutine fewer on the way of every
        # answer; only a failed one goes on to the retries.
        try:
            return await attempt()
        except (ApiError, TransportError) as err:
            failed = err
        return await call_with_retries(
            attempt, policy=self.retry if options.retry is None else options.retry, rng=self._rng, safe=options.safe,
            what=what, failed=failed,
        )

    def _transport_error(self, exc: httpx.TransportError, what: str) -> Exception:
        return transport_error(
            exc,
            server=self._server,
            request=what,
            ca_source=getattr(self._config, "ca_source", None) if self._server.startswith("https:") else None,
            server_name=getattr(self._config, "tls_server_name", None),
        )

    async def _request_json(
        self, method: str, path: str, options: RequestOptions = _READ, note: OwnWrite | None | _Unasked = _UNASKED
    ) -> dict[str, Any]:
        """Send a request and decode the object answered. A write (not ``safe``) in a run is
        noted with the ``resourceVersion`` it returned (:func:`engine._writes.own_write`), so
        the watch echo of the run's own write is not news to its controller. ``note``: that
        note, when the caller asked for it already."""
        if note is _UNASKED:
            note = None if options.safe else own_write()
        if note is None:
            return _decode_object(await self._send(method, path, options), f"{method} {path}")
        with note:
            obj = _decode_object(await self._send(method, path, options), f"{method} {path}")
            note.revision = resource_version_of(obj)
            return obj

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
            body = await self._request_json("GET", path)
        except NotFoundError:
            self._discovery.pop((group, version), None)
            return {}
        found = parse_resource_list(group, version, body)
        self._discovery[(group, version)] = found
        return found

    async def server_version(self) -> ServerVersion:
        """The server's version (``GET /version``, which anyone may read).

        Cancellation: a checkpoint; nothing to undo.
        """
        body = await self._request_json("GET", "/version")
        try:
            return ServerVersion.from_json(body)
        except ValueError as exc:
            raise ResponseError(str(exc)) from None

    async def discover(self) -> list[Resource]:
        """Walk ``/api`` and ``/apis``, refresh the whole discovery cache and return every type.

        Cancellation: a checkpoint; cancelling may leave part of the cache refreshed.
        """
        versions: list[tuple[str, str]] = []
        core = await self._request_json("GET", "/api")
        versions += [("", v) for v in core.get("versions", []) if isinstance(v, str)]
        groups = await self._request_json("GET", "/apis")
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
        return await self._request_json("GET", path)

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
        shard_selector: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> ObjectList:
        """List one page of objects; ``namespace=None`` lists across all namespaces.

        With ``limit``, pass the returned ``continue_token`` back to get the next page (or use
        :meth:`list_all`). An expired continue token raises :class:`GoneError`.
        ``shard_selector`` is sent as ``shardSelector`` (KEP-5866, see
        :meth:`KeyRanges.selector <engine.KeyRanges.selector>`); a server without the
        feature ignores it, and the continue token does not carry it: send it with every page.
        Retried per the read policy: ``retry``, or the client's (``RetryPolicy(max_attempts=1)``
        hands the first failure to the caller). Cancellation: a checkpoint; nothing to undo.
        """
        ns = namespace if resource.namespaced else None
        params = {
            "labelSelector": _selector(label_selector),
            "fieldSelector": _selector(field_selector),
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version,
            "resourceVersionMatch": resource_version_match,
            "shardSelector": shard_selector or None,
        }
        path = resource.path(namespace=ns)
        body = await self._request_json("GET", path, RequestOptions.of(safe=True, params=params, retry=retry))
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
            shard_selector=_shard_info(meta),
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
        options = RequestOptions.of(safe=False, params=params, body=self._with_type(resource, obj))
        return await self._request_json("POST", resource.path(namespace=ns), options)

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
        options = RequestOptions.of(safe=False, params={"fieldManager": field_manager}, body=self._with_type(resource, obj))
        return await self._request_json("PUT", path, options)

    async def update_status(
        self, resource: Resource, obj: Mapping[str, Any], *, namespace: str | None = None
    ) -> dict[str, Any]:
        """Replace an object's status through the ``status`` subresource (optimistic, as
        :meth:`update`).

        Cancellation: as :meth:`update`.
        """
        return await self.update(resource, obj, namespace=namespace, subresource="status")

    @overload
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
        decode: Literal[True] = True,
    ) -> dict[str, Any]: ...

    @overload
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
        decode: Literal[False],
    ) -> None: ...

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
        decode: bool = True,
    ) -> dict[str, Any] | None:
        """Patch an object and return it as stored (``None`` with ``decode=False``).

        ``patch`` is a mapping (merge, strategic, apply) or a list of operations (JSON patch).
        For :attr:`PatchType.APPLY` the field manager defaults to the client's and ``force``
        takes over conflicting fields. With ``decode=False`` the server's answer is read but
        not decoded (nor checked to be JSON) unless it is an error, which raises as always:
        for callers that do not use the stored object (inside a run it is decoded, for the
        ``resourceVersion`` the run's controller notes). Retried only on 429.
        Cancellation: a checkpoint; if cancelled after sending, the patch may have been applied.
        """
        ns = self._namespace_for(resource, namespace)
        path = resource.path(namespace=ns, name=name, subresource=subresource)
        params: dict[str, Any] | None = None
        if patch_type is PatchType.APPLY:
            params = {"fieldManager": field_manager or self.field_manager, "force": "true" if force else None}
        elif force:
            raise ValueError("force applies only to PatchType.APPLY")
        elif field_manager is not None:
            params = {"fieldManager": field_manager}
        note = own_write()
        if not decode and note is None:
            # The answer is read (so the connection is reused) but decoded only when it is an
            # error; in a run it is decoded, for the resourceVersion the run wrote.
            options = RequestOptions.of(safe=False, params=params, body=patch, content_type=patch_type.value, load=False)
            await self._send("PATCH", path, options)
            return None
        options = RequestOptions.of(safe=False, params=params, body=patch, content_type=patch_type.value)
        obj = await self._request_json("PATCH", path, options, note)
        return obj if decode else None

    @overload
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
        decode: Literal[True] = True,
    ) -> dict[str, Any]: ...

    @overload
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
        decode: Literal[False],
    ) -> None: ...

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
        decode: bool = True,
    ) -> dict[str, Any] | None:
        """Patch an object's ``status`` subresource (see :meth:`patch`, ``decode`` included).

        Cancellation: as :meth:`patch`.
        """
        if decode:
            return await self.patch(
                resource, name, patch, namespace=namespace, patch_type=patch_type, subresource="status",
                field_manager=field_manager, force=force,
            )
        await self.patch(
            resource, name, patch, namespace=namespace, patch_type=patch_type, subresource="status",
            field_manager=field_manager, force=force, decode=False,
        )
        return None

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
            "DELETE", resource.path(namespace=ns, name=name), RequestOptions.of(safe=False, body=options)
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
        shard_selector: str | None = None,
        retry: RetryPolicy | None = None,
        send_initial_events: bool = False,
    ) -> WatchStream:
        """Open a watch: use as ``async with client.watch(res, ...) as events: async for ...``.

        ``resource_version`` is where to start (from a list, or the last event seen);
        ``timeout_seconds`` asks the server to end the stream after that long; ``idle_timeout``
        makes the iterator raise :class:`WatchStalledError` when no bytes at all (not even a
        bookmark) arrive for that long. ``shard_selector`` is sent as ``shardSelector``: a
        server with the feature sends only the events of objects in those ranges (and answers
        500 to a malformed one), any other ignores it. Establishing is retried per the read
        policy: ``retry``, or the client's (``RetryPolicy(max_attempts=1)`` hands the first
        failure to the caller, as a :class:`Watcher` wants it). ``send_initial_events`` asks for
        a watch-list stream (``sendInitialEvents=true``, ``resourceVersionMatch=NotOlderThan``):
        every object that exists (not older than ``resource_version``; none given: now) as an
        ``ADDED`` event, then a bookmark annotated ``k8s.io/initial-events-end``, then the
        changes; bookmarks are asked for, as the server requires.
        """
        params = {
            "shardSelector": shard_selector or None,
            "watch": "true",
            "labelSelector": _selector(label_selector),
            "fieldSelector": _selector(field_selector),
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true" if allow_bookmarks or send_initial_events else None,
            "timeoutSeconds": timeout_seconds,
        }
        if send_initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
        ns = namespace if resource.namespaced else None
        options = RequestOptions.of(safe=True, params=params, stream=True, retry=retry)
        open_response = partial(self._send, "GET", resource.path(namespace=ns), options)
        return WatchStream(open_response, resource, idle_timeout)
