"""Benchmark: per-object steps of a controller's hot path, this tree against another, interleaved.

Run by hand (not a test)::

    git archive COMMIT engine | tar -x -C /tmp/before
    python bench/hot_path.py --before-root /tmp/before [--repeat 5] [--remembered 5000]

Each measurement runs in a child process of its own (one tree imported per process), the two
trees alternating, ``--repeat`` times; the table gives the medians and their ratio. CPU time
(``time.process_time``), so that other processes on a shared machine slow each figure less.

With ``--count`` the same sections are counted instead of timed: Python bytecodes executed per
operation, with ``sys.settrace`` (trio and every library included, the stand-ins for the network
and the API server left out), once per tree, with trio's scheduler and string hashes seeded so
that a count repeats exactly whatever the machine's load. ``--top N`` prints each step's
bytecodes and calls by module and its N costliest functions (on stderr)::

    python bench/hot_path.py --before-root /tmp/before --count [--top 40]

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
* ``whole path``: the benchmark operator end to end, per object: ``engine_op.py``'s operator
  (a ``Manager``, a ``Cluster`` informer with its watch-list, ``Cluster.watches`` with
  ``generation_changed``, a controller of 16 workers whose reconciler patches the status in
  ``ctx.shield``) on the engine's own client and transport, against a stand-in API server on
  socket pairs (``_FakeServer``: it answers each request as it is sent). Once the initial state
  (``--objects`` widgets) is cached and its runs are done, the widgets' specs change
  ``--batch`` at a time; each change is its watch event read off the socket (chunked), the
  trigger, the queue, the worker and its run, the status patch (request, answer, own-write
  note) and the patch's watch echo, until every task waits. Timed, the stand-in's own work is
  in the figure; counted, it is not.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
import types
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Meter:
    """What the timed sections of a step cost: CPU time, or Python bytecodes and calls.

    Used as ``with meter:`` around each timed section. Counting (``count=True``) traces every
    Python frame entered in a section with ``sys.settrace`` and counts its executed bytecodes
    (``f_trace_opcodes``), by function; trio's scheduler and every library are included, the
    code objects in ``skip`` (a step's stand-ins for the network and the API server) and what
    they call are not. A count does not depend on the machine's load.
    """

    def __init__(self, count: bool) -> None:
        self.count = count
        self.seconds = 0.0
        self.bytecodes: collections.Counter[types.CodeType] = collections.Counter()
        self.calls: collections.Counter[types.CodeType] = collections.Counter()
        self.skip: set[types.CodeType] = set()
        self._skipped: set[types.FrameType] = set()
        self._started = 0.0

    def __enter__(self) -> None:
        if self.count:
            sys.settrace(self._call)
        else:
            self._started = time.process_time()

    def __exit__(self, *exc: object) -> None:
        if self.count:
            sys.settrace(None)
        else:
            self.seconds += time.process_time() - self._started

    def _call(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if frame.f_code in self.skip or frame.f_back in self._skipped:
            self._skipped.add(frame)
            return None
        self.calls[frame.f_code] += 1
        frame.f_trace_lines = False
        frame.f_trace_opcodes = True
        return self._opcode

    def _opcode(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if event == "opcode":
            self.bytecodes[frame.f_code] += 1
        return self._opcode

    def per(self, operations: int) -> float:
        """Microseconds of CPU per operation, or bytecodes per operation when counting."""
        if self.count:
            return sum(self.bytecodes.values()) / operations
        return self.seconds / operations * 1e6

    def functions(self, operations: int, top: int) -> list[tuple[str, float, float]]:
        """The ``top`` functions by bytecodes: (module:function, bytecodes and calls per operation)."""
        rows = []
        for code, bytecodes in self.bytecodes.most_common(top):
            rows.append((f"{_module(code.co_filename)}:{code.co_qualname}", bytecodes / operations,
                         self.calls[code] / operations))
        return rows

    def modules(self, operations: int) -> list[tuple[str, float, float]]:
        """Bytecodes and calls per operation, by module (largest first)."""
        bytecodes: collections.Counter[str] = collections.Counter()
        calls: collections.Counter[str] = collections.Counter()
        for code, n in self.bytecodes.items():
            bytecodes[_module(code.co_filename)] += n
        for code, n in self.calls.items():
            calls[_module(code.co_filename)] += n
        return [(name, n / operations, calls[name] / operations) for name, n in bytecodes.most_common()]


def _module(filename: str) -> str:
    """A file as a short module path (``engine/_controller.py``, ``trio/_core/_run.py``)."""
    parts = filename.replace(os.sep, "/").split("/")
    for anchor in ("engine", "trio", "httpx", "attrs", "outcome", "sniffio", "operators"):
        if anchor in parts:
            return "/".join(parts[len(parts) - 1 - parts[::-1].index(anchor):])
    return parts[-1]



def measure_own_writes(meter: Meter, remembered: int, writes: int) -> float:
    import trio
    import trio.testing

    from engine._refs import ObjectRef
    from engine._writes import OwnWrites

    keys = [ObjectRef("Widget", f"w-{i:06d}", "bench", "bench.example.com") for i in range(remembered + writes)]
    revisions = [str(100000 + i) for i in range(len(keys))]
    rate = remembered / 60.0

    async def main(clock: trio.testing.MockClock) -> None:
        record = OwnWrites(lambda trigger: None)
        for i, key in enumerate(keys):
            record.started(key)
            record.began(key)
            if i < remembered:
                record.ended(key, revisions[i])
            else:
                with meter:
                    record.ended(key, revisions[i])
            clock.jump(1 / rate)

    clock = trio.testing.MockClock()
    trio.run(main, clock, clock=clock)
    return meter.per(writes)


def measure_request_head(meter: Meter, requests: int) -> float:
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
    with meter:
        for _ in range(requests):
            coroutine = sender.send("PATCH", path, options)
            try:
                coroutine.send(None)
            except StopIteration:
                pass
    return meter.per(requests)


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


def measure_watch_events(meter: Meter, objects: int) -> float:
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

    async def main() -> None:
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
            with meter:
                await informer.watcher._consume(stream, informer._on_event)
        assert len(controller.queue) == objects, len(controller.queue)

    trio.run(main)
    return meter.per(objects)


async def _noop(ctx: Any) -> None:
    return None


def measure_status_patch(meter: Meter, requests: int) -> float:
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

    async def main() -> None:
        writes = OwnWrites(lambda trigger: None)
        writer = writes.writer()
        async with Client(Config(server="https://127.0.0.1:6443")) as client:
            with meter:
                for i in range(requests):
                    key = ObjectRef("Widget", f"w-{i:06d}", "bench", "bench.example.com")
                    writer.key = key
                    run = Run(i, "widgets", key, Trigger(key, i, "", None, 0.0), 1, 0.0, trio.CancelScope())
                    ctx = RunContext(run, None)  # type: ignore[arg-type]
                    with ctx.shield(10.0):
                        await client.patch_status(
                            resource, key.name, {"status": {"observedN": 2}}, namespace="bench", decode=False
                        )

    trio.run(main)
    return meter.per(requests)


class _FakeServer:
    """The API server of the ``whole path`` step, answering on the other end of socket pairs.

    It answers a request as soon as the transport has sent it (from the transport's ``_send``,
    before the client waits for the answer): discovery, the informer's watch-list (its initial
    state, written by a task of its own) and each status merge patch (its answer, then its
    watch echo on the watch's connection). Its code is left out of the counts.
    """

    def __init__(self, objects: int, nursery: Any) -> None:
        from engine.kube._client._json import dumps

        self._dumps = dumps
        self._objects = objects
        self._nursery = nursery
        self.peers: dict[Any, Any] = {}
        """Client socket -> the server's end."""
        self.watch: Any = None
        """The server's end of the watch's connection, once the watch was asked for."""
        self.revision = objects + 1
        """The newest revision written (the initial state's bookmark first)."""
        self.patches = 0
        self.tasks: list[Any] = []
        self._widgets = {f"w-{i:06d}".encode(): i for i in range(objects)}

    def connect(self) -> Any:
        import socket

        from engine.kube._client._transport import _Connection

        mine, theirs = socket.socketpair()
        mine.setblocking(False)
        theirs.setblocking(False)
        self.peers[mine] = theirs
        return _Connection(mine)

    def answer(self, sock: Any, data: bytes) -> None:
        peer = self.peers[sock]
        peer.recv(len(data))  # what the transport sent is ``data``: read, so that the socket never fills
        method, target, _ = data.split(b" ", 2)
        if method == b"GET" and target == b"/apis/bench.example.com/v1":
            body = self._dumps({
                "kind": "APIResourceList", "groupVersion": "bench.example.com/v1",
                "resources": [
                    {"name": "widgets", "namespaced": True, "kind": "Widget", "verbs": ["get", "list", "watch", "patch"]},
                    {"name": "widgets/status", "namespaced": True, "kind": "Widget", "verbs": ["get", "patch"]},
                ],
            })
            self._send(peer, _answer_head(len(body)) + body)
        elif method == b"GET" and b"watch=" in target:
            self.watch = peer
            events = [{"type": "ADDED", "object": _widget(i, 1 + i, 1, 1, 1)} for i in range(self._objects)]
            events.append({"type": "BOOKMARK", "object": {
                "kind": "Widget", "apiVersion": "bench.example.com/v1",
                "metadata": {"resourceVersion": str(self.revision), "annotations": {"k8s.io/initial-events-end": "true"}},
            }})
            head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                    b"Date: Mon, 07 Dec 2026 20:00:00 GMT\r\n\r\n")
            self._nursery.start_soon(self._send_all, peer, head + b"".join(_chunk(self._dumps(e)) for e in events))
        elif method == b"PATCH" and target.endswith(b"/status"):
            i = self._widgets[target.rsplit(b"/", 2)[1]]
            self.revision += 1
            obj = _widget(i, self.revision, 2, 2, 2)
            body = self._dumps(obj)
            self._send(peer, _answer_head(len(body)) + body)
            self._send(self.watch, _chunk(self._dumps({"type": "MODIFIED", "object": obj})))
            self.patches += 1
        else:
            raise AssertionError(f"the fake API server does not serve {data[:200]!r}")

    def change(self, first: int, count: int) -> None:
        """Write the spec changes of widgets ``first`` to ``first + count`` on the watch."""
        chunks = []
        for i in range(first, first + count):
            self.revision += 1
            chunks.append(_chunk(self._dumps({"type": "MODIFIED", "object": _widget(i, self.revision, 2, 2, 1)})))
        self._send(self.watch, b"".join(chunks))

    @staticmethod
    def _send(peer: Any, data: bytes) -> None:
        sent = peer.send(data)
        assert sent == len(data), "the fake API server's socket is full"

    async def _send_all(self, peer: Any, data: bytes) -> None:
        import trio

        self.tasks.append(trio.lowlevel.current_task())
        view = memoryview(data)
        while view:
            await trio.lowlevel.wait_writable(peer)
            try:
                view = view[peer.send(view):]
            except BlockingIOError:
                pass


def _answer_head(length: int) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nAudit-Id: 5b0c8a4e-2f6d-4f4e-8f0a-3c9b1d2e4f5a\r\nCache-Control: no-cache, private\r\n"
        b"Content-Type: application/json\r\nX-Kubernetes-Pf-Flowschema-Uid: 3f1e\r\n"
        b"X-Kubernetes-Pf-Prioritylevel-Uid: 7a2c\r\nDate: Mon, 07 Dec 2026 20:00:00 GMT\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )


def _chunk(line: bytes) -> bytes:
    return b"%x\r\n%b\n\r\n" % (len(line) + 1, line)


def measure_whole_path(meter: Meter, objects: int, batch: int) -> float:
    import trio
    import trio.testing

    from engine import Controller, Manager, RunContext
    from engine.kube import Client, Cluster, Config, NotFoundError, generation_changed
    from engine.kube._client import _transport

    original_send = _transport.Transport._send
    server: _FakeServer | None = None

    async def connect(self: Any, timeout: Any) -> Any:
        assert server is not None
        return server.connect()

    async def send(self: Any, conn: Any, data: bytes, timeout: Any) -> None:
        await original_send(self, conn, data, timeout)
        assert server is not None
        server.answer(conn.socket, data)

    _transport.Transport._connect = connect  # type: ignore[method-assign]
    _transport.Transport._send = send  # type: ignore[method-assign]

    async def main() -> None:
        nonlocal server
        async with trio.open_nursery() as nursery:
            server = _FakeServer(objects, nursery)
            # engine_op.py's operator, as it is written there (without the benchmark's run counter).
            async with Client(Config(server="http://127.0.0.1:6443"), user_agent="bench-engine-operator") as client:
                manager = Manager(grace_period=10, handle_signals=False)
                cluster = Cluster(client, manager, namespace="bench")
                widgets = await cluster.informer("bench.example.com/v1", "Widget")

                async def reconcile(ctx: RunContext) -> None:
                    obj = widgets.store.get(ctx.ref.namespace, ctx.ref.name)
                    if obj is None:
                        return
                    n = obj["spec"]["n"]
                    if (obj.get("status") or {}).get("observedN") == n:
                        return
                    with ctx.shield(10.0):
                        try:
                            await client.patch_status(
                                widgets.resource, ctx.ref.name, {"status": {"observedN": n}},
                                namespace=ctx.ref.namespace, decode=False,
                            )
                        except NotFoundError:
                            pass

                controller = manager.add_controller(Controller("widgets", reconcile, max_concurrent=16))
                cluster.watches(controller, widgets, predicates=[generation_changed])
                await nursery.start(manager.run)
                # The initial state's runs (nothing to write) done, the change of each widget:
                # its watch event, its run, its status patch and the patch's echo.
                await trio.testing.wait_all_tasks_blocked()
                runs_before = sum(controller.outcomes.values())
                meter.skip |= {
                    main.__code__, connect.__code__, send.__code__, _FakeServer.answer.__code__,
                    _FakeServer.change.__code__, _FakeServer._send.__code__, _FakeServer._send_all.__code__,
                }
                with meter:
                    for first in range(0, objects, batch):
                        server.change(first, min(batch, objects - first))
                        await trio.testing.wait_all_tasks_blocked()
                assert server.patches == objects, server.patches
                assert sum(controller.outcomes.values()) - runs_before == objects
                manager.stop()
            nursery.cancel_scope.cancel()

    trio.run(main)
    return meter.per(objects)


STEPS: dict[str, Any] = {
    "own write ended": lambda meter, args: measure_own_writes(meter, args.remembered, 20000),
    "watch events": lambda meter, args: measure_watch_events(meter, 10000),
    # Each replaces some of the transport's methods: the patch's first, the head's last.
    "status patch": lambda meter, args: measure_status_patch(meter, 10000),
    "request head": lambda meter, args: measure_request_head(meter, 20000),
}
"""The steps measured in one child process, in this order (``whole path`` runs in one of its own)."""


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, args.root)
    if args.count:
        # trio reverses a batch of runnable tasks at random; seeded, the counts repeat exactly.
        import trio

        trio._core._run._r.seed(0)
    figures = {}
    if args.step == "whole path":
        meter = Meter(args.count)
        figures["whole path"] = measure_whole_path(meter, args.objects, args.batch)
        meters = {"whole path": meter}
    else:
        meters = {name: Meter(args.count) for name in STEPS}
        for name, step in STEPS.items():
            figures[name] = step(meters[name], args)
    if args.count and args.top:
        for name, meter in meters.items():
            operations = round(sum(meter.bytecodes.values()) / figures[name]) if figures[name] else 1
            print(f"{name}: {figures[name]:.0f} bytecodes, {sum(meter.calls.values()) / operations:.1f} calls "
                  "per operation", file=sys.stderr)
            for module, bytecodes, calls in meter.modules(operations):
                print(f"  {bytecodes:9.1f} {calls:7.2f}  {module}", file=sys.stderr)
            for function, bytecodes, calls in meter.functions(operations, args.top):
                print(f"  {bytecodes:9.1f} {calls:7.2f}  {function}", file=sys.stderr)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-root", required=False, help="the other tree (a folder holding its engine/)")
    parser.add_argument("--repeat", type=int, default=5, help="child processes per tree, alternating (5)")
    parser.add_argument("--remembered", type=int, default=5000, help="revisions remembered (5000: a minute at 83 writes/s)")
    parser.add_argument("--objects", type=int, default=2000, help="widgets changed in the whole path step (2000)")
    parser.add_argument("--batch", type=int, default=16, help="widgets changed at once in the whole path step (16)")
    parser.add_argument(
        "--count", action="store_true",
        help="count Python bytecodes per operation (sys.settrace) instead of timing; the same in every repeat",
    )
    parser.add_argument("--top", type=int, default=0, help="with --count: print each step's modules and top functions")
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--step", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.root:
        child(args)
        return
    trees = {"this tree": ROOT}
    if args.before_root:
        trees["before"] = args.before_root
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    options = ["--remembered", str(args.remembered), "--objects", str(args.objects), "--batch", str(args.batch),
               "--top", str(args.top)] + (["--count"] if args.count else [])
    for _ in range(1 if args.count else args.repeat):
        for name, root in trees.items():
            figures: dict[str, float] = {}
            for step in ("steps", "whole path"):
                out = subprocess.run(
                    [sys.executable, __file__, "--root", root, "--step", step, *options],
                    check=True, stdout=subprocess.PIPE, text=True,
                    # With --count, string hashes are fixed too (the order a set of keys is compared in).
                    env={**os.environ, "PYTHONPATH": root, **({"PYTHONHASHSEED": "0"} if args.count else {})},
                ).stdout
                figures.update(json.loads(out))
            results[name].append(figures)
    if args.count:
        print("Python bytecodes per operation (sys.settrace)")
    else:
        print(f"medians of {args.repeat}, microseconds of CPU per operation; load {os.getloadavg()[0]:.1f}")
    names = list(trees)
    print(f"{'step':<20}" + "".join(f"{name:>12}" for name in names) + ("  this/before" if len(names) == 2 else ""))
    for step in results[names[0]][0]:
        medians = [statistics.median(run[step] for run in results[name]) for name in names]
        ratio = f"  {medians[0] / medians[1]:10.2f}x" if len(names) == 2 else ""
        print(f"{step:<20}" + "".join(f"{m:12.2f}" for m in medians) + ratio)


if __name__ == "__main__":
    main()
