from __future__ import annotations

import socket

import httpx
import pytest
import trio
import trio.testing

from engine import Controller, Manager, ObjectRef, Run, RunContext, RunObserver
from engine.observability import CheckFailed, Observability, parse_bind_address

from .._support import running
from ._support import get


async def noop(ctx: RunContext) -> None:
    pass


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("0", None),
        (":8080", ("127.0.0.1", 8080)),
        ("8080", ("127.0.0.1", 8080)),
        (":0", ("127.0.0.1", 0)),
        ("0.0.0.0:9090", ("0.0.0.0", 9090)),
        ("[::1]:8081", ("::1", 8081)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_parse_bind_address(address: str, expected: tuple[str, int] | None) -> None:
    assert parse_bind_address(address) == expected


@pytest.mark.parametrize("address", ["", "x", "::1:80", ":99999", "host:", "[]:80", "[::1]"])
def test_parse_bind_address_rejects(address: str) -> None:
    with pytest.raises(
        ValueError, match=rf"^bind address must be 'host:port', ':port' or '0' to disable, got {address!r}$".replace("[", r"\[")
    ):
        parse_bind_address(address)


class GatedSource:
    """A source whose start-up (its informer sync, say) waits until ``gate`` is set."""

    def __init__(self) -> None:
        self.entered = trio.Event()
        self.gate = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.entered.set()
        await self.gate.wait()
        task_status.started()
        await trio.sleep_forever()


async def test_readyz_flips_only_after_start_up_and_registered_checks_pass() -> None:
    manager = Manager(handle_signals=False)
    manager.add_controller(Controller("c", noop))
    source = GatedSource()
    manager.add_source(source)
    obs = Observability(manager, health_probe_bind_address=":0")
    synced = [False]
    obs.add_readiness_check("informers", lambda: synced[0])
    during_shutdown: list[httpx.Response] = []

    async def probe_while_stopping() -> None:
        during_shutdown.append(await get(obs.health_probe_address, "/readyz"))

    manager.add_shutdown_hook(probe_while_stopping)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await source.entered.wait()
            starting = await get(obs.health_probe_address, "/readyz")
            health = await get(obs.health_probe_address, "/healthz")
            source.gate.set()
            await manager.wait_started()
            waiting_for_informers = await get(obs.health_probe_address, "/readyz")
            single = await get(obs.health_probe_address, "/readyz/manager")
            synced[0] = True
            ready = await get(obs.health_probe_address, "/readyz")
            verbose = await get(obs.health_probe_address, "/readyz?verbose")
            manager.stop("test")
    assert (starting.status_code, starting.text) == (
        500,
        "[-]manager failed: controllers and sources not started yet\n"
        "[-]informers failed: check returned False\n"
        "readyz check failed\n",
    )
    assert (health.status_code, health.text) == (200, "ok")
    assert (waiting_for_informers.status_code, waiting_for_informers.text) == (
        500, "[+]manager ok\n[-]informers failed: check returned False\nreadyz check failed\n",
    )
    assert (single.status_code, single.text) == (200, "ok")
    assert (ready.status_code, ready.text) == (200, "ok")
    assert (verbose.status_code, verbose.text) == (200, "[+]manager ok\n[+]informers ok\nreadyz check passed\n")
    assert during_shutdown[0].status_code == 500
    assert "[-]manager failed: manager is stopping" in during_shutdown[0].text


class Exploding(RunObserver):
    def on_run_started(self, controller: Controller, run: Run) -> None:
        raise RuntimeError("observer bug")


async def test_healthz_reports_a_dead_worker() -> None:
    manager = Manager(handle_signals=False, grace_period=0)
    controller = manager.add_controller(Controller("c", noop, max_concurrent=2))
    obs = Observability(manager, health_probe_bind_address="127.0.0.1:0", metrics_bind_address=":0")
    manager.add_observer(Exploding())
    with trio.fail_after(10):
        async with running(manager):
            before = await get(obs.health_probe_address, "/healthz")
            controller.trigger(ObjectRef("K", "a"))
            await trio.testing.wait_all_tasks_blocked()
            assert not controller.healthy
            after = await get(obs.health_probe_address, "/healthz")
            single = await get(obs.health_probe_address, "/healthz/workers")
            excluded = await get(obs.health_probe_address, "/healthz?exclude=workers")
            metrics = await get(obs.metrics_address, "/metrics")
    assert (before.status_code, before.text) == (200, "ok")
    assert (after.status_code, after.text) == (
        500, "[-]workers failed: controller 'c': 1 worker(s) died on an engine error\nhealthz check failed\n",
    )
    assert single.status_code == 500
    assert (excluded.status_code, excluded.text) == (200, "ok")
    assert 'engine_worker_failures_total{controller="c"} 1.0' in metrics.text
    assert 'engine_workers_alive{controller="c"} 1.0' in metrics.text


async def test_checks_can_be_async_raise_or_time_out() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager, health_probe_bind_address=":0")
    obs.probes.check_timeout = 0.01

    async def leader_known() -> bool:
        await trio.sleep(0)
        return True

    def cache() -> None:
        raise CheckFailed("cache for Widget not synced")

    async def hangs() -> None:
        await trio.sleep_forever()

    obs.add_readiness_check("leader", leader_known)
    obs.add_readiness_check("cache", cache)
    obs.add_health_check("hangs", hangs)
    with pytest.raises(ValueError, match=r"^a readiness check named 'cache' is already registered$"):
        obs.add_readiness_check("cache", cache)
    with pytest.raises(ValueError, match=r"^a health check name must be non-empty and contain no '/', got 'a/b'$"):
        obs.add_health_check("a/b", cache)
    with trio.fail_after(10):
        async with running(manager):
            ready = await get(obs.health_probe_address, "/readyz")
            health = await get(obs.health_probe_address, "/healthz")
            missing = await get(obs.health_probe_address, "/readyz/nope")
    assert ready.text == "[+]manager ok\n[+]leader ok\n[-]cache failed: cache for Widget not synced\nreadyz check failed\n"
    assert health.text == "[+]workers ok\n[-]hangs failed: timed out\nhealthz check failed\n"
    assert (missing.status_code, missing.text) == (404, "no readyz check named 'nope'\n")


async def _raw(address: tuple[str, int] | None, data: bytes) -> bytes:
    assert address is not None
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(data)
        chunks = []
        while chunk := await stream.receive_some(65536):
            chunks.append(chunk)
    return b"".join(chunks)


async def test_http_server_details() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = Manager(handle_signals=False)
    obs = Observability(manager, metrics_bind_address=f":{port}", health_probe_bind_address=f"127.0.0.1:{port}")
    with trio.fail_after(10):
        async with running(manager):
            assert obs.metrics_address == obs.health_probe_address == ("127.0.0.1", port)
            base = f"http://127.0.0.1:{port}"
            async with httpx.AsyncClient() as client:
                responses = [await client.get(f"{base}{path}") for path in ("/metrics", "/healthz", "/readyz", "/nope")]
                posted = await client.post(f"{base}/metrics")
                head = await client.head(f"{base}/healthz")
            bad = await _raw(obs.metrics_address, b"NOT HTTP AT ALL\r\n\r\n")
            keepalive = await _raw(
                obs.metrics_address,
                b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            )
    assert [r.status_code for r in responses] == [200, 200, 200, 404]
    assert responses[1].headers["cache-control"] == "no-store"
    assert posted.status_code == 405
    assert (head.status_code, head.content, head.headers["content-length"]) == (200, b"", "2")
    assert bad.startswith(b"HTTP/1.1 400 ")
    assert keepalive.count(b"HTTP/1.1 200 OK") == 2


async def test_disabled_by_default() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager)
    async with running(manager):
        assert (obs.metrics_address, obs.health_probe_address, obs.live_address, obs.live_url) == (None,) * 4
    assert obs.registry.get_sample_value("engine_events_emitted_total") == 0


class FakeElector:
    def __init__(self) -> None:
        self.is_leader = False
        self.leading = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()

    async def wait_leading(self) -> None:
        await self.leading.wait()

    def on_lost(self, callback: object) -> None:
        pass

    async def release(self) -> None:
        self.is_leader = False

    def lead(self) -> None:
        self.is_leader = True
        self.leading.set()


async def test_a_standby_replica_is_ready_and_a_starting_leader_is_not() -> None:
    elector = FakeElector()
    manager = Manager(handle_signals=False, leader_election=elector)
    manager.add_controller(Controller("c", noop))
    gate_entered, gate = trio.Event(), trio.Event()

    async def caches_synced() -> None:
        gate_entered.set()
        await gate.wait()

    manager.add_start_gate(caches_synced)
    obs = Observability(manager, health_probe_bind_address=":0")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.run)
            await trio.testing.wait_all_tasks_blocked()
            standby = await get(obs.health_probe_address, "/readyz")
            elector.lead()
            await gate_entered.wait()
            starting = await get(obs.health_probe_address, "/readyz")
            gate.set()
            await manager.wait_started()
            leading = await get(obs.health_probe_address, "/readyz")
            manager.stop()
    assert (standby.status_code, standby.text) == (200, "ok")
    assert (starting.status_code, starting.text) == (
        500, "[-]manager failed: controllers and sources not started yet\nreadyz check failed\n",
    )
    assert (leading.status_code, leading.text) == (200, "ok")


async def test_a_port_in_use_fails_start_up_naming_the_endpoint() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        manager = Manager(handle_signals=False)
        Observability(manager, metrics_bind_address=":0", health_probe_bind_address=f":{port}")
        with pytest.RaisesGroup(pytest.RaisesExc(
            OSError, match=rf"^\[Errno 98\] cannot listen for the health probe server on 127\.0\.0\.1:{port}: "
                           r"Address already in use$",
        )):
            with trio.fail_after(10):
                await manager.run()
