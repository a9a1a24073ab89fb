"""Runs the script against a server and keeps each step's normalized answer.

The target is the embedded server (``ApiServer().run_in_thread()``, real HTTP on loopback), or
the cluster of the kubeconfig named by ``ENGINE_CONFORMANCE_KUBECONFIG`` (its current context;
client certificates, bearer tokens and CA data are understood). Every run uses a fresh run token
in its namespace, group and object names, so it can be repeated on the same cluster.

A run first reads the target's ``/version`` and expects the answers of the recording of that
``major.minor`` (``_script.RECORDINGS``). Like client-go, it repeats a request the server
answered 429 with a ``Retry-After`` (a real server's watch cache answers so while it initializes
the storage of a freshly established CRD), after the seconds it names, up to 10 times.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import ssl
import string
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import yaml

from ._normalize import Bindings, Unbound, comparable, project, project_watch
from ._script import ESTABLISHED, SERVED, TEARDOWN, Step, recording_version, steps

KUBECONFIG_ENV = "ENGINE_CONFORMANCE_KUBECONFIG"
RETRIES = 10
"""How often a request answered 429 with ``Retry-After`` is repeated (client-go's default)."""


@attrs.define
class Outcome:
    """What one step produced: the normalized projection of its answer, or why it has none."""

    actual: dict[str, Any] | None = None
    error: str | None = None


@attrs.define
class Transcript:
    """The outcomes of one run of the whole script against one target."""

    target: str
    real: bool
    version: str
    """The recording compared against (``"1.36"``): the ``major.minor`` of the target's ``/version``."""
    server_version: str
    """The target's ``gitVersion`` (``"v1.36.2"``)."""
    outcomes: dict[str, Outcome] = attrs.field(factory=dict)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The script with this run's expectations (those of :attr:`version`)."""
        return steps(self.version)

    def step(self, name: str) -> Step:
        return next(s for s in self.steps if s.name == name)

    def expected(self, name: str) -> dict[str, Any]:
        step = self.step(name)
        if step.authored:
            return {"status": step.response["status"]}
        return comparable(dict(step.response))

    def actual(self, name: str) -> dict[str, Any]:
        outcome = self.outcomes[name]
        if outcome.actual is None:
            return {"error": outcome.error}
        if self.step(name).authored:
            return {"status": outcome.actual.get("status")}
        return comparable(dict(outcome.actual))


def _ssl_context(cluster: dict[str, Any]) -> ssl.SSLContext | bool:
    if cluster.get("insecure-skip-tls-verify"):
        return False
    context = ssl.create_default_context()
    if "certificate-authority-data" in cluster:
        context.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif "certificate-authority" in cluster:
        context.load_verify_locations(cafile=cluster["certificate-authority"])
    return context


@contextlib.contextmanager
def _kubeconfig_client(path: str) -> Iterator[httpx.Client]:
    config = yaml.safe_load(Path(path).read_text())
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next((u["user"] for u in config.get("users") or [] if u["name"] == context.get("user")), {})
    headers = {}
    if "token" in user:
        headers["Authorization"] = f"Bearer {user['token']}"
    with tempfile.TemporaryDirectory() as tmp:
        verify = _ssl_context(cluster)
        if isinstance(verify, ssl.SSLContext):
            cert = user.get("client-certificate"), user.get("client-key")
            if "client-certificate-data" in user:
                cert = (str(Path(tmp) / "client.crt"), str(Path(tmp) / "client.key"))
                Path(cert[0]).write_bytes(base64.b64decode(user["client-certificate-data"]))
                Path(cert[1]).write_bytes(base64.b64decode(user["client-key-data"]))
            if cert[0] and cert[1]:
                verify.load_cert_chain(cert[0], cert[1])
        with httpx.Client(base_url=cluster["server"], verify=verify, headers=headers, timeout=30) as client:
            yield client


@contextlib.contextmanager
def target_client() -> Iterator[tuple[str, bool, httpx.Client]]:
    """``(description, is_real, client)`` for the configured target."""
    path = os.environ.get(KUBECONFIG_ENV)
    if path:
        with _kubeconfig_client(path) as client:
            yield f"kubeconfig {path}", True, client
        return
    from engine.apiserver import ApiServer

    with ApiServer(seed=1, controllers=False).run_in_thread() as api, httpx.Client(
        base_url=api.url, timeout=30, headers={"Authorization": f"Bearer {api.admin_token}"}
    ) as client:
        yield "embedded ApiServer", False, client


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds to wait before repeating a request answered 429 with ``Retry-After``
    (client-go's rule), or ``None`` when the answer is not to be repeated."""
    if response.status_code != 429:
        return None
    try:
        return max(0.0, float(response.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def _established(body: Any) -> bool:
    conditions = (body.get("status") or {}).get("conditions") or [] if isinstance(body, dict) else []
    return any(c.get("type") == ESTABLISHED and c.get("status") == "True" for c in conditions)


class Runner:
    def __init__(self, client: httpx.Client, *, real: bool) -> None:
        self.client = client
        self.real = real
        alphabet = string.ascii_lowercase + string.digits
        self.run = "r" + "".join(secrets.choice(alphabet) for _ in range(7))
        self.bindings = Bindings(self.run)

    def send(self, request: dict[str, Any]) -> tuple[httpx.Response, float]:
        bindings = self.bindings
        headers = dict(bindings.denormalize(request.get("headers") or {}))
        if request.get("content_type"):
            headers["Content-Type"] = request["content_type"]
        content: bytes | None = None
        if "raw" in request:
            content = bindings.denormalize(request["raw"]).encode()
        elif request.get("body") is not None:
            content = json.dumps(bindings.denormalize(request["body"])).encode()
        params = {k: bindings.denormalize(v) for k, v in (request.get("query") or {}).items()}
        for attempt in range(RETRIES + 1):
            start = time.monotonic()
            response = self.client.request(
                request["method"], bindings.denormalize(request["path"]), params=params, content=content, headers=headers
            )
            elapsed = time.monotonic() - start
            wait = _retry_after(response)
            if wait is None or attempt == RETRIES:
                break
            time.sleep(wait)
        return response, elapsed

    def watch(self, step: Step) -> dict[str, Any]:
        request = step.request
        params = {k: self.bindings.denormalize(v) for k, v in (request.get("query") or {}).items()}
        expected = len(step.response.get("watch", {}).get("events") or [])
        bookmark = bool(step.response.get("watch", {}).get("bookmark_seen"))
        # A watch ends at timeoutSeconds; on the embedded server the suite instead reads until
        # the recorded number of events (and the recorded BOOKMARK) arrived, then for a short
        # quiet period to catch extras.
        full = self.real or bookmark
        read_timeout = float(params.get("timeoutSeconds", "2")) + 1 if full else 0.3
        events: list[dict[str, Any]] = []
        error: str | None = None
        timeout = httpx.Timeout(30, read=read_timeout)
        path = self.bindings.denormalize(request["path"])
        for attempt in range(RETRIES + 1):
            with self.client.stream("GET", path, params=params, timeout=timeout) as response:
                status = response.status_code
                if status != 200:
                    response.read()
                    wait = _retry_after(response)
                    if wait is not None and attempt < RETRIES:
                        time.sleep(wait)
                        continue
                    return {
                        "watch": {
                            "http_status": status,
                            "types": [],
                            "events": [],
                            "bookmark_seen": False,
                            "error": response.text,
                        }
                    }
                try:
                    for line in response.iter_lines():
                        if line.strip():
                            events.append(json.loads(line))
                        if self.real:
                            continue
                        seen = len([e for e in events if e.get("type") != "BOOKMARK"])
                        if seen > expected or (
                            bookmark and seen == expected and events and events[-1].get("type") == "BOOKMARK"
                        ):
                            break
                except httpx.ReadTimeout:
                    pass
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                break
        return project_watch(status, events, error)

    def run_step(self, step: Step) -> Outcome:
        try:
            if step.request.get("watch"):
                actual = self.watch(step)
            else:
                response, elapsed = self._send_waiting(step)
                try:
                    body = response.json()
                except ValueError:
                    body = response.text
                actual = project(step.response, response.status_code, response.headers, body, elapsed)
                for token, path in step.bind.items():
                    value = _dig(body, path)
                    if token.startswith("$"):
                        self.bindings.vars[token[1:]] = value
                    elif token.startswith("uid-"):
                        self.bindings.bind_uid(token, value)
                    else:
                        self.bindings.bind_rv(token, value)
        except (Unbound, httpx.HTTPError, KeyError) as exc:
            return Outcome(error=f"{type(exc).__name__}: {exc}")
        if step.authored:
            return Outcome(actual=actual)
        return Outcome(actual=self.bindings.normalize(step.response, actual))

    def _send_waiting(self, step: Step) -> tuple[httpx.Response, float]:
        deadline = time.monotonic() + 30
        while True:
            response, elapsed = self.send(step.request)
            if step.wait_for == ESTABLISHED:
                ready = _established(response.json())
            else:
                ready = step.wait_for != SERVED or response.status_code != 404
            if ready or time.monotonic() > deadline:
                return response, elapsed
            time.sleep(0.2)

    def teardown(self) -> None:
        for request in TEARDOWN:
            with contextlib.suppress(httpx.HTTPError, Unbound):
                self.send(request)


def target_version(client: httpx.Client) -> tuple[str, str]:
    """``(recording version, gitVersion)`` of the target, from its ``/version``: ``("1.36", "v1.36.2")``."""
    response = client.get("/version")
    response.raise_for_status()
    info = response.json()
    return recording_version(str(info["major"]), str(info["minor"])), str(info["gitVersion"])


def run_script() -> Transcript:
    """Run every step against the configured target, expecting the answers of the recording
    of its version, and return the transcript."""
    with target_client() as (description, real, client):
        version, server_version = target_version(client)
        runner = Runner(client, real=real)
        transcript = Transcript(target=description, real=real, version=version, server_version=server_version)
        try:
            for step in transcript.steps:
                transcript.outcomes[step.name] = runner.run_step(step)
        finally:
            runner.teardown()
        return transcript
