"""The request router: sends each request to discovery, the fault admin endpoint, resource
handlers or watches, after applying injected faults; turns errors into ``Status`` answers."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import trio

from .._http import Request, Response
from ._access import Attributes, authorize, forbidden
from ._admission import Admission
from ._authn import ANONYMOUS, Authenticator, UserInfo
from ._conversion import Conversions
from ._discovery import discovery_response
from ._errors import RequestRejected
from ._faults import Fault, Faults, RequestInfo
from ._handlers import handle_resource
from ._impersonation import Impersonation, wanted_user
from ._responses import json_response, status_response
from ._routing import Target, flag, request_info, resolve
from ._storage import ObjectStorage, too_large_resource_version
from ._watch import Watches, WatchObserver
from ._webhooks import WebhookClient

__all__ = ["Router", "ServedRequest", "RequestObserver"]

logger = logging.getLogger("engine.apiserver.api")

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def _limit(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _path_verb(request: Request) -> str:
    method = request.method.lower()
    return "get" if method == "head" else method


@attrs.frozen
class ServedRequest:
    """One answered resource request, as request observers see it."""

    method: str
    path: str
    verb: str
    """As fault scopes name it: ``get``, ``list``, ``watch``, ``create``, ``patch``, ..."""
    user_agent: str
    group: str
    kind: str
    namespace: str | None
    name: str | None
    subresource: str | None
    status: int
    """The HTTP status answered (a watch: the status its stream started with)."""
    body: bytes
    """The request body."""
    selectors: tuple[str, str] = ("", "")
    """The ``labelSelector`` and ``fieldSelector`` of a list or watch (empty when absent)."""
    received_at: float = 0.0
    """trio clock time at which the request arrived (before injected latency); it was
    answered at the observer's ``trio.current_time()``."""
    reply: bytes = b""
    """The body answered when ``status`` is an error (a ``Status``); empty otherwise."""
    limit: int | None = None
    """The ``limit`` of a list (``None`` when absent or not a number): its answer held every
    object selected only if there were no more than that."""
    continued: bool = False
    """Whether a list asked for a page after the first (``continue``)."""
    traceparent: str | None = None
    """The request's W3C ``traceparent`` header (the caller's trace context), if it sent one."""
    initial_events: bool = False
    """Whether a watch asked for the collection's state first (``sendInitialEvents``): it
    reads what a list would, then goes on as a watch."""

    @property
    def reads_state(self) -> bool:
        """Whether this request reads a collection's whole state: a list, or a watch with
        ``sendInitialEvents`` (watch-list)."""
        return self.verb == "list" or (self.verb == "watch" and self.initial_events)


RequestObserver = Callable[[ServedRequest], None]


@attrs.define(eq=False)
class Router:
    """Turns :class:`Request` objects into :class:`Response` objects.

    Each request is authenticated (``tokens``, see :mod:`._authn`), its ``Impersonate-*``
    headers are honoured (see :mod:`._impersonation`), and, with ``authorization``, a user not
    in ``system:masters`` is authorized by RBAC (see :mod:`._access`). Without
    ``authorization`` every authenticated user may do everything, but a request without
    credentials (``system:unauthenticated``) is still authorized by RBAC: no server this
    project starts lets an anonymous request read or write objects (a real kube-apiserver with
    ``--authorization-mode=AlwaysAllow`` would). ``bookmark_interval`` is in seconds of trio
    time.
    """

    store: ObjectStorage
    faults: Faults
    bookmark_interval: float = 60.0
    authorization: bool = True
    tokens: Authenticator = attrs.field(factory=Authenticator)
    server_address: str = "127.0.0.1:0"
    sharding: bool = False
    """The ``ShardedListAndWatch`` feature gate (see :mod:`._shards`)."""
    observers: list[RequestObserver] = attrs.field(factory=list)
    """Called synchronously with every answered resource request (not discovery, not
    ``/_faults``); an observer must not raise."""
    watch_observers: list[WatchObserver] = attrs.field(factory=list)
    """Told of every object event sent on a watch (see :data:`._watch.WatchObserver`); must not raise."""
    admission: Admission = attrs.field(init=False, repr=False)
    """Calls the admission webhooks of the stored configurations on writes."""
    conversions: Conversions = attrs.field(init=False, repr=False)
    """Converts the objects of custom resources whose CRD names a conversion webhook."""
    _watches: Watches = attrs.field(init=False, repr=False)
    _impersonation: Impersonation = attrs.field(factory=Impersonation, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        self.admission = Admission(self.store, WebhookClient(self.store))
        self.conversions = Conversions(self.store, self.admission.client)
        self.admission.convert = self.conversions.convert
        self._watches = Watches(self.store, self.faults, self.bookmark_interval, sharding=self.sharding,
                                observers=self.watch_observers)
        self._watches.conversions = self.conversions
        self.faults.connect_watches(self._watches.drop)
        self.faults.connect_counter(lambda: self.store.resource_version)

    async def handle(
        self, request: Request, *, certificate: UserInfo | None = None, unauthenticated: UserInfo = ANONYMOUS
    ) -> Response:
        """Answer one request: ``certificate`` is the user of the client certificate its TLS
        connection presented, ``unauthenticated`` who it is without credentials
        (``system:anonymous`` unless the transport is trusted, see :mod:`._authn`). A write of
        a request still being answered when the storage is restored is refused with ``503``
        (see :meth:`ObjectStorage.fence_writes`). Cancellation propagates (the connection is
        then closed)."""
        served: list[Any] = []
        received_at = trio.current_time()
        try:
            with self.store.fence_writes():
                response = await self._answer(request, served, certificate, unauthenticated)
        except RequestRejected as exc:
            response = status_response(exc)
        except Exception:
            logger.exception("internal error answering %s %s", request.method, request.path)
            response = status_response(
                RequestRejected(500, "InternalError", "an internal error occurred in the embedded API server")
            )
        if self.observers and served:
            target, info = served
            record = ServedRequest(
                request.method, request.path, info.verb, info.user_agent, target.rt.group, target.rt.kind,
                target.namespace, target.name, target.subresource, response.status, request.body,
                (request.query.get("labelSelector", ""), request.query.get("fieldSelector", "")), received_at,
                response.body if response.status >= 400 else b"", _limit(request.query.get("limit")),
                bool(request.query.get("continue")), request.headers.get("traceparent"),
                info.verb == "watch" and flag(request.query, "sendInitialEvents"),
            )
            for observer in self.observers:
                observer(record)
        return response

    async def _answer(
        self, request: Request, served: list[Any], certificate: UserInfo | None, unauthenticated: UserInfo
    ) -> Response:
        user = self.tokens.authenticate(
            request.headers.get("authorization"), self.store, self.store.wall_clock,
            certificate=certificate, unauthenticated=unauthenticated,
        )
        path = request.path.rstrip("/") or "/"
        faults = path == "/_faults" or path.startswith("/_faults/")
        target = None if faults else resolve(self.store, path)
        info = request_info(request, target)
        if target is not None:
            served[:] = [target, info]
        attributes = self._attributes(request, target, info.verb)
        wanted = wanted_user(request.headers)
        if wanted is not None:
            user = self._impersonation.user(self._allowed, user, wanted, attributes)
        self._authorize(user, attributes)
        if target is not None:
            self._authorize_create(user, request, target, attributes)
        if faults:
            return self._admin(request, path)
        fault = self.faults.take("latency", info)
        if fault is not None:
            await trio.sleep(fault.seconds)
        fault = self.faults.take("fail", info)
        if fault is not None:
            return self._failure(fault)
        if target is None:
            return discovery_response(
                self.store.types(), request, path, server_address=self.server_address, sharding=self.sharding
            )
        if info.verb in ("get", "list"):
            await self._read_from_watch_cache(target, info, request.query.get("resourceVersion"))
        if info.verb in ("get", "list") or (info.verb == "watch" and flag(request.query, "sendInitialEvents")):
            await self.store.wait_for_resource_version(request.query.get("resourceVersion"))
        if info.verb == "watch":
            return self._watches.open(request, target, info)
        return await handle_resource(
            self.store, request, target, info, caller=user, tokens=self.tokens, sharding=self.sharding,
            admission=self.admission, conversions=self.conversions,
        )

    async def _read_from_watch_cache(self, target: Target, info: RequestInfo, resource_version: str | None) -> None:
        """Under a ``withhold_progress`` fault, a read at a ``resourceVersion`` waits for the
        type's watch cache to reach it, and is refused 504 ``ResourceVersionTooLarge`` when it
        does not within 3 s (see :meth:`Faults.withhold_progress`)."""
        try:
            wanted = int(resource_version or 0)
        except ValueError:
            return
        if wanted <= 0:
            return
        fault = self.faults.take("withhold_progress", info)
        if fault is None:
            return
        key = target.rt.storage_key
        if min(self.store.resource_version, fault.resource_version) >= wanted:
            return
        if not await self.store.wait_for_write(key, wanted):
            current = min(self.store.resource_version, max(fault.resource_version, self.store.last_write(key)))
            raise too_large_resource_version(wanted, current)

    @staticmethod
    def _attributes(request: Request, target: Target | None, verb: str) -> Attributes:
        """What the request asks to do, as the authorizer sees it."""
        if target is None:
            return Attributes(_path_verb(request), path=request.path, is_resource=False)
        if verb == "get" and flag(request.query, "watch"):
            verb = "watch"
        return Attributes(
            verb, target.rt.plural, target.rt.group, target.subresource or "", target.namespace or "", target.name or ""
        )

    def _allowed(self, user: UserInfo, attributes: Attributes) -> bool:
        if user.admin or (not self.authorization and not user.anonymous):
            return True
        return authorize(self.store, user, attributes)[0]

    def _authorize(self, user: UserInfo, attributes: Attributes) -> None:
        if not self._allowed(user, attributes):
            raise forbidden(user, attributes)

    def _authorize_create(self, user: UserInfo, request: Request, target: Target, attributes: Attributes) -> None:
        if user.admin:
            return
        # Only a request that would create the object needs ``create`` too: an update, or an
        # apply; any other patch of a missing object is answered 404 (as kube-apiserver does).
        creates = attributes.verb == "update" or "apply-patch" in request.headers.get("content-type", "")
        if creates and target.name is not None and target.subresource is None:
            if self.store.lookup(target.rt, target.namespace, target.name) is None:
                self._authorize(user, attrs.evolve(attributes, verb="create"))

    def _failure(self, fault: Fault) -> Response:
        reason = _REASONS.get(fault.status, "InternalError")
        details: dict[str, Any] = {}
        headers = []
        if fault.retry_after is not None:
            seconds = max(1, math.ceil(fault.retry_after))
            headers.append(("retry-after", str(seconds)))
            details["retryAfterSeconds"] = seconds
        exc = RequestRejected(
            fault.status, reason, f"injected fault: answering {fault.status} {reason}", details=details or None
        )
        return status_response(exc, headers)

    def _admin(self, request: Request, path: str) -> Response:
        if path == "/_faults" and request.method == "GET":
            return json_response(200, {"faults": [f.to_json() for f in self.faults.active]})
        if path == "/_faults" and request.method == "DELETE":
            self.faults.clear()
            return json_response(200, {"faults": []})
        if path == "/_faults" and request.method == "POST":
            try:
                result = self.faults.from_json(json.loads(request.body or b"null"))
            except (ValueError, TypeError, KeyError) as exc:
                raise RequestRejected(400, "BadRequest", f"malformed fault: {exc}") from None
            if isinstance(result, int):
                return json_response(200, {"dropped": result})
            return json_response(201, result.to_json())
        if request.method == "DELETE":
            ident = path.rsplit("/", 1)[1]
            for fault in self.faults.active:
                if str(fault.id) == ident:
                    self.faults.remove(fault)
                    return json_response(200, fault.to_json())
            raise RequestRejected(404, "NotFound", f"fault {ident!r} not found")
        raise RequestRejected(405, "MethodNotAllowed", f"{request.method} is not allowed on {path}")
