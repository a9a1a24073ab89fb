"""Tests of engine.kube.Client: narrow unit tests on httpx.MockTransport, then wire tests on the
embedded ApiServer over real sockets."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import trio

from engine.kube import (
    AlreadyExistsError,
    ApiError,
    BadRequestError,
    Client,
    ClientStateError,
    Config,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    NotFoundError,
    PatchType,
    Resource,
    ResourceNotFoundError,
    RetryPolicy,
    ServerError,
    TooManyRequestsError,
    TransportError,
    UnauthorizedError,
    WatchEventType,
    WatchStalledError,
)

CONFIGMAPS = Resource(
    group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True
)


def kubeconfig(server: str = "http://k8s.test", user: dict[str, Any] | None = None) -> Config:
    return Config.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": user or {}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns1"}}],
            "current-context": "x",
        }
    )


def status(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
    if details:
        body["details"] = details
    return body


Handler = Callable[[httpx.Request], httpx.Response]


def mock_client(handler: Handler, **kwargs: Any) -> Client:
    kwargs.setdefault("retry", RetryPolicy(base_delay=0.01, max_delay=0.05))
    return Client(kubeconfig(), transport=httpx.MockTransport(handler), **kwargs)


class Recorder:
    def __init__(self, *responses: httpx.Response) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []
        self.times: list[float] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.times.append(trio.current_time())
        if len(self.responses) > 1:
            return self.responses.pop(0)
        return self.responses[0]


CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns1"}}


# --- typed errors ---


@pytest.mark.parametrize(
    ("code", "reason", "cls"),
    [
        (400, "BadRequest", BadRequestError),
        (401, "Unauthorized", UnauthorizedError),
        (403, "Forbidden", ForbiddenError),
        (404, "NotFound", NotFoundError),
        (409, "Conflict", ConflictError),
        (409, "AlreadyExists", AlreadyExistsError),
        (410, "Expired", GoneError),
        (422, "Invalid", InvalidError),
        (429, "TooManyRequests", TooManyRequestsError),
        (500, "InternalError", ServerError),
        (503, "ServiceUnavailable", ServerError),
        (418, "Teapot", ApiError),
    ],
)
async def test_status_bodies_become_typed_errors(
    code: int, reason: str, cls: type[ApiError]
) -> None:
    body = status(code, reason, f"it broke with {reason}")
    client = mock_client(
        Recorder(httpx.Response(code, json=body)), retry=RetryPolicy(max_attempts=1)
    )
    async with client:
        with pytest.raises(cls, match=rf"^{code} {reason}: it broke with {reason}$") as info:
            await client.create(CONFIGMAPS, CM)
    err = info.value
    assert type(err) is cls
    assert (err.code, err.reason, err.message, err.status) == (
        code,
        reason,
        f"it broke with {reason}",
        body,
    )


async def test_invalid_error_exposes_causes() -> None:
    causes = [{"reason": "FieldValueRequired", "message": "Required value", "field": "data.x"}]
    body = status(422, "Invalid", "ConfigMap \"a\" is invalid", causes=causes, name="a")
    async with mock_client(Recorder(httpx.Response(422, json=body))) as client:
        with pytest.raises(InvalidError) as info:
            await client.create(CONFIGMAPS, CM)
    assert info.value.causes == causes
    assert info.value.details["name"] == "a"


async def test_non_status_error_body_still_typed() -> None:
    async with mock_client(Recorder(httpx.Response(404, text="404 page not found"))) as client:
        with pytest.raises(
            NotFoundError, match=r"^404: the API server answered HTTP 404 without a Status message$"
        ) as info:
            await client.get(CONFIGMAPS, "a")
    assert info.value.status is None


async def test_retry_after_header_parsed() -> None:
    rec = Recorder(
        httpx.Response(429, json=status(429, "TooManyRequests", "slow down"), headers={"Retry-After": "7"})
    )
    async with mock_client(rec, retry=RetryPolicy(max_attempts=1)) as client:
        with pytest.raises(TooManyRequestsError) as info:
            await client.get(CONFIGMAPS, "a")
    assert info.value.retry_after == 7.0


# --- retry policy ---


async def test_get_retried_on_429_honouring_retry_after(autojump_clock: trio.testing.MockClock) -> None:
    rec = Recorder(
        httpx.Response(429, json=status(429, "TooManyRequests", "x"), headers={"Retry-After": "3"}),
        httpx.Response(200, json=CM),
    )
    async with mock_client(rec) as client:
        assert await client.get(CONFIGMAPS, "a") == CM
    assert len(rec.requests) == 2
    assert rec.times[1] - rec.times[0] == pytest.approx(3.0)


async def test_get_retried_on_5xx_and_connection_errors(autojump_clock: trio.testing.MockClock) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise httpx.ConnectError("refused", request=request)
        if calls == 2:
            return httpx.Response(503, json=status(503, "ServiceUnavailable", "x"))
        return httpx.Response(200, json=CM)

    async with mock_client(handler) as client:
        assert await client.get(CONFIGMAPS, "a") == CM
    assert calls == 3


async def test_get_gives_up_after_max_attempts(autojump_clock: trio.testing.MockClock) -> None:
    rec = Recorder(httpx.Response(500, json=status(500, "InternalError", "down")))
    async with mock_client(rec, retry=RetryPolicy(max_attempts=3, base_delay=0.01)) as client:
        with pytest.raises(ServerError, match=r"^500 InternalError: down$"):
            await client.get(CONFIGMAPS, "a")
    assert len(rec.requests) == 3


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(500, json=status(500, "InternalError", "x")),
        httpx.Response(503, json=status(503, "ServiceUnavailable", "x")),
    ],
)
async def test_mutation_not_retried_on_5xx(response: httpx.Response) -> None:
    rec = Recorder(response)
    async with mock_client(rec) as client:
        with pytest.raises(ServerError):
            await client.create(CONFIGMAPS, CM)
    assert len(rec.requests) == 1


async def test_mutation_not_retried_on_connection_error() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        raise httpx.ReadError("reset", request=request)

    async with mock_client(handler) as client:
        with pytest.raises(TransportError, match=r"^PUT /api/v1/namespaces/ns1/configmaps/a: the connection to the API server at http://k8s\.test failed: reset$"):
            await client.update(CONFIGMAPS, CM)
    assert calls == 1


async def test_mutation_retried_on_429(autojump_clock: trio.testing.MockClock) -> None:
    rec = Recorder(
        httpx.Response(429, json=status(429, "TooManyRequests", "x"), headers={"Retry-After": "2"}),
        httpx.Response(201, json=CM),
    )
    async with mock_client(rec) as client:
        await client.create(CONFIGMAPS, CM)
    assert [r.method for r in rec.requests] == ["POST", "POST"]
    assert rec.times[1] - rec.times[0] == pytest.approx(2.0)


async def test_retry_after_beyond_limit_is_not_waited_for() -> None:
    rec = Recorder(
        httpx.Response(429, json=status(429, "TooManyRequests", "x"), headers={"Retry-After": "600"})
    )
    async with mock_client(rec, retry=RetryPolicy(max_retry_after=60)) as client:
        with pytest.raises(TooManyRequestsError):
            await client.get(CONFIGMAPS, "a")
    assert len(rec.requests) == 1


def test_backoff_is_bounded_and_jittered() -> None:
    import random

    policy = RetryPolicy(base_delay=0.2, max_delay=10.0)
    rng = random.Random(1)
    delays = [policy.backoff(n, rng) for n in range(100)]
    assert all(0 < d <= 10.0 for d in delays)
    assert 0.1 <= delays[0] <= 0.2
    assert len(set(delays[10:])) > 1


# --- requests on the wire ---


async def test_request_shapes() -> None:
    rec = Recorder(httpx.Response(200, json=CM))
    async with mock_client(rec) as client:
        await client.get(CONFIGMAPS, "a")
        await client.get(CONFIGMAPS, "a", namespace="other")
        await client.update(CONFIGMAPS, {**CM, "metadata": {**CM["metadata"], "resourceVersion": "5"}})
        await client.patch(CONFIGMAPS, "a", {"data": {"x": "1"}})
        await client.patch(CONFIGMAPS, "a", [{"op": "add", "path": "/data", "value": {}}], patch_type=PatchType.JSON)
        await client.apply(CONFIGMAPS, CM, field_manager="me", force=True)
        await client.patch_status(CONFIGMAPS, "a", {"status": {}})
        await client.delete(
            CONFIGMAPS, "a", propagation_policy="Foreground", precondition_uid="u1",
            precondition_resource_version="5",
        )
        await client.list(CONFIGMAPS, label_selector={"app": "web", "tier": "db"}, field_selector="metadata.name=a", limit=2, continue_token="tok")
    r = rec.requests
    assert (r[0].method, r[0].url.path) == ("GET", "/api/v1/namespaces/ns1/configmaps/a")
    assert r[1].url.path == "/api/v1/namespaces/other/configmaps/a"
    assert r[2].method == "PUT" and json.loads(r[2].content)["metadata"]["resourceVersion"] == "5"
    assert r[3].headers["content-type"] == "application/merge-patch+json"
    assert r[4].headers["content-type"] == "application/json-patch+json"
    assert r[5].headers["content-type"] == "application/apply-patch+yaml"
    assert dict(r[5].url.params) == {"fieldManager": "me", "force": "true"}
    assert r[6].url.path == "/api/v1/namespaces/ns1/configmaps/a/status"
    assert json.loads(r[7].content) == {
        "kind": "DeleteOptions",
        "apiVersion": "v1",
        "propagationPolicy": "Foreground",
        "preconditions": {"uid": "u1", "resourceVersion": "5"},
    }
    assert r[8].url.path == "/api/v1/configmaps"
    assert dict(r[8].url.params) == {
        "labelSelector": "app=web,tier=db",
        "fieldSelector": "metadata.name=a",
        "limit": "2",
        "continue": "tok",
    }


async def test_list_all_follows_continue_tokens() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        token = request.url.params.get("continue")
        n = int(token or 0)
        meta: dict[str, Any] = {"resourceVersion": str(100 + n)}
        if n < 4:
            meta["continue"] = str(n + 2)
        items = [{"metadata": {"name": f"o{i}", "namespace": "d"}} for i in range(n, min(n + 2, 5))]
        return httpx.Response(200, json={"kind": "ConfigMapList", "metadata": meta, "items": items})

    async with mock_client(handler) as client:
        result = await client.list_all(CONFIGMAPS, page_size=2)
    assert [i["metadata"]["name"] for i in result.items] == ["o0", "o1", "o2", "o3", "o4"]
    assert result.resource_version == "100"
    assert all(i["kind"] == "ConfigMap" and i["apiVersion"] == "v1" for i in result.items)


async def test_token_never_logged(caplog: pytest.LogCaptureFixture, autojump_clock: trio.testing.MockClock) -> None:
    caplog.set_level(logging.DEBUG)
    token = "s3cr3t-t0ken-value"
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(500, json=status(500, "InternalError", "x"))

    client = Client(kubeconfig(user={"token": token}), transport=httpx.MockTransport(handler),
                    retry=RetryPolicy(max_attempts=2, base_delay=0.01))
    async with client:
        with pytest.raises(ServerError) as info:
            await client.get(CONFIGMAPS, "a")
    assert seen == [f"Bearer {token}"] * 2
    assert token not in caplog.text and token not in str(info.value)


async def test_client_lifecycle() -> None:
    client = mock_client(Recorder(httpx.Response(200, json=CM)))
    with pytest.raises(ClientStateError, match=r"^a Client must be used inside 'async with' \(it is unopened\)$"):
        await client.get(CONFIGMAPS, "a")
    async with client:
        pass
    with pytest.raises(ClientStateError, match=r"^a Client must be used inside 'async with' \(it is closed\)$"):
        await client.get(CONFIGMAPS, "a")
    with pytest.raises(ClientStateError, match=r"^a Client can be opened only once$"):
        async with client:
            pass


# --- discovery ---


async def test_discovery_is_cached_and_refreshed_on_miss() -> None:
    served: list[dict[str, Any]] = [
        {"name": "widgets", "namespaced": True, "kind": "Widget", "verbs": ["get"]},
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/apis/example.com/v1"
        return httpx.Response(200, json={"kind": "APIResourceList", "groupVersion": "example.com/v1", "resources": list(served)})

    calls: list[str] = []

    def counting(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        return handler(request)

    async with mock_client(counting) as client:
        widgets = await client.resource("example.com/v1", "Widget")
        assert widgets == Resource("example.com", "v1", "Widget", "widgets", True)
        assert await client.resource("example.com/v1", "widgets") is widgets
        assert len(calls) == 1
        with pytest.raises(
            ResourceNotFoundError,
            match=r"^API discovery must list kind 'Gadget' in 'example.com/v1', and it does not$",
        ):
            await client.resource("example.com/v1", "Gadget")
        served.append({"name": "gadgets", "namespaced": False, "kind": "Gadget"})
        served.append({"name": "gadgets/status", "namespaced": False, "kind": "Gadget"})
        gadgets = await client.resource("example.com/v1", "Gadget")
        assert (gadgets.plural, gadgets.namespaced, gadgets.subresources) == ("gadgets", False, {"status"})
        assert len(calls) == 3


# --- watch parsing ---


def watch_lines(*events: Any) -> bytes:
    out = []
    for e in events:
        out.append(e if isinstance(e, bytes) else json.dumps(e).encode())
    return b"\n".join(out) + b"\n"


def ev(type_: str, name: str, rv: str) -> dict[str, Any]:
    return {"type": type_, "object": {"metadata": {"name": name, "namespace": "d", "resourceVersion": rv}}}


async def test_watch_parses_events_and_skips_malformed_lines(caplog: pytest.LogCaptureFixture) -> None:
    body = watch_lines(
        ev("ADDED", "a", "1"),
        b"{not json",
        {"type": "ADDED", "object": {"metadata": {"resourceVersion": "2"}}},
        {"type": "WHATEVER", "object": {}},
        [1, 2],
        {"type": "MODIFIED", "object": "nope"},
        b"",
        ev("MODIFIED", "a", "3"),
        {"type": "BOOKMARK", "object": {"kind": "ConfigMap", "metadata": {"resourceVersion": "9"}}},
        ev("DELETED", "a", "10"),
    )
    chunks = [body[i : i + 7] for i in range(0, len(body), 7)]

    class Chunked(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for c in chunks:
                yield c

    seen_params: list[dict[str, str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen_params.append(dict(request.url.params))
        return httpx.Response(200, stream=Chunked())

    async with mock_client(handler) as client:
        async with client.watch(CONFIGMAPS, namespace="d", resource_version="0", timeout_seconds=30) as stream:
            events = [(e.type, e.resource_version) async for e in stream]
    assert events == [
        (WatchEventType.ADDED, "1"),
        (WatchEventType.MODIFIED, "3"),
        (WatchEventType.BOOKMARK, "9"),
        (WatchEventType.DELETED, "10"),
    ]
    assert stream.skipped == 5
    assert seen_params == [{"watch": "true", "resourceVersion": "0", "allowWatchBookmarks": "true", "timeoutSeconds": "30"}]
    assert "skipping a malformed watch line" in caplog.text


async def test_watch_error_event_raises_typed_error() -> None:
    body = watch_lines(ev("ADDED", "a", "1"), {"type": "ERROR", "object": status(410, "Expired", "too old resource version: 1 (5)")})
    async with mock_client(Recorder(httpx.Response(200, content=body))) as client:
        got = []
        with pytest.raises(GoneError, match=r"^410 Expired: too old resource version: 1 \(5\)$"):
            async with client.watch(CONFIGMAPS) as stream:
                async for e in stream:
                    got.append(e)
    assert len(got) == 1


async def test_watch_establish_410_raises_gone() -> None:
    rec = Recorder(httpx.Response(410, json=status(410, "Expired", "too old")))
    async with mock_client(rec) as client:
        with pytest.raises(GoneError):
            async with client.watch(CONFIGMAPS, resource_version="1"):
                pass
    assert len(rec.requests) == 1


async def test_watch_idle_timeout_raises_stalled(autojump_clock: trio.testing.MockClock) -> None:
    class Silent(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            yield watch_lines(ev("ADDED", "a", "1"))
            await trio.sleep_forever()
            yield b""

    async with mock_client(Recorder(httpx.Response(200, stream=Silent()))) as client:
        start = trio.current_time()
        with pytest.raises(
            WatchStalledError,
            match=r"^a watch on configmaps/v1 must deliver bytes within 5s \(idle_timeout\), and none arrived$",
        ):
            async with client.watch(CONFIGMAPS, idle_timeout=5) as stream:
                async for _ in stream:
                    pass
        assert trio.current_time() - start == pytest.approx(5.0)


async def test_watch_broken_stream_raises_transport_error() -> None:
    class Broken(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            yield watch_lines(ev("ADDED", "a", "1"))
            raise httpx.RemoteProtocolError("peer closed connection")

    async with mock_client(Recorder(httpx.Response(200, stream=Broken()))) as client:
        with pytest.raises(TransportError, match=r"^the watch stream of configmaps/v1 broke: peer closed connection$"):
            async with client.watch(CONFIGMAPS) as stream:
                async for _ in stream:
                    pass


# --- against the embedded API server, over real sockets ---

from engine.apiserver import ApiServer  # noqa: E402


def cm(name: str, namespace: str = "default", labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


async def test_crud_and_conflict_over_sockets() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        assert api.url.startswith("http://127.0.0.1:")
        res = await client.resource("v1", "ConfigMap")
        assert res == CONFIGMAPS
        created = await client.create(res, cm("a", x="1"))
        assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
        with pytest.raises(AlreadyExistsError) as exists:
            await client.create(res, cm("a"))
        assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
        got = await client.get(res, "a")
        assert got["data"] == {"x": "1"}
        got["data"]["x"] = "2"
        updated = await client.update(res, got)
        assert updated["data"] == {"x": "2"}
        assert updated["metadata"]["resourceVersion"] != got["metadata"]["resourceVersion"]
        got["data"]["x"] = "3"
        with pytest.raises(ConflictError) as conflict:
            await client.update(res, got)
        assert (conflict.value.code, conflict.value.reason) == (409, "Conflict")
        assert conflict.value.status is not None and conflict.value.status["kind"] == "Status"
        await client.delete(res, "a")
        with pytest.raises(NotFoundError) as missing:
            await client.get(res, "a")
        assert missing.value.reason == "NotFound"
        assert missing.value.details.get("name") == "a"


async def test_invalid_object_gives_causes() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        with pytest.raises(InvalidError) as info:
            await client.create(CONFIGMAPS, cm("Not_A_Valid_Name"))
        assert info.value.code == 422
        assert info.value.causes and all("field" in c for c in info.value.causes)


async def test_selectors_and_paging() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        ns = await client.resource("v1", "Namespace")
        await client.create(ns, {"metadata": {"name": "other"}})
        for i in range(7):
            await client.create(CONFIGMAPS, cm(f"c{i}", labels={"app": "web" if i % 2 else "db"}))
        await client.create(CONFIGMAPS, cm("elsewhere", "other", labels={"app": "web"}))
        web = await client.list(CONFIGMAPS, label_selector={"app": "web"})
        assert sorted(o["metadata"]["name"] for o in web.items) == ["c1", "c3", "c5", "elsewhere"]
        web_here = await client.list(CONFIGMAPS, namespace="default", label_selector="app=web")
        assert len(web_here.items) == 3
        not_web = await client.list(CONFIGMAPS, namespace="default", label_selector="app!=web")
        assert len(not_web.items) == 4
        one = await client.list(CONFIGMAPS, field_selector={"metadata.name": "c2"})
        assert [o["metadata"]["name"] for o in one.items] == ["c2"]
        page = await client.list(CONFIGMAPS, namespace="default", limit=3)
        assert len(page.items) == 3 and page.continue_token
        page2 = await client.list(CONFIGMAPS, namespace="default", limit=3, continue_token=page.continue_token)
        assert {o["metadata"]["name"] for o in page.items}.isdisjoint(o["metadata"]["name"] for o in page2.items)
        everything = await client.list_all(CONFIGMAPS, page_size=2)
        assert len(everything.items) == 8 and everything.resource_version


async def test_patches() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        await client.create(CONFIGMAPS, cm("p", x="1", y="2"))
        merged = await client.patch(CONFIGMAPS, "p", {"data": {"x": "10", "y": None}})
        assert merged["data"] == {"x": "10"}
        jsoned = await client.patch(
            CONFIGMAPS, "p", [{"op": "add", "path": "/data/z", "value": "3"}], patch_type=PatchType.JSON
        )
        assert jsoned["data"] == {"x": "10", "z": "3"}
        applied = await client.apply(CONFIGMAPS, cm("p", w="4"), field_manager="alice")
        assert applied["data"]["w"] == "4"
        with pytest.raises(ConflictError):
            await client.apply(CONFIGMAPS, cm("p", w="5"), field_manager="bob")
        forced = await client.apply(CONFIGMAPS, cm("p", w="5"), field_manager="bob", force=True)
        assert forced["data"]["w"] == "5"
        created = await client.apply(CONFIGMAPS, cm("fresh", k="v"), field_manager="alice")
        assert created["data"] == {"k": "v"}


async def test_delete_propagation_and_preconditions() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        owner = await client.create(CONFIGMAPS, cm("owner"))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}
        for name in ("dep1", "dep2"):
            body = cm(name)
            body["metadata"]["ownerReferences"] = [ref]
            await client.create(CONFIGMAPS, body)
        with pytest.raises(ConflictError, match=r"the UID in the precondition \(wrong\)"):
            await client.delete(CONFIGMAPS, "owner", precondition_uid="wrong")
        with pytest.raises(ConflictError, match=r"the ResourceVersion in the precondition"):
            await client.delete(CONFIGMAPS, "owner", precondition_resource_version="1")
        await client.delete(
            CONFIGMAPS,
            "owner",
            propagation_policy="Orphan",
            precondition_uid=owner["metadata"]["uid"],
            precondition_resource_version=owner["metadata"]["resourceVersion"],
        )
        await api.settle()
        dep1 = await client.get(CONFIGMAPS, "dep1")
        assert not dep1["metadata"].get("ownerReferences")
        owner2 = await client.create(CONFIGMAPS, cm("owner2"))
        body = cm("dep3")
        body["metadata"]["ownerReferences"] = [{**ref, "name": "owner2", "uid": owner2["metadata"]["uid"]}]
        await client.create(CONFIGMAPS, body)
        await client.delete(CONFIGMAPS, "owner2", propagation_policy="Background")
        await api.settle()
        with pytest.raises(NotFoundError):
            await client.get(CONFIGMAPS, "dep3")
        with pytest.raises(InvalidError):  # 422 NotSupported@propagationPolicy, as the real server
            await client.delete(CONFIGMAPS, "dep1", propagation_policy="Sideways")  # type: ignore[arg-type]


async def test_crd_discovered_at_runtime_and_status_subresource() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        with pytest.raises(ResourceNotFoundError):
            await client.resource("example.com/v1", "Widget")
        crds = await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        await client.create(crds, WIDGET_CRD)
        widgets = await client.resource("example.com/v1", "Widget")
        assert (widgets.plural, widgets.namespaced, "status" in widgets.subresources) == ("widgets", True, True)
        w = await client.create(widgets, {"metadata": {"name": "w"}, "spec": {"size": 1}, "status": {"ready": True}})
        assert "status" not in w or not w["status"]
        w["status"] = {"ready": False}
        after = await client.update_status(widgets, w)
        assert after["status"] == {"ready": False}
        after["spec"] = {"size": 99}
        after["status"] = {"ready": True}
        status_only = await client.update_status(widgets, after)
        assert status_only["spec"] == {"size": 1} and status_only["status"] == {"ready": True}
        patched = await client.patch_status(widgets, "w", {"status": {"phase": "Up"}})
        assert patched["status"] == {"ready": True, "phase": "Up"}
        assert (await client.get_status(widgets, "w"))["status"]["phase"] == "Up"
        stale = dict(w)
        with pytest.raises(ConflictError):
            await client.update_status(widgets, stale)
        all_types = await client.discover()
        assert widgets in all_types and CONFIGMAPS in all_types


async def test_tls_with_client_certificate() -> None:
    async with ApiServer(tls=True) as api:
        assert api.url.startswith("https://")
        async with Client(Config.from_dict(api.kubeconfig)) as client:
            created = await client.create(CONFIGMAPS, cm("secure"))
            assert created["metadata"]["name"] == "secure"
        anonymous = api.kubeconfig
        anonymous["users"][0]["user"] = {}
        async with Client(Config.from_dict(anonymous), retry=RetryPolicy(max_attempts=1)) as client:
            with pytest.raises(ForbiddenError, match='User "system:anonymous" cannot get resource "configmaps"'):
                await client.get(CONFIGMAPS, "secure")
        anonymous["users"][0]["user"] = {"token": "not-a-token-of-this-server"}
        async with Client(Config.from_dict(anonymous), retry=RetryPolicy(max_attempts=1)) as client:
            with pytest.raises(UnauthorizedError):
                await client.get(CONFIGMAPS, "secure")


async def test_429_retry_after_over_sockets() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        get_fault = api.faults.throttle(count=1, retry_after=1, verbs={"get"})
        create_fault = api.faults.throttle(count=1, retry_after=1, verbs={"create"})
        server_fault = api.faults.fail(500, count=1, verbs={"create"})
        start = trio.current_time()
        with pytest.raises(ServerError):
            await client.create(CONFIGMAPS, cm("t"))
        assert trio.current_time() - start >= 1.0
        assert (create_fault.hits, server_fault.hits) == (1, 1)
        with pytest.raises(NotFoundError):
            await client.get(CONFIGMAPS, "t")
        assert get_fault.hits == 1 and trio.current_time() - start >= 2.0


# --- against the embedded API server, through its memory transport under virtual time ---


def memory_client(api: ApiServer, **kwargs: Any) -> Client:
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport(), **kwargs)


async def test_429_retry_after_for_get_and_mutation(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api, memory_client(api) as client:
        api.faults.throttle(count=1, retry_after=4, verbs={"create"})
        api.faults.throttle(count=1, retry_after=4, verbs={"get"})
        start = trio.current_time()
        await client.create(CONFIGMAPS, cm("a"))
        assert trio.current_time() - start == pytest.approx(4.0, abs=0.01)
        start = trio.current_time()
        assert (await client.get(CONFIGMAPS, "a"))["metadata"]["name"] == "a"
        assert trio.current_time() - start == pytest.approx(4.0, abs=0.01)


async def test_5xx_retried_for_get_not_for_mutation(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api, memory_client(api) as client:
        await client.create(CONFIGMAPS, cm("a"))
        fault = api.faults.fail(500, count=2, verbs={"get"})
        assert (await client.get(CONFIGMAPS, "a"))["metadata"]["name"] == "a"
        assert fault.hits == 2
        fault = api.faults.fail(503, count=1, verbs={"update"})
        obj = await client.get(CONFIGMAPS, "a")
        with pytest.raises(ServerError):
            await client.update(CONFIGMAPS, obj)
        assert fault.hits == 1
        assert (await client.update(CONFIGMAPS, obj))["metadata"]["name"] == "a"


async def test_watch_with_bookmarks(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False, bookmark_interval=10) as api, memory_client(api) as client:
        listing = await client.list(CONFIGMAPS, namespace="default")
        got: list[tuple[WatchEventType, str | None]] = []
        with trio.fail_after(60):
            async with client.watch(
                CONFIGMAPS, namespace="default", resource_version=listing.resource_version
            ) as stream:
                await client.create(CONFIGMAPS, cm("w1"))
                async for event in stream:
                    got.append((event.type, event.object["metadata"].get("name")))
                    if event.type is WatchEventType.ADDED:
                        obj = dict(event.object)
                        await client.patch(CONFIGMAPS, "w1", {"data": {"k": "v"}})
                    elif event.type is WatchEventType.MODIFIED:
                        await client.delete(CONFIGMAPS, "w1")
                    elif event.type is WatchEventType.BOOKMARK:
                        assert event.resource_version
                        break
        assert [t for t, _ in got] == [
            WatchEventType.ADDED,
            WatchEventType.MODIFIED,
            WatchEventType.DELETED,
            WatchEventType.BOOKMARK,
        ]
        assert obj["kind"] == "ConfigMap"


async def test_watch_server_timeout_ends_iteration(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api, memory_client(api) as client:
        start = trio.current_time()
        async with client.watch(CONFIGMAPS, timeout_seconds=30, allow_bookmarks=False) as stream:
            assert [e async for e in stream] == []
        assert trio.current_time() - start == pytest.approx(30, abs=1)
