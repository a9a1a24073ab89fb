"""Tests of the lean wire: JSON through orjson (same values as the standard library), status
patches whose answer is not decoded, and watch lines split across chunks of the client's own
transport, malformed ones still logged and skipped."""

from __future__ import annotations

import json
import math
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from engine.apiserver import ApiServer
from engine.kube import Client, Config, NotFoundError, PatchType, RetryPolicy, WatchEventType
from engine.kube._client import _json
from engine.kube._client._request import RequestOptions
from engine.kube._client._sender import DirectSender
from engine.kube._client._transport import ResponseStream, Transport
from tests.kube.test_client import CONFIGMAPS, cm, kubeconfig, status


def test_orjson_is_the_backend() -> None:
    assert _json.BACKEND == "orjson"


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"b":[true,false,null],"c":{"d":"\\u00e9\\n","e":1.5e3,"f":-0.0}}',
        '{"n":NaN,"i":Infinity}',
        '"\\ud800"',
        "[]",
    ],
)
def test_loads_gives_what_the_standard_library_gives(text: str) -> None:
    ours, std = _json.loads(text.encode()), json.loads(text)
    assert repr(ours) == repr(std)


def test_integers_beyond_64_bits_decode_as_floats_as_the_api_server_does() -> None:
    assert _json.loads(b'{"i":9223372036854775807,"u":18446744073709551615,"big":123456789012345678901234567890}') == {
        "i": 2**63 - 1,
        "u": 2**64 - 1,
        "big": 1.2345678901234568e29,
    }


@pytest.mark.parametrize("text", [b"{not json", b"", b'{"a":1} x', b"\xff"])
def test_loads_raises_value_error_for_invalid_json(text: bytes) -> None:
    with pytest.raises(ValueError):
        _json.loads(text)


@pytest.mark.parametrize(
    "value",
    [
        {"status": {"observedN": 2}},
        {"metadata": {"name": "caf\u00e9", "labels": {"a": "b"}}, "data": {"k": "v\n\u2028"}},
        [{"op": "replace", "path": "/spec/n", "value": 3}],
        {"big": 2**70, "n": 1},
        {1: "int key"},
        {"f": 1.25, "t": (1, 2)},
    ],
)
def test_dumps_decodes_back_to_what_the_standard_library_encodes(value: Any) -> None:
    encoded = _json.dumps(value)
    assert isinstance(encoded, bytes)
    assert json.loads(encoded) == json.loads(json.dumps(value))


def test_dumps_refuses_what_the_standard_library_refuses() -> None:
    with pytest.raises(TypeError):
        _json.dumps({"a": object()})
    assert json.loads(_json.dumps({"x": math.inf})) in ({"x": None}, {"x": math.inf})


async def test_objects_through_the_client_equal_the_standard_librarys_decoding() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        created = await client.create(CONFIGMAPS, cm("a", x="caf\u00e9", y="1\n2"), namespace="default")
        got = await client.get(CONFIGMAPS, "a", namespace="default")
        response = await client._send("GET", CONFIGMAPS.path(namespace="default", name="a"), RequestOptions(safe=True))
        assert got == created == json.loads(response.content)
        page = await client.list(CONFIGMAPS, namespace="default")
        raw = json.loads((await client._send("GET", CONFIGMAPS.path(namespace="default"), RequestOptions(safe=True))).content)
        for item in raw["items"]:
            item.setdefault("kind", "ConfigMap")
            item.setdefault("apiVersion", "v1")
        assert page.items == raw["items"]


async def test_a_status_patch_without_decoding_returns_none_and_applies() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        await client.create(CONFIGMAPS, cm("a", x="1"), namespace="default")
        answer = await client.patch(CONFIGMAPS, "a", {"data": {"x": "2"}}, namespace="default", decode=False)
        assert answer is None
        assert (await client.get(CONFIGMAPS, "a", namespace="default"))["data"] == {"x": "2"}
        with pytest.raises(NotFoundError):
            await client.patch_status(CONFIGMAPS, "missing", {"status": {"a": 1}}, namespace="default", decode=False)


async def test_the_transport_hands_a_whole_answer_that_reads_to_its_body_loaded_or_not() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        await client.create(CONFIGMAPS, cm("a", x="1"), namespace="default")
        path = CONFIGMAPS.path(namespace="default", name="a").encode()
        host = httpx.URL(api.url).netloc
        async with Transport(api.url) as transport:
            timeouts = {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0}
            head = [(b"Host", host), (b"Authorization", f"Bearer {api.admin_token}".encode())]
            unloaded = await transport.request(b"GET", path, head, b"", timeouts, stream=False, load=False)
            assert json.loads(unloaded.read())["data"] == {"x": "1"}
            loaded = await transport.request(b"GET", path, head, b"", timeouts, stream=False)
            assert loaded.content == unloaded.content
            assert loaded.headers["content-type"] == unloaded.headers["content-type"] == "application/json"


async def test_a_write_without_decoding_over_the_own_transport_raises_the_servers_error() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        with pytest.raises(NotFoundError, match=r'configmaps "missing" not found'):
            await client.patch(CONFIGMAPS, "missing", {"data": {"x": "2"}}, namespace="default", decode=False)


async def test_a_patch_without_decoding_still_raises_on_errors_and_ignores_a_non_json_success() -> None:
    answers = [
        httpx.Response(200, content=b"not json at all"),
        httpx.Response(404, json=status(404, "NotFound", 'widgets "w" not found')),
        httpx.Response(500, content=b"<html>"),
    ]
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    async with Client(kubeconfig(), transport=httpx.MockTransport(handler), retry=RetryPolicy(max_attempts=1)) as client:
        assert await client.patch_status(CONFIGMAPS, "w", {"status": {"n": 1}}, decode=False) is None
        with pytest.raises(NotFoundError, match='widgets "w" not found'):
            await client.patch_status(CONFIGMAPS, "w", {"status": {"n": 1}}, decode=False)
        with pytest.raises(Exception) as failed:
            await client.patch_status(CONFIGMAPS, "w", {"status": {"n": 1}}, decode=False)
        assert getattr(failed.value, "code", None) == 500
    assert seen[0].headers["content-type"] == PatchType.MERGE.value
    assert seen[0].url.path == "/api/v1/namespaces/ns1/configmaps/w/status"
    assert json.loads(seen[0].content) == {"status": {"n": 1}}
    with pytest.raises(Exception, match="must be JSON"):
        async with Client(kubeconfig(), transport=httpx.MockTransport(lambda r: httpx.Response(200, content=b"x"))) as c:
            await c.patch_status(CONFIGMAPS, "w", {"status": {"n": 1}})


async def test_watch_over_the_own_transport_splits_lines_across_chunks_and_skips_malformed_ones(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lines = [
        json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "1"}}}).encode(),
        b"{not json",
        json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "a", "resourceVersion": "2"}, "x": "y" * 300}}).encode(),
        b"",
        json.dumps({"type": "WHATEVER", "object": {}}).encode(),
        json.dumps({"type": "DELETED", "object": {"metadata": {"name": "a", "resourceVersion": "3"}}}).encode(),
    ]
    body = b"\n".join(lines) + b"\n"

    async def serve(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        await stream.send_all(head)
        position = 0
        for size in [1, 7, 100, 3, 64, 1000, 5] * 10:
            part = body[position : position + size]
            if not part:
                break
            position += len(part)
            await stream.send_all(b"%x\r\n%s\r\n" % (len(part), part))
            await trio.sleep(0.001)
        await stream.send_all(b"0\r\n\r\n")
        await trio.sleep(0.05)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with Client(kubeconfig(f"http://127.0.0.1:{port}")) as client:
            async with client.watch(CONFIGMAPS, namespace="d") as stream:
                assert isinstance(stream._response.stream, ResponseStream) if stream._response else False
                events = [(e.type, e.resource_version) async for e in stream]
        nursery.cancel_scope.cancel()
    assert events == [(WatchEventType.ADDED, "1"), (WatchEventType.MODIFIED, "2"), (WatchEventType.DELETED, "3")]
    assert stream.skipped == 2
    assert "skipping a malformed watch line" in caplog.text


@pytest.mark.parametrize(
    ("user", "method", "path", "params", "body", "content_type"),
    [
        ({}, "GET", "/api/v1/namespaces/d/configmaps", {"labelSelector": "a=b,c in (d)", "limit": 5}, None, ""),
        ({"token": "s3cret"}, "PATCH", "/apis/x.io/v1/namespaces/d/ws/w/status", {"fieldManager": "me"}, {"status": {"n": 1}}, PatchType.MERGE.value),
        ({"token": "s3cret"}, "POST", "/api/v1/namespaces/d/configmaps", None, {"metadata": {"name": "a"}}, "application/json"),
        ({}, "DELETE", "/api/v1/namespaces/d/configmaps/a", None, {"kind": "DeleteOptions"}, "application/json"),
        ({}, "GET", "/api/v1/namespaces/d/configmaps/caf\u00e9", None, None, ""),
    ],
)
async def test_requests_sent_as_parts_are_the_bytes_httpx_requests_give(
    user: dict[str, Any], method: str, path: str, params: dict[str, Any] | None, body: Any, content_type: str
) -> None:
    heads: list[bytes] = []

    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
            head, _, data = data.partition(b"\r\n\r\n")
            heads.append(head)
            length = next((int(v) for k, _, v in (line.partition(b": ") for line in head.split(b"\r\n")) if k.lower() == b"content-length"), 0)
            while len(data) < length:
                data += await stream.receive_some(65536)
            heads[-1] += b"\r\n\r\n" + data[:length]
            data = data[length:]
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        config = Config.from_dict(
            {
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
        async with Client(config) as client:
            assert isinstance(client._sender, DirectSender)
            options = RequestOptions.of(params=params, body=body, content_type=content_type or "application/json", safe=True)
            await client._send(method, path, options)
            client._sender = client._sender.fallback
            await client._send(method, path, options)
        nursery.cancel_scope.cancel()
    assert len(heads) == 2
    assert heads[0] == heads[1]
    if user:
        assert b"Authorization: Bearer s3cret" in heads[0]


async def test_the_direct_sender_hands_only_what_is_not_plain_to_its_fallback() -> None:
    async def serve(stream: trio.SocketStream) -> None:
        data = b""
        while True:
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
            _, _, data = data.partition(b"\r\n\r\n")
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")

    sent_by_fallback: list[str] = []

    class Recording:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def send(self, method: str, path: str, options: RequestOptions) -> httpx.Response:
            sent_by_fallback.append(f"{path}?{options.query}")
            return await self.inner.send(method, path, options)

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        async with Client(kubeconfig(f"http://127.0.0.1:{port}")) as client:
            sender = client._sender
            assert isinstance(sender, DirectSender)
            sender.fallback = Recording(sender.fallback)  # type: ignore[assignment]
            await client.get(CONFIGMAPS, "a", namespace="d")
            await client.list(CONFIGMAPS, namespace="d", label_selector="app in (a,b)")
            await client.get(CONFIGMAPS, "caf\u00e9", namespace="d")
            await client.get(CONFIGMAPS, "..", namespace="d")
            assert client._sender is sender
        nursery.cancel_scope.cancel()
    assert sent_by_fallback == ["/api/v1/namespaces/d/configmaps/caf%C3%A9?", "/api/v1/namespaces/d/configmaps/..?"]
