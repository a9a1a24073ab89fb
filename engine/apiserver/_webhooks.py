"""Calls to admission and conversion webhooks, made as kube-apiserver's webhook client makes
them: a ``POST`` of a JSON review to the configured endpoint with ``?timeout=Ns`` appended,
cancelled after the configuration's ``timeoutSeconds``.

A ``clientConfig`` names its endpoint by ``url`` or by ``service`` (``https://NAME.NAMESPACE.svc:PORT/PATH``).
With a ``transport`` (an ``httpx.AsyncBaseTransport``) every call goes through it, addressed to
that URL, with no sockets and no certificate check. Without one, calls go over HTTPS and the
server's certificate is verified with the configuration's ``caBundle`` (the system roots when
it is empty). An embedded server has no cluster network, so a ``service`` reference is resolved
as kube-apiserver does with ``--enable-aggregator-routing``: through the stored ``Endpoints``
of that service (the first ready address, the port whose Service port matches), while the
certificate is checked against ``NAME.NAMESPACE.svc``; a missing Service or Endpoints, or none
ready, fails the call with the real resolver's message.

Failures are :class:`WebhookCallError` worded as the Go client words them (``Post "URL":
context deadline exceeded``, ``dial tcp HOST:PORT: connect: connection refused``); the
admission and conversion code turns them into the real server's answers.
"""

from __future__ import annotations

import base64
import json
import ssl
from typing import Any
from urllib.parse import urlsplit

import attrs
import httpx
import trio

from ._storage import ObjectStorage

__all__ = ["WebhookClient", "WebhookCallError", "endpoint_url"]

_ENDPOINTS = ("", "endpoints")
_SERVICES = ("", "services")
MAX_RESPONSE_BYTES = 3 * 1024 * 1024


class WebhookCallError(Exception):
    """A webhook could not be called, or did not answer a review (the message says why, as
    the real server's webhook client says it)."""


def endpoint_url(client_config: dict[str, Any]) -> str:
    """The URL a ``clientConfig`` names: its ``url``, or ``https://NAME.NAMESPACE.svc:PORT/PATH``."""
    url = client_config.get("url")
    if isinstance(url, str) and url:
        return url
    service = client_config.get("service") or {}
    path = str(service.get("path") or "")
    port = int(service.get("port") or 443)
    return f"https://{service.get('name')}.{service.get('namespace')}.svc:{port}{path}"


def _duration(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole}s" if whole == seconds else f"{seconds}s"


def _with_timeout(url: str, seconds: float) -> str:
    return f"{url}{'&' if '?' in url else '?'}timeout={_duration(seconds)}"


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if ca_bundle:
        try:
            pem = base64.b64decode(ca_bundle, validate=True).decode()
            context.load_verify_locations(cadata=pem)
        except (ValueError, ssl.SSLError) as exc:
            raise WebhookCallError(f"could not get REST client: unable to load root certificates: {exc}") from None
    return context


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes and contexts, and the members of exception groups among them."""
    out: list[BaseException] = []
    pending = [exc]
    while pending:
        current = pending.pop()
        if current in out:
            continue
        out.append(current)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
    return out


def _connect_error(exc: httpx.TransportError, host: str) -> str:
    """A transport failure in the words of Go's dialer, TLS stack and HTTP client (a
    connection closed before the answer is ``EOF``)."""
    causes = _causes(exc)
    for cause in causes:
        if isinstance(cause, ssl.SSLCertVerificationError):
            why = str(cause.verify_message or cause)
            if "mismatch" in why:
                return f"tls: failed to verify certificate: x509: certificate is not valid for {host.rsplit(':', 1)[0]}"
            if "expired" in why:
                return "tls: failed to verify certificate: x509: certificate has expired or is not yet valid"
            return "tls: failed to verify certificate: x509: certificate signed by unknown authority"
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return f"dial tcp {host}: connect: connection refused"
    if isinstance(exc, httpx.ConnectError):
        return f"dial tcp {host}: {exc or type(exc).__name__}"
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
        return "EOF"
    return str(exc) or type(exc).__name__


@attrs.define(eq=False)
class WebhookClient:
    """Posts reviews to webhooks for one server (``store`` resolves ``service`` references)."""

    store: ObjectStorage
    transport: httpx.AsyncBaseTransport | None = None

    async def post(self, client_config: dict[str, Any], timeout: float, review: dict[str, Any]) -> dict[str, Any]:
        """POST ``review`` and return the decoded JSON answer; raises :class:`WebhookCallError`.
        Gives up after ``timeout`` seconds of trio time; outer cancellation propagates."""
        url = _with_timeout(endpoint_url(client_config), timeout)
        body = json.dumps(review, separators=(",", ":")).encode()
        with trio.move_on_after(timeout) as scope:
            status, content = await self._send(client_config, url, body)
        if scope.cancelled_caught:
            raise WebhookCallError(f'failed to call webhook: Post "{url}": context deadline exceeded')
        return _decode(status, content)

    async def _send(self, client_config: dict[str, Any], url: str, body: bytes) -> tuple[int, bytes]:
        headers = {"content-type": "application/json", "accept": "application/json, */*"}
        if self.transport is not None:
            response = await self.transport.handle_async_request(httpx.Request("POST", url, content=body, headers=headers))
            try:
                content = await response.aread()
            finally:
                await response.aclose()
            return response.status_code, content[:MAX_RESPONSE_BYTES]
        target, extensions = url, {}
        parts = urlsplit(url)
        if not client_config.get("url"):
            target = self._resolve(client_config["service"], url)
            extensions["sni_hostname"] = parts.hostname or ""
            headers["host"] = parts.netloc
        host = urlsplit(target).netloc
        if urlsplit(target).port is None:
            host += ":443"
        try:
            context = _ssl_context(str(client_config.get("caBundle") or ""))
            async with httpx.AsyncClient(verify=context, timeout=None) as client:
                response = await client.post(target, content=body, headers=headers, extensions=extensions)
        except httpx.TransportError as exc:
            raise WebhookCallError(f'failed to call webhook: Post "{url}": {_connect_error(exc, host)}') from None
        return response.status_code, response.content[:MAX_RESPONSE_BYTES]

    def _resolve(self, service: dict[str, Any], url: str) -> str:
        """``https://IP:PORT/PATH?...`` of a ready endpoint of ``service``."""
        name, namespace = str(service.get("name") or ""), str(service.get("namespace") or "")
        port = int(service.get("port") or 443)

        def fail(message: str) -> WebhookCallError:
            return WebhookCallError(f'failed to call webhook: Post "{url}": {message}')

        svc = self.store.stored(_SERVICES, (namespace, name))
        if svc is None:
            raise fail(f'service "{name}" not found')
        ports = [p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("port") == port]
        if not ports:
            raise fail(f'no service port {port} found for service "{name}"')
        svc_port = ports[0]
        endpoints = self.store.stored(_ENDPOINTS, (namespace, name))
        if endpoints is None:
            raise fail(f'endpoints "{name}" not found')
        for subset in endpoints.get("subsets") or []:
            addresses = subset.get("addresses") or []
            for ep_port in subset.get("ports") or []:
                if ep_port.get("name", "") == svc_port.get("name", "") and addresses:
                    split = urlsplit(url)
                    query = f"?{split.query}" if split.query else ""
                    return f"https://{addresses[0]['ip']}:{ep_port['port']}{split.path}{query}"
        raise fail(f'no endpoints available for service "{name}"')


_GENERIC = {
    400: "the server rejected our request for an unknown reason",
    401: "the server has asked for the client to provide credentials",
    404: "the server could not find the requested resource",
    405: "the server does not allow this method on the requested resource",
    409: "the server reported a conflict",
    415: "the server responded with the status code 415 but did not return more information",
    422: "the server rejected our request due to an error in our request",
    429: "the server has received too many requests and has asked us to try again later",
    503: "the server is currently unable to handle the request",
    504: "the server was unable to return a response in the time allotted, but may still be processing the request",
}


def _generic_error(status: int, body: str) -> str:
    """The Go REST client's words for an HTTP error answer that is not a ``Status``
    (``NewGenericServerResponse``)."""
    if status == 403:
        return body or "forbidden"
    if status in _GENERIC:
        return _GENERIC[status]
    if status >= 500:
        return f"an error on the server ({json.dumps(body)}) has prevented the request from succeeding"
    return f"the server responded with the status code {status} but did not return more information"


def _decode(status: int, content: bytes) -> dict[str, Any]:
    """A webhook's HTTP answer as the Go REST client reads it."""
    text = content.decode("utf-8", "replace")
    if not 200 <= status <= 206:
        answer = None
        try:
            answer = json.loads(content)
        except ValueError:
            pass
        if isinstance(answer, dict) and answer.get("kind") == "Status" and answer.get("message"):
            raise WebhookCallError(f"failed to call webhook: {answer['message']}")
        raise WebhookCallError(f"failed to call webhook: {_generic_error(status, text.strip())}")
    try:
        answer = json.loads(content)
    except ValueError as exc:
        raise WebhookCallError(f"failed to call webhook: couldn't get version/kind; json parse error: {exc}") from None
    if not isinstance(answer, dict):
        raise WebhookCallError("failed to call webhook: couldn't get version/kind; json parse error: not a JSON object")
    return answer
