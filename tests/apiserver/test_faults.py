"""Fault injection, from Python and over the /_faults admin endpoint, scoped by resource and client."""

from __future__ import annotations

import json

import httpx
import pytest
import trio
import trio.testing

from engine.apiserver import ApiServer, Faults

from .conftest import CM, cm

LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


async def test_fail_n_requests_scoped_to_a_client(api: ApiServer, client: httpx.AsyncClient) -> None:
    api.faults.fail(500, count=2, client="victim")
    victim = {"user-agent": "victim/1.0"}
    assert (await client.get(CM, headers={"user-agent": "bystander/1.0"})).status_code == 200
    first = await client.get(CM, headers=victim)
    assert first.status_code == 500 and first.json()["reason"] == "InternalError"
    assert (await client.get(CM, headers=victim)).status_code == 500
    assert (await client.get(CM, headers=victim)).status_code == 200
    assert api.faults.active == []


async def test_throttle_with_retry_after_scoped_to_a_resource(api: ApiServer, client: httpx.AsyncClient) -> None:
    fault = api.faults.throttle(count=None, retry_after=2.5, resource="leases", group="coordination.k8s.io")
    assert (await client.get(CM)).status_code == 200
    r = await client.get(LEASES)
    assert r.status_code == 429 and r.headers["retry-after"] == "3"
    assert r.json()["reason"] == "TooManyRequests" and r.json()["details"]["retryAfterSeconds"] == 3
    assert (await client.get(LEASES)).status_code == 429
    assert fault.hits == 2
    api.faults.remove(fault)
    assert (await client.get(LEASES)).status_code == 200


async def test_fail_only_some_verbs(api: ApiServer, client: httpx.AsyncClient) -> None:
    api.faults.fail(503, count=None, verbs={"create"})
    assert (await client.get(CM)).status_code == 200
    assert (await client.post(CM, json=cm("x"))).json()["reason"] == "ServiceUnavailable"


async def test_latency_uses_trio_time(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        api.faults.add_latency(30, resource="configmaps")
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=60) as client:
            start = trio.current_time()
            await client.get(CM)
            assert trio.current_time() - start >= 30
            start = trio.current_time()
            await client.get("/api/v1/namespaces")
            assert trio.current_time() - start < 30


async def test_expire_next_watch(api: ApiServer, client: httpx.AsyncClient) -> None:
    api.faults.expire_next_watch(resource="configmaps", client="informer-a")
    headers = {"user-agent": "informer-a"}
    with trio.fail_after(5):
        async with client.stream("GET", CM, params={"watch": "1", "resourceVersion": "1"}, headers=headers) as r:
            events = [json.loads(line) async for line in r.aiter_lines() if line]
    assert len(events) == 1 and events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410
    async with client.stream("GET", CM, params={"watch": "1", "timeoutSeconds": "0.1"}, headers=headers) as r:
        assert [line async for line in r.aiter_lines() if line] == []


async def test_drop_watches_cleanly_and_abruptly(api: ApiServer, client: httpx.AsyncClient) -> None:
    with trio.fail_after(5):
        async with client.stream("GET", CM, params={"watch": "1"}, headers={"user-agent": "a"}) as r:
            while not api.store.subscriptions():
                await trio.sleep(0)
            assert api.faults.drop_watches(client="b") == 0
            assert api.faults.drop_watches(client="a") == 1
            assert [line async for line in r.aiter_lines() if line] == []
        async with client.stream("GET", CM, params={"watch": "1"}) as r:
            while not api.store.subscriptions():
                await trio.sleep(0)
            assert api.faults.drop_watches(abrupt=True) == 1
            with pytest.raises(httpx.RemoteProtocolError):
                async for _ in r.aiter_lines():
                    pass


async def test_delay_watch_makes_a_stale_cache(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=60) as client:
            api.faults.delay_watch(10, client="slow")
            seen: dict[str, list[float]] = {"slow": [], "fast": []}

            async def watch(agent: str, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                async with client.stream("GET", CM, params={"watch": "1", "resourceVersion": "1"}, headers={"user-agent": agent}) as r:
                    task_status.started()
                    async for line in r.aiter_lines():
                        if line:
                            seen[agent].append(trio.current_time())
                            return

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                await nursery.start(watch, "slow")
                await nursery.start(watch, "fast")
                await client.post(CM, json=cm("x"))
            assert seen["fast"][0] - start < 1
            assert seen["slow"][0] - start >= 10


async def test_withhold_progress_serves_reads_at_a_resource_version_as_a_watch_cache_etcd_tells_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As kube-apiserver 1.32 on etcd 3.4 answers: the cache of a type nothing wrote to since
    others were written stays behind the server's resourceVersion."""
    async with ApiServer(listen=False) as api:
        async with httpx.AsyncClient(transport=api.memory_transport(), base_url=api.url, timeout=60) as client:
            created = (await client.post(CM, json=cm("a"))).json()["metadata"]["resourceVersion"]
            fault = api.faults.withhold_progress(resource="configmaps")
            since = api.store.resource_version
            await client.post("/api/v1/namespaces", json={"metadata": {"name": "elsewhere"}})
            await client.post(LEASES, json={"metadata": {"name": "l"}, "spec": {}})
            now = api.store.resource_version
            assert now == since + 2 and int(created) == since

            start = trio.current_time()
            r = await client.get(CM, params={"resourceVersion": str(now), "resourceVersionMatch": "NotOlderThan", "limit": "1"})
            assert trio.current_time() - start == 3
            assert r.status_code == 504 and r.json() == {
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Timeout",
                "message": f"Timeout: Too large resource version: {now}, current: {since}", "code": 504,
                "details": {"causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                            "retryAfterSeconds": 1},
            }
            assert (await client.get(f"{CM}/a", params={"resourceVersion": str(now)})).status_code == 504
            quorum = await client.get(CM, params={"limit": "1"})
            assert quorum.status_code == 200 and quorum.json()["metadata"]["resourceVersion"] == str(now)
            assert (await client.get(CM, params={"resourceVersion": "0"})).status_code == 200
            assert (await client.get(CM, params={"resourceVersion": str(since)})).status_code == 200
            assert (await client.get(LEASES, params={"resourceVersion": str(now)})).status_code == 200
            assert fault.hits == 3

            start = trio.current_time()
            async with trio.open_nursery() as nursery:
                answers: list[httpx.Response] = []

                async def read() -> None:
                    answers.append(await client.get(CM, params={"resourceVersion": str(now + 1)}))

                nursery.start_soon(read)
                await trio.sleep(1)
                await client.post(CM, json=cm("b"))
            assert trio.current_time() - start == 1, "answered on the type's write, not after 3 s"
            assert answers[0].status_code == 200 and [i["metadata"]["name"] for i in answers[0].json()["items"]] == ["a", "b"]

            await client.post("/api/v1/namespaces", json={"metadata": {"name": "later"}})
            assert (await client.get(CM, params={"resourceVersion": str(now + 2)})).status_code == 504
            api.faults.remove(fault)
            assert (await client.get(CM, params={"resourceVersion": str(now + 2)})).status_code == 200


async def test_admin_endpoint(api: ApiServer, client: httpx.AsyncClient) -> None:
    r = await client.post("/_faults", json={"type": "fail", "status": 500, "count": 1, "resource": "configmaps"})
    assert r.status_code == 201
    ident = r.json()["id"]
    assert [f["id"] for f in (await client.get("/_faults")).json()["faults"]] == [ident]
    assert (await client.get(CM)).status_code == 500
    assert (await client.get(CM)).status_code == 200
    r = await client.post("/_faults", json={"type": "throttle", "count": None, "retryAfter": 1})
    assert (await client.get("/version")).status_code == 429
    assert (await client.delete(f"/_faults/{r.json()['id']}")).status_code == 200
    assert (await client.get("/version")).status_code == 200
    await client.post("/_faults", json={"type": "latency", "seconds": 0})
    assert (await client.delete("/_faults")).json() == {"faults": []}
    bad = await client.post("/_faults", json={"type": "explode"})
    assert bad.status_code == 400 and bad.json()["reason"] == "BadRequest"
    assert (await client.post("/_faults", json={"type": "drop_watches"})).json() == {"dropped": 0}
    r = await client.post("/_faults", json={"type": "withhold_progress", "resource": "configmaps"})
    assert r.status_code == 201 and r.json()["type"] == "withhold_progress"
    assert r.json()["resourceVersion"] == api.store.resource_version


def test_fault_arguments_are_checked() -> None:
    faults = Faults()
    with pytest.raises(ValueError, match=r"^status must be an HTTP error status \(400-599\)$"):
        faults.fail(200)
    with pytest.raises(ValueError, match=r"^count must be >= 1 or None$"):
        faults.fail(500, count=0)
    with pytest.raises(ValueError, match=r"^seconds must be finite and >= 0$"):
        faults.add_latency(-1)
