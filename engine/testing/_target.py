"""What a Kubernetes test runs against: the embedded API server, or a real one.

A :class:`KubeTarget` names one API server and a namespace of the test's own, and makes clients
for it. The embedded server (``ApiServer(listen=False)``) is reached through its in-memory
transport, so nothing opens a socket and the whole system runs under trio's ``MockClock``; a
real server (started by :class:`~engine.testing.EnvTest`, or an existing cluster) is reached
through its kubeconfig, in real time, without fault injection.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import attrs
import httpx
import trio

from engine.kube import AlreadyExistsError, Client, Config, NotFoundError

from ..apiserver import ApiServer, Faults
from ._errors import HarnessError

__all__ = ["KubeTarget", "TargetKind", "open_embedded_target", "open_namespace"]

TargetKind = Literal["embedded", "envtest", "cluster"]


@attrs.define(eq=False, kw_only=True)
class KubeTarget:
    """One API server and the namespace a test owns on it.

    Build it with :meth:`embedded` (around a running :class:`ApiServer`) or :meth:`real`
    (around a :class:`~engine.kube.Config`); the pytest fixture ``kube_target`` does it for
    you. ``kind`` is ``"embedded"``, ``"envtest"`` or ``"cluster"``.
    """

    kind: TargetKind
    config: Config
    """How clients reach the server (for the embedded server: its kubeconfig)."""
    namespace: str
    """The test's namespace: created for it, and on a shared cluster deleted after it."""
    api: ApiServer | None = None
    """The embedded server, or ``None`` against a real one."""
    direct: bool = False
    """Whether clients of the in-memory embedded server skip HTTP encoding (its
    ``direct_transport``, as the simulator's do) instead of speaking HTTP/1.1 over memory
    streams."""
    wrap_transport: Callable[[httpx.AsyncBaseTransport, str], httpx.AsyncBaseTransport] | None = None
    """How the clients of the in-memory embedded server wrap its transport, given it and their
    user agent (the simulator sees each replica's requests from its side so)."""
    _replicas: int = attrs.field(default=0, init=False, repr=False)

    @classmethod
    def embedded(cls, api: ApiServer, *, namespace: str = "default") -> KubeTarget:
        """A target on a running embedded server. With ``listen=False`` clients use its memory
        transport; otherwise they connect to its socket. Not a checkpoint."""
        return cls(kind="embedded", config=Config.from_dict(api.kubeconfig), namespace=namespace, api=api)

    @classmethod
    def real(cls, config: Config, *, namespace: str, kind: TargetKind = "cluster") -> KubeTarget:
        """A target on a real API server (``kind`` ``"envtest"`` or ``"cluster"``)."""
        if kind == "embedded":
            raise ValueError("KubeTarget.real needs kind 'envtest' or 'cluster'")
        return cls(kind=kind, config=config, namespace=namespace)

    @property
    def virtual_time(self) -> bool:
        """Whether everything can run under ``MockClock``: the embedded server without sockets."""
        return self.api is not None and not self.api.listen

    def describe(self) -> str:
        """``embedded (in memory)``, ``envtest at https://127.0.0.1:PORT``, ..."""
        if self.api is not None:
            return "embedded (in memory)" if not self.api.listen else f"embedded at {self.api.url}"
        return f"{self.kind} at {self.config.server}"

    def require_embedded(self, what: str) -> ApiServer:
        """The embedded server, or :class:`HarnessError` naming ``what`` needed it."""
        if self.api is None:
            raise HarnessError(
                f"{what} needs the embedded API server (engine.apiserver.ApiServer); "
                f"this test runs against {self.describe()}"
            )
        return self.api

    @property
    def faults(self) -> Faults:
        """The embedded server's fault injection (:class:`HarnessError` on a real server)."""
        return self.require_embedded("fault injection").faults

    def next_identity(self) -> str:
        """``replica-1``, ``replica-2``, ...: distinct, reproducible identities for replicas."""
        self._replicas += 1
        return f"replica-{self._replicas}"

    def client(self, *, user_agent: str = "engine-test", config: Config | None = None, **kwargs: Any) -> Client:
        """A new, unopened :class:`~engine.kube.Client` on this target (use ``async with``),
        with :attr:`config` or the given ``config`` (other credentials for the same server).

        On the in-memory embedded server it speaks HTTP over memory streams; ``kwargs`` go to
        :class:`~engine.kube.Client` (``retry``, ``timeout``, ``rng``, ...).
        """
        if self.api is not None and not self.api.listen:
            kwargs.setdefault("transport", self.api.direct_transport() if self.direct else self.api.memory_transport())
            if self.wrap_transport is not None:
                kwargs["transport"] = self.wrap_transport(kwargs["transport"], user_agent)
        return Client(config or self.config, user_agent=user_agent, **kwargs)


async def ensure_namespace(client: Client, name: str) -> None:
    """Create namespace ``name`` unless it exists. Cancellation: a checkpoint; the namespace
    may have been created."""
    namespaces = await client.resource("v1", "Namespace")
    try:
        await client.get(namespaces, name)
    except NotFoundError:
        with contextlib.suppress(AlreadyExistsError):
            await client.create(namespaces, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


@contextlib.asynccontextmanager
async def open_embedded_target(*, namespace: str = "test", **server_kwargs: Any) -> AsyncIterator[KubeTarget]:
    """Start an embedded server (``listen=False`` unless given), create ``namespace`` on it and
    yield a :class:`KubeTarget`; leaving stops the server.

    Cancellation: entering and leaving are checkpoints; leaving cancels every connection.
    """
    server_kwargs.setdefault("listen", False)
    async with ApiServer(**server_kwargs) as api:
        target = KubeTarget.embedded(api, namespace=namespace)
        async with target.client(user_agent="engine-test-setup") as client:
            await ensure_namespace(client, namespace)
        yield target


@contextlib.asynccontextmanager
async def open_namespace(
    config: Config, *, kind: TargetKind = "cluster", prefix: str = "engine-test-"
) -> AsyncIterator[KubeTarget]:
    """Create a namespace of its own (``prefix`` + random hex) on a real server, yield a
    :class:`KubeTarget` in it, and delete the namespace when leaving (without waiting for the
    server to finish removing its contents).

    Cancellation: entering is a checkpoint; the deletion when leaving is shielded.
    """
    name = f"{prefix}{secrets.token_hex(4)}"
    async with Client(config, user_agent="engine-test-setup") as client:
        await ensure_namespace(client, name)
        try:
            yield KubeTarget.real(config, namespace=name, kind=kind)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                namespaces = await client.resource("v1", "Namespace")
                with contextlib.suppress(NotFoundError):
                    await client.delete(namespaces, name, propagation_policy="Background")
