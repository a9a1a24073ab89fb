"""``ApiServer``: the embedded Kubernetes-compatible API server."""

from __future__ import annotations

import base64
import contextlib
import enum
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

import attrs
import httpx
import trio
import yaml

from .._http import API_SERVER_MAX_HEADER_BYTES, serve_http
from ._api import RequestObserver, Router
from ._authn import ADMIN, Authenticator, certificate_user
from ._controllers import Controllers
from ._errors import ApiServerError
from ._faults import Faults
from ._memory import DirectTransport, MemoryTransport
from ._shards import SHARDED_LIST_AND_WATCH, check_feature_gates
from ._storage import ObjectStorage, StorageSnapshot
from ._tls import TlsMaterial
from ._watch import WatchObserver

__all__ = ["ApiServer"]

logger = logging.getLogger("engine.apiserver.server")

MEMORY_URL = "http://embedded-apiserver.invalid"


class _State(enum.Enum):
    UNOPENED = "unopened"
    OPEN = "open"
    CLOSED = "closed"


@attrs.define(eq=False, kw_only=True)
class ApiServer:
    """An embedded Kubernetes-compatible API server; use it as ``async with ApiServer() as api``.

    Entering starts serving (on ``host:port`` unless ``listen=False``) and returns once the
    server is ready; leaving cancels every connection and watch and returns once they are gone.
    The server's tasks run in a nursery opened by ``__aenter__``: if one crashes, the body of
    the ``async with`` is cancelled and the error propagates from ``__aexit__``. A server is
    used once.

    ``listen=False`` opens no sockets at all: reach the server through :meth:`memory_transport`
    (the whole system then runs inside one trio run, under ``MockClock`` if you like).
    ``tls=True`` serves HTTPS with a generated CA and asks for client certificates (it needs
    ``trustme``); otherwise the socket speaks plain HTTP. Either way the socket lets no one in
    without credentials (see below). ``history_size`` bounds the change history
    watches replay from (older resourceVersions get 410); ``watch_buffer`` bounds each watcher's
    buffer (a watcher that falls that far behind loses its stream); ``bookmark_interval`` is
    the period of BOOKMARK events in seconds of trio time; ``seed`` makes uids and generated
    names reproducible; ``wall_clock`` (seconds since the epoch, default ``time.time``) dates
    objects: pass ``lambda: EPOCH + trio.current_time()`` for fully reproducible objects.
    Waits, timeouts and bookmarks always use trio's clock.

    ``controllers=True`` (the default) runs, beside the server, the controllers a cluster has:
    the garbage collector and the namespace controller of kube-controller-manager. They work
    after the API has answered, as on a cluster: a deleted owner's dependents, a terminating
    namespace's contents go away shortly after (:meth:`settle` waits for that).
    ``controllers=False`` answers as an API server without a controller manager (as envtest
    runs): nothing collects garbage and a deleted namespace stays ``Terminating`` until
    finalized (``PUT /api/v1/namespaces/{name}/finalize``). The API server's own cleanup of a
    deleted CustomResourceDefinition's objects runs either way.

    Requests are authenticated and authorized as on a cluster (see :mod:`._authn`). The
    kubeconfig's user is ``kubernetes-admin`` in ``system:masters`` and may do everything: the
    credential :attr:`kubeconfig` carries (the client certificate in TLS mode, the bearer
    token :attr:`admin_token` over plain HTTP; the admin token is accepted in TLS mode too),
    and every request through :meth:`memory_transport` or :meth:`direct_transport` that
    carries no credential of its own (those transports have no socket, so only this process
    reaches them). A request over a socket without credentials is ``system:anonymous`` in
    ``system:unauthenticated``, as kube-apiserver's anonymous authentication makes it, and the
    bootstrap roles let it read ``/healthz``, ``/livez``, ``/readyz`` and ``/version`` only:
    anything else is the real server's 403 (``secrets is forbidden: User
    "system:anonymous" cannot list resource "secrets" ...``). kubectl sends no bearer token
    over plain HTTP, so kubectl needs ``tls=True``; :class:`engine.kube.Client` and httpx
    send it either way. A bearer token of a service account (from
    ``POST .../serviceaccounts/{name}/token`` or ``kubectl create token``, signed by this
    server) and a client certificate from the server's CA (common name the user,
    organizations the groups) name other users, whose every request is authorized by the
    stored Roles, ClusterRoles and their bindings as the RBAC authorizer does it, with the
    bootstrap roles a cluster has (discovery, ``/version``, self reviews for every
    authenticated user); ``Impersonate-*`` headers (``kubectl --as``) are honoured as
    kube-apiserver 1.36 honours them (see :mod:`._impersonation`); a denial is a 403
    ``Forbidden`` Status, a token the server did not issue (or expired, or whose service
    account is gone) a 401. ``authorization=False`` lets every authenticated user do
    everything (for tests that ask for it); requests without credentials stay limited to
    what RBAC lets ``system:anonymous`` do.

    ``feature_gates`` turns on features that a real server has behind a gate (unknown names are a
    ``ValueError``). ``{"ShardedListAndWatch": True}`` serves sharded list and watch
    (KEP-5866) as kube-apiserver 1.36 does with that alpha gate: the ``shardSelector`` of
    list, watch and deletecollection filters by a hash range of ``metadata.uid`` or
    ``metadata.namespace``, a malformed one is a 500, and lists of built-in kinds echo it in
    ``metadata.shardInfo``. Off (the default, as on a real server) the parameter is ignored.
    Stored ``MutatingWebhookConfiguration`` and ``ValidatingWebhookConfiguration`` objects are
    honoured as kube-apiserver 1.36 honours them (see :mod:`._admission`), and custom resources
    whose CRD names a conversion webhook are converted through it (see :mod:`._conversion`).
    Webhook calls go over HTTPS, checked with the configuration's ``caBundle``, unless
    ``webhook_transport`` (an ``httpx.AsyncBaseTransport``, assignable at any time) is set:
    then every call goes through it, addressed to the configured URL, with no sockets.
    """

    host: str = "127.0.0.1"
    port: int = 0
    tls: bool = False
    listen: bool = True
    history_size: int = 10_000
    watch_buffer: int = 1_000
    bookmark_interval: float = 60.0
    seed: int | None = None
    wall_clock: Callable[[], float] = time.time
    controllers: bool = True
    authorization: bool = True
    header_timeout: float | None = 32.0
    """Seconds a socket's request head may take (from the connection's start, or from the first
    byte of a later request): kube-apiserver's ``ReadHeaderTimeout``. Past it the connection is
    closed without an answer, as Go closes it. ``None``: no limit."""
    read_timeout: float | None = 60.0
    """Seconds a socket's whole request (head and body) may take, counted as for
    ``header_timeout``: kube-apiserver's default ``--request-timeout``, so that a body never
    finished does not hold its connection forever. ``None``: no limit."""
    idle_timeout: float | None = 90.0
    """Seconds a kept-alive socket may wait for its next request: kube-apiserver's
    ``IdleTimeout``. ``None``: no limit."""
    feature_gates: Mapping[str, bool] = attrs.field(factory=dict, converter=check_feature_gates)
    """Every known feature gate with its value (the defaults overridden by the argument)."""
    webhook_transport: httpx.AsyncBaseTransport | None = attrs.field(
        default=None, on_setattr=lambda self, _, value: self._set_webhook_transport(value)
    )
    """Where admission and conversion webhook calls go (``None``: over HTTPS, see
    :mod:`._webhooks`); may be assigned at any time."""
    faults: Faults = attrs.field(factory=Faults, init=False, repr=False)
    """Fault injection; see :class:`~engine.apiserver.Faults`."""
    store: ObjectStorage = attrs.field(init=False, repr=False)
    """The object store (synchronous; for seeding and inspecting state from tests)."""
    _router: Router = attrs.field(init=False, repr=False)
    _controllers: Controllers = attrs.field(init=False, repr=False)
    _state: _State = attrs.field(default=_State.UNOPENED, init=False, repr=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False, repr=False)
    _stack: contextlib.AsyncExitStack | None = attrs.field(default=None, init=False, repr=False)
    _bound_port: int | None = attrs.field(default=None, init=False, repr=False)
    _tls_material: TlsMaterial | None = attrs.field(default=None, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.bookmark_interval <= 0:
            raise ValueError("bookmark_interval must be > 0")
        if self.tls and not self.listen:
            raise ValueError("tls=True needs listen=True: the memory transport is plain HTTP")
        self.store = ObjectStorage(
            history_size=self.history_size, watch_buffer=self.watch_buffer, seed=self.seed, wall_clock=self.wall_clock
        )
        self._router = Router(
            self.store, self.faults, bookmark_interval=self.bookmark_interval, authorization=self.authorization,
            tokens=Authenticator(self.seed), sharding=self.feature_gates[SHARDED_LIST_AND_WATCH],
        )
        self._controllers = Controllers(self.store, kube_controller_manager=self.controllers)
        self._router.admission.client.transport = self.webhook_transport

    def _set_webhook_transport(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncBaseTransport | None:
        self._router.admission.client.transport = transport
        return transport

    # ----- lifecycle -----

    async def __aenter__(self) -> ApiServer:
        if self._state is not _State.UNOPENED:
            raise ApiServerError("an ApiServer can be started only once")
        self._state = _State.OPEN
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            await self._nursery.start(self._controllers.run)
            if self.listen:
                if self.tls:
                    self._tls_material = TlsMaterial.generate(sorted({self.host, "127.0.0.1", "localhost"}))
                listeners = await self._nursery.start(
                    functools.partial(trio.serve_tcp, self._serve_socket, self.port, host=self.host)
                )
                self._bound_port = int(listeners[0].socket.getsockname()[1])
                self._router.server_address = f"{self.host}:{self._bound_port}"
                logger.info("embedded API server listening on %s", self.url)
        except BaseException as exc:
            self._state = _State.CLOSED
            try:
                await stack.__aexit__(type(exc), exc, exc.__traceback__)
            except BaseExceptionGroup as group:
                if len(group.exceptions) == 1 and group.exceptions[0] is exc:
                    raise exc from None
                raise
            raise
        self._stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._stack is not None and self._nursery is not None
        self._nursery.cancel_scope.cancel(reason="embedded API server closing")
        try:
            return await self._stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                raise exc from None
            raise
        finally:
            self._state = _State.CLOSED
            self._nursery = None

    async def _serve_socket(self, stream: trio.SocketStream) -> None:
        serve = functools.partial(
            serve_http, max_header=API_SERVER_MAX_HEADER_BYTES, idle_timeout=self.idle_timeout,
            header_timeout=self.header_timeout, read_timeout=self.read_timeout,
        )
        if self._tls_material is None:
            await serve(stream, self._router.handle)
            return
        ssl_stream = trio.SSLStream(stream, self._tls_material.server_context, server_side=True)
        try:
            with trio.fail_after(30):
                await ssl_stream.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError) as exc:
            logger.debug("TLS handshake failed: %s", exc)
            await trio.aclose_forcefully(stream)
            return
        user = certificate_user(ssl_stream.getpeercert(), ssl_stream.getpeercert(binary_form=True))
        await serve(
            ssl_stream, functools.partial(self._router.handle, certificate=user),
            identity=user.username if user is not None else None,
        )

    # ----- access -----

    async def settle(self) -> None:
        """Return once the controllers (see the class docstring) have no work left: the
        garbage and the terminating namespaces' contents they can remove are gone. Objects
        that finalizers hold stay.

        Cancellation: nothing to undo; the controllers keep working.
        """
        self._require_open()
        await self._controllers.wait_idle()

    def snapshot(self) -> StorageSnapshot:
        """The server's state now, for a later :meth:`restore`: every object, the served types
        and the resourceVersion counter (as an etcd snapshot holds them). Not a checkpoint."""
        return self.store.snapshot()

    def restore(self, snapshot: StorageSnapshot) -> None:
        """Take the server back to ``snapshot``, as restoring etcd from a backup and restarting
        the API server on it does: objects as they were then (same uids; the ones created
        since are gone, the ones deleted since are back), and resourceVersions **going
        backwards** to the snapshot's, so the next writes reuse numbers clients saw before.
        Requests being answered are not carried out in the restored state (their writes are
        refused with ``503``). Every open watch is cut (clients see the connection reset) and
        the watch history is gone (a watch resumed from before the snapshot answers 410
        Expired; one from after it is accepted and silent, as on a real server, until newer
        changes come); reads at a resourceVersion newer than the restored one wait up to 3 s
        (trio time) for it, then answer 504 ``ResourceVersionTooLarge``.
        The controllers (garbage collector, namespace and CRD clean-up) start over on the
        restored objects. Informers notice that history went backwards and relist from
        scratch (see :mod:`engine.kube`'s watcher).

        It does not make the server unavailable: combine it with ``faults.fail(503, ...)`` for
        a restart with downtime. Synchronous and atomic: not a checkpoint, so no request sees
        a half-restored state. Raises ``ValueError`` for a snapshot another server took.
        """
        self.store.restore(snapshot)

    def _require_open(self) -> None:
        if self._state is not _State.OPEN:
            raise ApiServerError(f"the ApiServer is {self._state.value}: it must be running (inside `async with`)")

    @property
    def url(self) -> str:
        """The base URL: ``http(s)://host:port``, or a placeholder URL with ``listen=False``
        (its host is never resolved by :meth:`memory_transport`)."""
        if not self.listen:
            return MEMORY_URL
        self._require_open()
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self._bound_port}"

    @property
    def admin_token(self) -> str:
        """The bearer token of ``kubernetes-admin`` (``system:masters``), random per server:
        what :attr:`kubeconfig` carries over plain HTTP, for clients that read no kubeconfig
        (``httpx.AsyncClient(base_url=api.url, headers={"Authorization": f"Bearer
        {api.admin_token}"})``). Never logged, and not in the repr."""
        return self._router.tokens.admin_token

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig (as a dict in kubeconfig YAML structure) whose cluster, user and context
        are all named ``embedded``: in TLS mode it embeds the CA and the client certificate,
        over plain HTTP the admin bearer token (:attr:`admin_token`). Either is
        ``kubernetes-admin`` in ``system:masters``. With ``listen=False`` it names no
        credential (the memory transport needs none)."""
        cluster: dict[str, Any] = {"server": self.url}
        user: dict[str, Any] = {}
        if self._tls_material is not None:
            material = self._tls_material
            cluster["certificate-authority-data"] = base64.b64encode(material.ca_pem).decode()
            user["client-certificate-data"] = base64.b64encode(material.client_cert_pem).decode()
            user["client-key-data"] = base64.b64encode(material.client_key_pem).decode()
        elif self.listen:
            user["token"] = self.admin_token
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [{"name": "embedded", "cluster": cluster}],
            "users": [{"name": "embedded", "user": user}],
            "contexts": [{"name": "embedded", "context": {"cluster": "embedded", "user": "embedded", "namespace": "default"}}],
            "current-context": "embedded",
        }

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> None:
        """Write :attr:`kubeconfig` as YAML to ``path`` (mode 0600). Not a checkpoint."""
        data = yaml.safe_dump(self.kubeconfig, sort_keys=False)
        fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(data)

    @property
    def ca_pem(self) -> bytes | None:
        """The CA certificate in TLS mode, else ``None``."""
        return self._tls_material.ca_pem if self._tls_material else None

    @property
    def client_cert_pem(self) -> tuple[bytes, bytes] | None:
        """``(certificate, key)`` PEM of the client certificate in TLS mode, else ``None``."""
        material = self._tls_material
        return (material.client_cert_pem, material.client_key_pem) if material else None

    def issue_client_certificate(self, user: str, groups: Sequence[str] = ()) -> tuple[bytes, bytes]:
        """``(certificate, key)`` PEM of a new client certificate from the server's CA naming
        ``user`` (common name) in at most one of ``groups`` (organization); TLS mode only
        (raises :class:`ApiServerError` otherwise, ``ValueError`` for several groups)."""
        if self._tls_material is None:
            raise ApiServerError("client certificates need tls=True")
        return self._tls_material.issue_client(user, groups)

    def memory_transport(self) -> MemoryTransport:
        """An ``httpx.AsyncBaseTransport`` joined to this server by memory streams.

        Use it with ``httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url)``.
        Each connection is served by a task in the server's nursery, so the transport works
        only while the server runs; closing the server closes its connections (clients then see
        ``httpx.ReadError``). A request without credentials is the kubeconfig's user
        (``kubernetes-admin``): only code in this process can reach the transport. Tokens sent
        over it are checked as over a socket.
        """
        self._require_open()

        def connect(server_side: trio.abc.Stream) -> None:
            if self._nursery is None:
                raise ApiServerError("the server has stopped")
            try:
                self._nursery.start_soon(self._serve_memory, server_side)
            except RuntimeError as exc:
                raise ApiServerError("the server is stopping") from exc

        return MemoryTransport(connect)

    def direct_transport(self) -> DirectTransport:
        """An ``httpx.AsyncBaseTransport`` that hands requests to this server's handler with no
        HTTP encoding in between (see :class:`~engine.apiserver._memory.DirectTransport`): what
        the memory transport does, cheaper, for the simulator. Each request is answered by a
        task in the server's nursery; a request without credentials is the kubeconfig's user,
        as through :meth:`memory_transport`."""
        self._require_open()

        def spawn(serve: Callable[[], Any]) -> None:
            if self._nursery is None:
                raise ApiServerError("the server has stopped")
            try:
                self._nursery.start_soon(serve)
            except RuntimeError as exc:
                raise ApiServerError("the server is stopping") from exc

        return DirectTransport(
            functools.partial(self._router.handle, unauthenticated=ADMIN), spawn, identity="memory-transport"
        )

    async def _serve_memory(self, stream: trio.abc.Stream) -> None:
        await serve_http(
            stream, functools.partial(self._router.handle, unauthenticated=ADMIN), identity="memory-transport",
            max_header=API_SERVER_MAX_HEADER_BYTES,
        )

    def add_request_observer(self, observer: RequestObserver) -> None:
        """Call ``observer(served)`` synchronously for every answered resource request (a
        frozen record of method, path, verb, User-Agent, group, kind, namespace, name,
        subresource, status and body; discovery and ``/_faults`` are left out). The
        simulator's trace of API writes comes from here. An observer must not raise."""
        self._router.observers.append(observer)

    def add_watch_observer(self, observer: WatchObserver) -> None:
        """Call ``observer(info, type, obj)`` synchronously right before each object event is
        sent on a watch: the watch's request (its User-Agent, resource, group), ``ADDED``,
        ``MODIFIED`` or ``DELETED`` (as the watch's selectors see the change), and the object
        as stored. The simulator learns from it what each replica's caches were sent. An
        observer must not raise."""
        self._router.watch_observers.append(observer)

    # ----- for synchronous code -----

    @contextlib.contextmanager
    def run_in_thread(self, *, startup_timeout: float = 30.0) -> Iterator[ApiServer]:
        """Run the server in a new thread with its own ``trio.run``, for synchronous code.

        Yields the running server (``url``, ``kubeconfig`` and ``write_kubeconfig`` work; use
        ``POST /_faults`` rather than :attr:`faults` from the calling thread). Leaving the block
        stops the server and joins the thread. ``listen`` must be true.
        """
        if not self.listen:
            raise ApiServerError("run_in_thread needs listen=True: other threads reach the server by socket")
        ready = threading.Event()
        state: dict[str, Any] = {}

        async def main() -> None:
            async with self:
                state["token"] = trio.lowlevel.current_trio_token()
                state["stop"] = stop = trio.Event()
                ready.set()
                await stop.wait()

        def runner() -> None:
            try:
                trio.run(main)
            except BaseException as exc:  # reported to the calling thread
                state["error"] = exc
                ready.set()

        thread = threading.Thread(target=runner, name="engine.apiserver.ApiServer", daemon=True)
        thread.start()
        if not ready.wait(startup_timeout) or "error" in state:
            raise ApiServerError("the embedded API server did not start") from state.get("error")
        try:
            yield self
        finally:
            trio.from_thread.run_sync(state["stop"].set, trio_token=state["token"])
            thread.join(startup_timeout)
