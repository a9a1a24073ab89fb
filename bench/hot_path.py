"""Benchmark: per-object steps of a controller's hot path, this tree against another, interleaved.

Run by hand (not a test)::

    git archive COMMIT engine | tar -x -C /tmp/before
    python bench/hot_path.py --before-root /tmp/before [--repeat 5] [--remembered 5000]

Each measurement runs in a child process of its own (one tree imported per process), the two
trees alternating, ``--repeat`` times; the table gives the medians and their ratio. CPU time
(``time.process_time``), so that other processes on a shared machine slow each figure less.

* ``own write ended``: ``OwnWrites.ended`` for one status write while ``--remembered``
  revisions of other keys are remembered (the writes of the last minute whose echoes no
  predicate passed on, as in the benchmark operator: a key runs once per change, and the
  echo of its status write is dropped by ``generation_changed`` before it reaches the
  controller), with ``started`` and ``began`` around it as a run does.
* ``request head``: ``DirectSender.send`` of a status merge patch through the engine's
  transport up to the request head (the transport's ``request`` stops there), with a client's
  usual headers.
* ``watch events``: one change of the benchmark operator (``operators/engine_op.py``) on the
  watch path, per object: its two ``MODIFIED`` events (the spec change, then the echo of the
  status write), decoded from one watch body already received, through the watcher, an
  informer that strips ``managedFields`` (its cache, compact copies and owner index) and
  ``Cluster.watches`` with ``generation_changed`` to ``Controller.trigger`` (the first queues the
  key, the echo is dropped by the predicate).
* ``status patch``: the same operator's write, per object: ``ctx.shield(10)`` around
  ``Client.patch_status(..., decode=False)`` in a run (its own-write note included), through the
  client, ``DirectSender`` and the transport, the answer's head parsed and its body decoded;
  the network left out (a connection whose answer is already in its buffer).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure_own_writes(remembered: int, writes: int) -> float:
    import trio
    import trio.testing

    from engine._refs import ObjectRef
    from engine._writes import OwnWrites

    keys = [ObjectRef("Widget", f"w-{i:06d}", "bench", "bench.example.com") for i in range(remembered + writes)]
    revisions = [str(100000 + i) for i in range(len(keys))]
    rate = remembered / 60.0
    spent = 0.0

    async def main(clock: trio.testing.MockClock) -> None:
        nonlocal spent
        record = OwnWrites(lambda trigger: None)
        for i, key in enumerate(keys):
            record.started(key)
            record.began(key)
            if i < remembered:
                record.ended(key, revisions[i])
            else:
                started = time.process_time()
                record.ended(key, revisions[i])
                spent += time.process_time() - started
            clock.jump(1 / rate)

    clock = trio.testing.MockClock()
    trio.run(main, clock, clock=clock)
    return spent / writes * 1e6


def measure_request_head(requests: int) -> float:
    import httpx

    from engine.kube._client import _http1, _transport
    from engine.kube._client._http1 import request_head
    from engine.kube._client._request import RequestOptions
    from engine.kube._client._sender import open_sender

    async def head_only(self: Any, method: bytes, target: bytes, headers: Any, body: bytes, timeouts: Any, **kw: Any) -> bytes:
        fixed = kw.get("fixed_headers")
        if fixed is None:
            return request_head(method, target, headers)
        if fixed is not self._fixed:
            self._fixed, self._fixed_lines = fixed, _http1.header_lines(fixed)
        return request_head(method, target, headers, self._fixed_lines)

    _transport.Transport.request = head_only  # type: ignore[method-assign]
    headers = httpx.Headers({"User-Agent": "bench-engine-operator", "Accept": "application/json, */*"})
    sender = open_sender({"base_url": "https://127.0.0.1:6443"}, headers, 30.0)
    options = RequestOptions.of(
        safe=False, body={"status": {"observedN": 1}}, content_type="application/merge-patch+json", load=False
    )
    path = "/apis/bench.example.com/v1/namespaces/bench/widgets/w-000001/status"
    started = time.process_time()
    for _ in range(requests):
        coroutine = sender.send("PATCH", path, options)
        try:
            coroutine.send(None)
        except StopIteration:
            pass
    return (time.process_time() - started) / requests * 1e6


def _widget(i: int, rv: int, generation: int, n: int, observed: int) -> dict[str, Any]:
    """A Widget as the API server sends it, its ``managedFields`` included."""
    return {
        "apiVersion": "bench.example.com/v1",
        "kind": "Widget",
        "metadata": {
            "name": f"w-{i:06d}",
            "namespace": "bench",
            "uid": f"0f8d3c52-{i:04x}-4d2e-9a57-5b1e7c2d{i:04x}",
            "resourceVersion": str(rv),
            "generation": generation,
            "creationTimestamp": "2026-12-07T20:00:00Z",
            "managedFields": [
                {
                    "manager": "vs-kopf-driver", "operation": "Update", "apiVersion": "bench.example.com/v1",
                    "time": "2026-12-07T20:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {".": {}, "f:n": {}}},
                },
                {
                    "manager": "bench-engine-operator", "operation": "Update", "apiVersion": "bench.example.com/v1",
                    "time": "2026-12-07T20:00:01Z", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {".": {}, "f:observedN": {}}}, "subresource": "status",
                },
            ],
        },
        "spec": {"n": n},
        "status": {"observedN": observed},
    }


def measure_watch_events(objects: int) -> float:
    import httpx
    import trio

    from engine import Controller
    from engine.kube import Resource, generation_changed
    from engine.kube._client._client import Client
    from engine.kube._client._config import Config
    from engine.kube._client._json import dumps
    from engine.kube._client._watch import WatchStream
    from engine.kube._runtime._cluster import Cluster
    from engine.kube._runtime._informer import Informer, strip_managed_fields
    from engine.kube._runtime._watcher import Added

    resource = Resource("bench.example.com", "v1", "Widget", "widgets", True, {"status"})
    lines = []
    for i in range(objects):
        rv = 1000 + 2 * i
        lines.append(dumps({"type": "MODIFIED", "object": _widget(i, rv, 2, 2, 1)}))
        lines.append(dumps({"type": "MODIFIED", "object": _widget(i, rv + 1, 2, 2, 2)}))
    body = b"\n".join(lines) + b"\n"
    spent = 0.0

    async def main() -> None:
        nonlocal spent
        client = Client(Config(server="https://127.0.0.1:6443"))
        informer = Informer(client, resource, namespace="bench", transform=strip_managed_fields)
        for i in range(objects):
            informer._on_event(Added(_widget(i, 500 + i, 1, 1, 1)))
        controller = Controller("widgets", _noop, max_concurrent=16)
        # Cluster.watches adds the handler; it reads nothing of the cluster itself.
        Cluster.watches(None, controller, informer, predicates=[generation_changed])  # type: ignore[arg-type]

        async def answer() -> httpx.Response:
            return httpx.Response(200, stream=httpx.ByteStream(body))

        async with WatchStream(answer, resource, 120.0) as stream:
            started = time.process_time()
            await informer.watcher._consume(stream, informer._on_event)
            spent = time.process_time() - started
        assert len(controller.queue) == objects, len(controller.queue)

    trio.run(main)
    return spent / objects * 1e6


async def _noop(ctx: Any) -> None:
    return None


def measure_status_patch(requests: int) -> float:
    import trio

    from engine import ObjectRef, Trigger
    from engine._run import Run, RunContext
    from engine._writes import OwnWrites
    from engine.kube import Resource
    from engine.kube._client import _transport
    from engine.kube._client._client import Client
    from engine.kube._client._config import Config
    from engine.kube._client._json import dumps

    resource = Resource("bench.example.com", "v1", "Widget", "widgets", True, {"status"})
    answer = dumps(_widget(1, 2001, 2, 2, 2))
    head = (
        b"HTTP/1.1 200 OK\r\nAudit-Id: 5b0c8a4e-2f6d-4f4e-8f0a-3c9b1d2e4f5a\r\nCache-Control: no-cache, private\r\n"
        b"Content-Type: application/json\r\nX-Kubernetes-Pf-Flowschema-Uid: 3f1e\r\n"
        b"X-Kubernetes-Pf-Prioritylevel-Uid: 7a2c\r\nDate: Mon, 07 Dec 2026 20:00:00 GMT\r\n"
        b"Content-Length: %d\r\n\r\n" % len(answer)
    )
    conn = _transport._Connection.__new__(_transport._Connection)
    conn.tls, conn.eof, conn.reusable, conn.closed, conn.poll = False, False, False, False, None
    conn.buffer = bytearray()

    # The network left out: the request is taken at once and the answer is there already.
    async def acquire(self: Any, timeouts: Any) -> Any:
        conn.buffer += head + answer
        return conn

    async def send(self: Any, conn: Any, data: bytes, timeout: Any) -> None:
        return None

    def release(self: Any, conn: Any) -> None:
        conn.reusable = False

    _transport.Transport._acquire = acquire  # type: ignore[method-assign]
    _transport.Transport._send = send  # type: ignore[method-assign]
    _transport.Transport._release = release  # type: ignore[method-assign]
    spent = 0.0

    async def main() -> None:
        nonlocal spent
        writes = OwnWrites(lambda trigger: None)
        writer = writes.writer()
        async with Client(Config(server="https://127.0.0.1:6443")) as client:
            started = time.process_time()
            for i in range(requests):
                key = ObjectRef("Widget", f"w-{i:06d}", "bench", "bench.example.com")
                writer.key = key
                run = Run(i, "widgets", key, Trigger(key, i, "", None, 0.0), 1, 0.0, trio.CancelScope())
                ctx = RunContext(run, None)  # type: ignore[arg-type]
                with ctx.shield(10.0):
                    await client.patch_status(
                        resource, key.name, {"status": {"observedN": 2}}, namespace="bench", decode=False
                    )
            spent = time.process_time() - started

    trio.run(main)
    return spent / requests * 1e6


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, args.root)
    figures = {
        "own write ended": measure_own_writes(args.remembered, 20000),
        "watch events": measure_watch_events(10000),
        # Each replaces some of the transport's methods: the patch's first, the head's last.
        "status patch": measure_status_patch(10000),
        "request head": measure_request_head(20000),
    }
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-root", required=False, help="the other tree (a folder holding its engine/)")
    parser.add_argument("--repeat", type=int, default=5, help="child processes per tree, alternating (5)")
    parser.add_argument("--remembered", type=int, default=5000, help="revisions remembered (5000: a minute at 83 writes/s)")
    parser.add_argument("--root", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.root:
        child(args)
        return
    trees = {"this tree": ROOT}
    if args.before_root:
        trees["before"] = args.before_root
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(args.repeat):
        for name, root in trees.items():
            out = subprocess.run(
                [sys.executable, __file__, "--root", root, "--remembered", str(args.remembered)],
                check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": root},
            ).stdout
            results[name].append(json.loads(out))
    print(f"medians of {args.repeat}, microseconds of CPU per operation; load {os.getloadavg()[0]:.1f}")
    names = list(trees)
    print(f"{'step':<20}" + "".join(f"{name:>12}" for name in names) + ("  this/before" if len(names) == 2 else ""))
    for step in results[names[0]][0]:
        medians = [statistics.median(run[step] for run in results[name]) for name in names]
        ratio = f"  {medians[0] / medians[1]:10.2f}x" if len(names) == 2 else ""
        print(f"{step:<20}" + "".join(f"{m:12.2f}" for m in medians) + ratio)


if __name__ == "__main__":
    main()
