"""The ``engine`` pytest plugin (entry point ``pytest11``): Kubernetes fixtures under virtual time.

Fixtures (all function-scoped, for trio tests):

* ``kube_target``: a :class:`~engine.testing.KubeTarget` with a namespace of the test's own;
  by default the embedded API server without sockets (``seed=0``: reproducible uids and
  names), created for the test, with the namespace ``test``;
* ``kube_api``: that embedded :class:`~engine.apiserver.ApiServer` (``faults``, ``store``);
* ``kube_client``: an open :class:`~engine.kube.Client` on the target;
* ``kube_cluster``: a :class:`~engine.kube.Cluster` on ``kube_client`` with a fresh
  :class:`~engine.Manager` (``kube_cluster.manager``), to build a manager by hand and run it
  with :func:`~engine.testing.open_plugin_test`;
* ``kube_rbac``: whether the test's plugin should run as its own ServiceAccount under the
  Role ``manifests`` generates: true for ``@pytest.mark.kube_rbac`` tests, and for every test
  under ``--kube-rbac``; pass it on as ``open_plugin_test(..., rbac=kube_rbac)``.

A trio test that uses any of them on the embedded server runs under
``trio.testing.MockClock(autojump_threshold=0)`` (unless it asks for a clock fixture itself):
all waiting is virtual, a test that waits through hours of requeues takes milliseconds.

Real servers: ``@pytest.mark.kube_real`` tests run against a real API server, and
``--kube-target=real`` runs every test that uses the fixtures against one: envtest's binaries
when ``KUBEBUILDER_ASSETS`` is set (one control plane for the session), or the kubeconfig's
cluster when ``USE_EXISTING_CLUSTER=true``, each test in a namespace of its own. Without
either, such tests are skipped with the reason. Tests that need the embedded server
(``kube_api``, a clock fixture, ``@pytest.mark.kube_embedded(reason=...)``) are skipped under
``--kube-target=real``, with the reason (the marker's, when it gives one).

Against a real server a trio test runs in real time; when pytest-timeout bounds it (``timeout``),
it is failed by a trio deadline earlier (a quarter of the timeout, at most 40 s: room for the
namespace's shielded clean-up of up to 30 s and the test's set-up), so that
its fixtures are torn down (its namespace deleted) and the next test's ``trio.run`` starts
clean: pytest-timeout's own signal would interrupt trio's run loop and leave it behind, failing
every following test with "Attempted to call run() from inside a run()".
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import trio
import trio.testing

from engine import Manager
from engine.kube import Client, Cluster, Config

from ..apiserver import ApiServer
from ._envtest import ENV_ASSETS, ENV_USE_EXISTING_CLUSTER, EnvTest, RealServer, real_server_from_env
from ._target import KubeTarget, open_embedded_target, open_namespace

__all__ = ["pytest_addoption", "pytest_configure", "pytest_collection_modifyitems"]

KUBE_FIXTURES = frozenset({"kube_target", "kube_api", "kube_client", "kube_cluster"})
CLOCK_FIXTURES = frozenset({"autojump_clock", "mock_clock"})

NO_REAL_SERVER = (
    f"needs a real API server: set {ENV_ASSETS} to a folder holding the etcd and kube-apiserver binaries "
    f"(envtest), or {ENV_USE_EXISTING_CLUSTER}=true to use the kubeconfig's cluster"
)

_TARGET = pytest.StashKey[str]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("engine", "engine.testing Kubernetes fixtures")
    group.addoption(
        "--kube-target",
        choices=("embedded", "real"),
        default="embedded",
        help="what the kube_* fixtures run against: the embedded API server in memory under virtual time "
        f"(default), or a real one ({ENV_ASSETS} for envtest, {ENV_USE_EXISTING_CLUSTER}=true for the kubeconfig's)",
    )
    group.addoption(
        "--kube-rbac",
        action="store_true",
        help="the kube_rbac fixture is true for every test: plugins run as their ServiceAccount under their Role",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kube_rbac: the kube_rbac fixture is true: the plugin runs as its ServiceAccount under its Role"
    )
    config.addinivalue_line(
        "markers", f"kube_real: needs a real API server ({ENV_ASSETS} or {ENV_USE_EXISTING_CLUSTER}=true)"
    )
    config.addinivalue_line(
        "markers", "kube_embedded(reason): needs the embedded API server (virtual time, fault injection, the "
        "server's internals): skipped with the reason under --kube-target=real"
    )


def _embedded_needs(item: pytest.Item) -> list[str]:
    names = set(getattr(item, "fixturenames", ()))
    needs = []
    marker = item.get_closest_marker("kube_embedded")
    reason = (marker.kwargs.get("reason") or (marker.args[0] if marker.args else None)) if marker else None
    if reason:
        needs.append(str(reason))
    elif "kube_api" in names or marker is not None:
        needs.append("fault injection and the server's own state")
    if names & CLOCK_FIXTURES:
        needs.append("virtual time (MockClock)")
    return needs


def _test_function(item: pytest.Item) -> Callable[..., Any] | None:
    obj = getattr(item, "obj", None)
    inner = getattr(getattr(obj, "hypothesis", None), "inner_test", None)
    return inner if inner is not None else obj


def run_in_virtual_time(*args: Any, clock: trio.abc.Clock | None = None, **kwargs: Any) -> Any:
    """``trio.run`` with ``MockClock(autojump_threshold=0)`` unless a clock is given."""
    return trio.run(*args, clock=clock if clock is not None else trio.testing.MockClock(autojump_threshold=0), **kwargs)


def timeout_of(item: pytest.Item) -> float | None:
    """The seconds pytest-timeout gives ``item`` (its ``timeout`` marker, ``--timeout``,
    ``PYTEST_TIMEOUT`` or the ``timeout`` ini value), ``None`` when unbounded or without the plugin."""
    marker = item.get_closest_marker("timeout")
    value: Any = None
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if value is None:
        value = item.config.getoption("timeout", None)
    if value is None:
        value = os.environ.get("PYTEST_TIMEOUT")
    if value is None:
        try:
            value = item.config.getini("timeout") or None
        except ValueError:
            return None
    try:
        seconds = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return None
    return seconds if seconds > 0 else None


def real_time_deadline(timeout: float) -> float:
    """How long a real-server test may run when pytest-timeout allows ``timeout`` seconds."""
    return timeout - min(40.0, timeout / 4)


def run_with_deadline(fn: Callable[..., Any], *args: Any, deadline: float, **kwargs: Any) -> Any:
    """``trio.run(fn, *args, **kwargs)``, failing the test (``pytest.fail``) once ``deadline``
    seconds of the run's clock passed, after everything in it was cancelled and torn down."""

    async def bounded() -> Any:
        with trio.move_on_after(deadline) as scope:
            return await fn(*args)
        if scope.cancelled_caught:
            pytest.fail(f"did not finish within {deadline:g}s against a real API server (ended before "
                        "pytest-timeout interrupts trio)", pytrace=False)
        return None

    return trio.run(bounded, **kwargs)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    real_everywhere = config.getoption("kube_target") == "real"
    server = real_server_from_env()
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        uses_kube = bool(names & KUBE_FIXTURES)
        wants_real = item.get_closest_marker("kube_real") is not None or (real_everywhere and uses_kube)
        if wants_real:
            needs = _embedded_needs(item)
            if needs:
                item.add_marker(pytest.mark.skip(
                    reason=f"needs the embedded API server ({', '.join(needs)}), not available against a real "
                    "kube-apiserver"))
            else:
                if item.get_closest_marker("kube_real") is None:
                    item.add_marker(pytest.mark.kube_real)
                if server is None:
                    item.add_marker(pytest.mark.skip(reason=NO_REAL_SERVER))
            item.stash[_TARGET] = "real"
            fn = _test_function(item)
            timeout = timeout_of(item)
            if timeout is not None and fn is not None and inspect.iscoroutinefunction(fn):
                run = functools.partial(run_with_deadline, deadline=real_time_deadline(timeout))
                item.add_marker(pytest.mark.trio(run=run), append=False)
            continue
        item.stash[_TARGET] = "embedded"
        fn = _test_function(item)
        if uses_kube and fn is not None and inspect.iscoroutinefunction(fn):
            item.add_marker(pytest.mark.trio(run=run_in_virtual_time), append=False)


@pytest.fixture(scope="session")
def kube_real_server() -> Iterator[tuple[RealServer, Config]]:
    """The real API server of the session: an envtest control plane (started once) or the
    kubeconfig's cluster. Skips the test when the environment names neither."""
    server = real_server_from_env()
    if server is None:
        pytest.skip(NO_REAL_SERVER)
    if server.kind == "cluster":
        yield server, Config.from_kubeconfig()
        return
    with EnvTest() as env:
        yield server, env.config


@pytest.fixture
def _kube_real(request: pytest.FixtureRequest) -> tuple[RealServer, Config] | None:
    if request.node.stash.get(_TARGET, "embedded") != "real":
        return None
    value: tuple[RealServer, Config] = request.getfixturevalue("kube_real_server")
    return value


@pytest.fixture
async def kube_target(_kube_real: tuple[RealServer, Config] | None) -> AsyncIterator[KubeTarget]:
    """The target of this test, with its namespace (``test`` on the embedded server)."""
    if _kube_real is None:
        async with open_embedded_target(namespace="test", seed=0) as target:
            yield target
    else:
        server, config = _kube_real
        async with open_namespace(config, kind=server.kind) as target:
            yield target


@pytest.fixture
async def kube_api(kube_target: KubeTarget) -> ApiServer:
    """The embedded API server of ``kube_target``."""
    return kube_target.require_embedded("the kube_api fixture")


@pytest.fixture
async def kube_client(kube_target: KubeTarget) -> AsyncIterator[Client]:
    """An open client on ``kube_target`` (User-Agent ``engine-test/client``)."""
    async with kube_target.client(user_agent="engine-test/client") as client:
        yield client


@pytest.fixture
async def kube_cluster(kube_client: Client) -> Cluster:
    """A :class:`~engine.kube.Cluster` on ``kube_client`` with a fresh, unstarted manager."""
    return Cluster(kube_client, Manager(handle_signals=False, grace_period=5.0))


@pytest.fixture
def kube_rbac(request: pytest.FixtureRequest) -> bool:
    """Whether the test's plugin runs under RBAC: ``@pytest.mark.kube_rbac`` or ``--kube-rbac``."""
    return request.node.get_closest_marker("kube_rbac") is not None or bool(request.config.getoption("--kube-rbac"))
