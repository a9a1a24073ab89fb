"""Benchmark: kopf, this engine and a minimal reference reconciler, side by side in one run.

Run by hand (not a test; ``pip install -e '.[bench]'`` or the packages it names)::

    python bench/vs_kopf.py [--n 1000 [10000 ...]] [--operators kopf,engine,reference]
                            [--kubeconfig PATH] [--json PATH] [--plot PATH] [--profile cprofile|py-spy]

Each operator (``bench/operators/*_op.py``) runs as its own process, one after another, each in
a fresh namespace, against the same API server: the embedded one (``bench/apiserver.py``, its
own process, so that its CPU is not the operator's) unless ``--kubeconfig`` names a cluster.
The CRD (``widgets.bench.example.com``, with a status subresource) is installed first. Every
operator writes ``status.observedN = spec.n`` once per change. For each operator:

* start-up: from spawning the process until a first object (``burst``) is reconciled;
* A: create N Widgets (``spec.n = 1``, 16 concurrent requests) until all are reconciled;
* B: patch ``spec.n = 2`` on all N until all are reconciled;
* C: 50 patches, one after another, to ``burst`` until its last value is reconciled;
* SIGTERM, and the time until the process exits.

Convergence is observed from the server by the driver's own watch on the namespace (the time
of the event in which the last object's ``status.observedN`` caught up). Operator CPU (user +
system) and RSS come from the OS (psutil), CPU read 1 s after each phase converged so that
trailing work counts. API requests are counted by the embedded server per User-Agent; on a
cluster, "writes" are the operator's changes to the Widgets seen by the watch instead (no-op
writes and other objects not included). Handler runs are counted by each operator.

Prints one table per N (with kopf/engine and engine/reference ratios; with ``--repeat R`` the
operators run R times, interleaved, and the table shows medians), writes JSON, and with
``--plot`` draws a PNG chart (bars for one N, a scale curve over several).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx
import psutil
import trio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from engine.kube import Client, Config, Resource, install_crds  # noqa: E402

OPERATORS = ("kopf", "engine", "reference")
VARIANTS = ("engine-lean", "reference-lean", "bare", "engine-before")
"""Also accepted by --operators: the engine or the reference with ``operators/_lean.py``'s transport,
``bare``, a hand-written operator on aiohttp (``operators/bare_op.py``), and ``engine-before``,
the engine operator of another checkout (``--before-root``), for before/after in one run."""
GROUP, VERSION, KIND, PLURAL = "bench.example.com", "v1", "Widget", "widgets"
DRIVER_AGENT = "bench-driver"
BURST = "burst"
SETTLE = 1.0

CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"plural": PLURAL, "singular": "widget", "kind": KIND, "listKind": f"{KIND}List"},
        "versions": [
            {
                "name": VERSION,
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "properties": {"n": {"type": "integer"}}},
                            "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                        },
                    }
                },
            }
        ],
    },
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[1000], help="objects per run; several give a scale curve")
    parser.add_argument(
        "--operators", default=",".join(OPERATORS), help=f"comma-separated, in order, from {','.join(OPERATORS + VARIANTS)}"
    )
    parser.add_argument("--kubeconfig", help="run against this cluster instead of the embedded server")
    parser.add_argument("--context", help="kubeconfig context (with --kubeconfig)")
    parser.add_argument(
        "--tls", action="store_true", help="the embedded server serves HTTPS with client certificates, as a cluster does"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="run the operators R times, interleaved; the table shows medians (1)"
    )
    parser.add_argument("--burst", type=int, default=50, help="rapid patches to one object in workload C (50)")
    parser.add_argument("--concurrency", type=int, default=16, help="the driver's concurrent requests (16)")
    parser.add_argument("--workers", type=int, default=16, help="engine and reference worker tasks (16)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a phase may take before it fails")
    parser.add_argument("--json", default="vs_kopf.json", help="write the figures here (vs_kopf.json)")
    parser.add_argument("--plot", nargs="?", const="vs_kopf.png", help="draw a PNG chart (default vs_kopf.png)")
    parser.add_argument(
        "--profile", choices=("cprofile", "py-spy"), help="profile each operator (cProfile in-process, or py-spy)"
    )
    parser.add_argument("--profile-dir", default="bench-profiles", help="where profiles go (bench-profiles)")
    parser.add_argument(
        "--gc-stats", action="store_true", help="operators time their cyclic GC (costs CPU itself; off by default)"
    )
    parser.add_argument(
        "--before-root", help="a checkout of an earlier engine (git archive COMMIT engine bench | tar -x -C DIR): engine-before runs it"
    )
    args = parser.parse_args(argv)
    args.operators = [name.strip() for name in args.operators.split(",") if name.strip()]
    unknown = sorted(set(args.operators) - set(OPERATORS) - set(VARIANTS))
    if unknown or not args.operators:
        parser.error(f"--operators: unknown {unknown}; choose from {', '.join(OPERATORS + VARIANTS)}")
    if "engine-before" in args.operators and not args.before_root:
        parser.error("--operators engine-before needs --before-root")
    if any(n < 1 for n in args.n):
        parser.error("--n must be >= 1")
    return args


# ----- processes -----


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


class ServerProcess:
    """The embedded API server as a subprocess."""

    def __init__(self, workdir: str, tls: bool = False) -> None:
        self.kubeconfig = os.path.join(workdir, "kubeconfig")
        self.popen = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "apiserver.py"), "--write-kubeconfig", self.kubeconfig]
            + (["--tls"] if tls else []),
            stdout=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        assert self.popen.stdout is not None
        line = self.popen.stdout.readline()
        if not line.startswith("listening on "):
            self.popen.kill()
            raise SystemExit(f"the embedded API server did not start: {line!r}")
        self.url = line.split()[-1]
        self.proc = psutil.Process(self.popen.pid)

    def counts(self) -> Counter[str]:
        verify = Config.from_kubeconfig(self.kubeconfig).ssl_context() if self.url.startswith("https:") else True
        answer = httpx.get(f"{self.url}/_bench/requests", timeout=30, verify=verify)
        return Counter(answer.json()["counts"])

    def stop(self) -> None:
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(30)
        except subprocess.TimeoutExpired:
            self.popen.kill()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class OperatorProcess:
    def __init__(self, name: str, kubeconfig: str, namespace: str, workdir: str, args: argparse.Namespace) -> None:
        self.name = name
        self.stats_path = os.path.join(workdir, f"{name}-{namespace}.stats.json")
        self.log_path = os.path.join(workdir, f"{name}-{namespace}.log")
        root = args.before_root if name == "engine-before" else ROOT
        command = [
            sys.executable,
            os.path.join(root, "bench", "operators", f"{name.split('-')[0]}_op.py"),
            "--kubeconfig", kubeconfig,
            "--namespace", namespace,
            "--stats", self.stats_path,
            "--workers", str(args.workers),
            "--transport", "lean" if name.endswith("-lean") else "httpx",
        ]  # fmt: skip
        env = child_env()
        if args.gc_stats:
            env["BENCH_GC_STATS"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        self.profile_path: str | None = None
        if args.profile == "cprofile":
            self.profile_path = os.path.join(args.profile_dir, f"{name}-{namespace}.pstats")
            command += ["--cprofile", self.profile_path]
        self.log = open(self.log_path, "w")  # noqa: SIM115
        self.started = time.perf_counter()
        self.popen = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.proc = psutil.Process(self.popen.pid)
        self.sequence = 0
        self.peak_rss = 0
        self.spy: subprocess.Popen[bytes] | None = None
        self.terminating = False

    def rss(self) -> int:
        try:
            value = int(self.proc.memory_info().rss)
        except psutil.Error:
            return self.peak_rss
        self.peak_rss = max(self.peak_rss, value)
        return value

    def cpu(self) -> float:
        return cpu_seconds(self.proc)

    async def stats(self) -> dict[str, Any]:
        """Ask for the counters (SIGUSR1) and wait for the answer."""
        self.sequence += 1
        self.popen.send_signal(signal.SIGUSR1)
        with trio.fail_after(30):
            while True:
                try:
                    with open(self.stats_path) as handle:
                        data: dict[str, Any] = json.load(handle)
                    if data["sequence"] >= self.sequence:
                        self.sequence = data["sequence"]
                        return data
                except (OSError, ValueError):
                    pass
                await trio.sleep(0.01)

    def start_py_spy(self, path: str) -> None:
        self.profile_path = path
        self.spy = subprocess.Popen(
            ["py-spy", "record", "--pid", str(self.popen.pid), "--rate", "200", "--nonblocking",
             "--format", "raw", "--output", path],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop_py_spy(self) -> None:
        if self.spy is not None:
            self.spy.send_signal(signal.SIGINT)
            self.spy.wait(60)
            self.spy = None

    async def terminate(self, timeout: float = 120.0) -> float | None:
        """SIGTERM, then the seconds until exit (None and SIGKILL after ``timeout``)."""
        start = time.perf_counter()
        self.terminating = True
        self.popen.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout):
            while self.popen.poll() is None:
                await trio.sleep(0.005)
            self.log.close()
            return time.perf_counter() - start
        self.popen.kill()
        self.popen.wait()
        self.log.close()
        return None


# ----- observing the namespace -----


class Observer:
    """The driver's watch on the namespace's Widgets: convergence and changes seen."""

    def __init__(self, client: Client, widgets: Resource, namespace: str) -> None:
        self.client = client
        self.widgets = widgets
        self.namespace = namespace
        self.state: dict[str, tuple[Any, Any, float]] = {}
        """name -> (spec.n, status.observedN, when that pair was first seen)"""
        self.dirty: set[str] = set()
        self.modified = 0
        self.changed = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        page = await self.client.list(self.widgets, namespace=self.namespace)
        rv = page.resource_version
        started = False
        while True:
            async with self.client.watch(self.widgets, namespace=self.namespace, resource_version=rv) as events:
                if not started:
                    task_status.started()
                    started = True
                async for event in events:
                    obj = event.object
                    rv = obj.get("metadata", {}).get("resourceVersion", rv)
                    if event.type.value in ("BOOKMARK", "DELETED"):
                        continue
                    now = time.perf_counter()
                    name = obj["metadata"]["name"]
                    if event.type.value == "MODIFIED":
                        self.modified += 1
                    pair = ((obj.get("spec") or {}).get("n"), (obj.get("status") or {}).get("observedN"))
                    old = self.state.get(name)
                    if old is None or old[:2] != pair:
                        self.state[name] = (*pair, now)
                    self.dirty.add(name)
                    self.changed.set()

    async def wait(self, done: Callable[[], float | None], timeout: float) -> float | None:
        """Wait until ``done()`` returns a time (the moment the server showed convergence);
        None on timeout."""
        with trio.move_on_after(timeout):
            while (when := done()) is None:
                self.changed = trio.Event()
                await self.changed.wait()
            return when
        return None

    def converged(self, names: list[str], target: int) -> Callable[[], float | None]:
        """A check for :meth:`wait`: every name shows ``spec.n == status.observedN == target``;
        it returns the latest time one of them got there."""
        pending = set(names)
        latest = [0.0]
        first = [True]

        def done() -> float | None:
            candidates = pending if first[0] else pending & self.dirty
            first[0] = False
            self.dirty.clear()
            for name in list(candidates):
                n, observed, since = self.state.get(name, (None, None, 0.0))
                if n == observed == target:
                    pending.discard(name)
                    latest[0] = max(latest[0], since)
            return None if pending else latest[0]

        return done


# ----- one operator -----


async def run_operator(
    name: str,
    n: int,
    client: Client,
    widgets: Resource,
    kubeconfig: str,
    server: ServerProcess | None,
    workdir: str,
    args: argparse.Namespace,
) -> dict[str, Any]:
    namespace = f"bench-{name}-{n}-{secrets.token_hex(3)}"
    namespaces = await client.resource("v1", "Namespace")
    await client.create(namespaces, {"metadata": {"name": namespace}})
    result: dict[str, Any] = {"namespace": namespace, "n": n}
    names = [f"w-{i:06d}" for i in range(n)]
    observer = Observer(client, widgets, namespace)
    op = OperatorProcess(name, kubeconfig, namespace, workdir, args)
    print(f"  {name}: pid {op.popen.pid}, namespace {namespace}", flush=True)
    try:
        async with trio.open_nursery() as nursery:

            async def sample_rss() -> None:
                while True:
                    op.rss()
                    await trio.sleep(0.1)

            async def exited() -> None:
                while op.popen.poll() is None or op.terminating:
                    await trio.sleep(0.1)
                raise RuntimeError(f"{name} exited with {op.popen.returncode}; see {op.log_path}")

            nursery.start_soon(sample_rss)
            nursery.start_soon(exited)
            await nursery.start(observer.run)

            await client.create(widgets, {"metadata": {"name": BURST}, "spec": {"n": 0}}, namespace=namespace)
            ready = await observer.wait(observer.converged([BURST], 0), args.timeout)
            if ready is None:
                raise RuntimeError(f"{name} did not reconcile its first object in {args.timeout} s; see {op.log_path}")
            result["startup_s"] = ready - op.started
            await trio.sleep(SETTLE)
            cpu0 = op.cpu()
            await trio.sleep(SETTLE)
            result["idle_cpu_ms_per_s"] = (op.cpu() - cpu0) * 1000 / SETTLE

            if args.profile == "py-spy":
                op.start_py_spy(os.path.join(args.profile_dir, f"{name}-{namespace}.pyspy.txt"))
                await trio.sleep(1.0)

            async def create(i: int) -> None:
                await client.create(widgets, {"metadata": {"name": names[i]}, "spec": {"n": 1}}, namespace=namespace)

            async def bump(i: int) -> None:
                await client.patch(widgets, names[i], {"spec": {"n": 2}}, namespace=namespace)

            async def burst() -> None:
                for value in range(1, args.burst + 1):
                    await client.patch(widgets, BURST, {"spec": {"n": value}}, namespace=namespace)

            phases: list[tuple[str, Callable[[], Any], Callable[[], float | None], int, int]] = [
                ("A", lambda: fan_out(create, n, args.concurrency), observer.converged(names, 1), n, 0),
                ("B", lambda: fan_out(bump, n, args.concurrency), observer.converged(names, 2), n, n),
                ("C", burst, observer.converged([BURST], args.burst), args.burst, args.burst),
            ]
            for phase, workload, done, changes, own_modifications in phases:
                result[phase] = await run_phase(op, observer, server, workload, done, changes, own_modifications, args)
                print(f"    {phase}: {summary(result[phase])}", flush=True)
                if phase == "B" and args.profile == "py-spy":
                    op.stop_py_spy()
            result["rss_end_mib"] = op.rss() / 2**20
            result["peak_rss_mib"] = op.peak_rss / 2**20
            final = await op.stats()
            result["handler_runs_total"] = final["runs_total"]
            result["sigterm_to_exit_s"] = await op.terminate()
            nursery.cancel_scope.cancel()
    finally:
        op.stop_py_spy()
        if op.popen.poll() is None:
            op.popen.kill()
            op.popen.wait()
        if not op.log.closed:
            op.log.close()
        with trio.move_on_after(120):
            await client.delete(namespaces, namespace)
    if op.profile_path is not None:
        result["profile"] = op.profile_path
    return result


async def fan_out(fn: Callable[[int], Any], count: int, concurrency: int) -> None:
    next_index = iter(range(count))

    async def worker() -> None:
        for i in next_index:
            await fn(i)

    async with trio.open_nursery() as nursery:
        for _ in range(min(concurrency, count)):
            nursery.start_soon(worker)


def operator_writes(before: Counter[str], after: Counter[str]) -> tuple[int, int, Counter[str]]:
    """(mutating requests, all requests, by kind) of clients other than the driver."""
    delta: Counter[str] = Counter()
    for key, value in after.items():
        agent, _, what = key.partition("|")
        if agent != DRIVER_AGENT and value - before.get(key, 0):
            delta[what] += value - before.get(key, 0)
    writes = sum(v for k, v in delta.items() if k.split()[0] in ("POST", "PUT", "PATCH", "DELETE"))
    return writes, sum(delta.values()), delta


async def run_phase(
    op: OperatorProcess,
    observer: Observer,
    server: ServerProcess | None,
    workload: Callable[[], Any],
    done: Callable[[], float | None],
    changes: int,
    own_modifications: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    stats0 = await op.stats()
    counts0 = await trio.to_thread.run_sync(server.counts) if server else Counter[str]()
    server_cpu0 = cpu_seconds(server.proc) if server else 0.0
    modified0 = observer.modified
    cpu0 = op.cpu()
    start = time.perf_counter()
    await workload()
    sent = time.perf_counter()
    converged = await observer.wait(done, args.timeout)
    if converged is None:
        raise RuntimeError(f"{op.name} did not converge in {args.timeout} s; see {op.log_path}")
    await trio.sleep(SETTLE)
    cpu = op.cpu() - cpu0
    server_cpu = (cpu_seconds(server.proc) - server_cpu0) if server else None
    modified = observer.modified - modified0
    stats = await op.stats()
    phase: dict[str, Any] = {
        "changes": changes,
        "convergence_s": converged - start,
        "workload_sent_s": sent - start,
        "cpu_s": cpu,
        "cpu_ms_per_change": cpu * 1000 / changes,
        "rss_mib": op.rss() / 2**20,
        "handler_runs": stats["runs_total"] - stats0["runs_total"],
        "handler_runs_per_change": (stats["runs_total"] - stats0["runs_total"]) / changes,
        "object_changes_by_operator": modified - own_modifications,
    }
    if "gc_s" in stats:
        phase["gc_s"] = stats["gc_s"] - stats0["gc_s"]
        phase["gc_ms_per_change"] = phase["gc_s"] * 1000 / changes
    if server is not None:
        counts = await trio.to_thread.run_sync(server.counts)
        writes, requests, by_kind = operator_writes(counts0, counts)
        phase["api_writes"] = writes
        phase["api_writes_per_change"] = writes / changes
        phase["api_requests"] = requests
        phase["api_requests_by_kind"] = dict(by_kind)
        phase["server_cpu_ms_per_change"] = (server_cpu or 0.0) * 1000 / changes
    else:
        phase["api_writes_per_change"] = phase["object_changes_by_operator"] / changes
    return phase


def summary(phase: dict[str, Any]) -> str:
    return (
        f"converged in {phase['convergence_s']:.2f} s, CPU {phase['cpu_ms_per_change']:.2f} ms/change, "
        f"writes/change {phase['api_writes_per_change']:.2f}, handler runs {phase['handler_runs']}"
    )


# ----- report -----

ROWS: list[tuple[str, Callable[[dict[str, Any]], float | None], str]] = [
    ("start-up to first reconcile (s)", lambda r: r["startup_s"], "{:.2f}"),
    ("CPU per object, A create (ms)", lambda r: r["A"]["cpu_ms_per_change"], "{:.2f}"),
    ("CPU per object, B update (ms)", lambda r: r["B"]["cpu_ms_per_change"], "{:.2f}"),
    ("CPU per patch, C burst (ms)", lambda r: r["C"]["cpu_ms_per_change"], "{:.2f}"),
    ("of which cyclic GC, mean of A and B (ms)", lambda r: (r["A"]["gc_ms_per_change"] + r["B"]["gc_ms_per_change"]) / 2, "{:.3f}"),
    ("convergence A (s)", lambda r: r["A"]["convergence_s"], "{:.2f}"),
    ("convergence B (s)", lambda r: r["B"]["convergence_s"], "{:.2f}"),
    ("convergence C (s)", lambda r: r["C"]["convergence_s"], "{:.2f}"),
    ("RSS peak (MiB)", lambda r: r["peak_rss_mib"], "{:.0f}"),
    ("RSS after B (MiB)", lambda r: r["B"]["rss_mib"], "{:.0f}"),
    ("RSS peak / RSS after B", lambda r: r["peak_rss_mib"] / r["B"]["rss_mib"], "{:.2f}"),
    ("API writes per change, A", lambda r: r["A"]["api_writes_per_change"], "{:.2f}"),
    ("API writes per change, B", lambda r: r["B"]["api_writes_per_change"], "{:.2f}"),
    ("API writes, C (50 patches)", lambda r: r["C"]["api_writes_per_change"] * r["C"]["changes"], "{:.0f}"),
    ("API requests per change, A+B", lambda r: requests_per_change(r), "{:.2f}"),
    ("handler runs per change, A+B", lambda r: (r["A"]["handler_runs"] + r["B"]["handler_runs"]) / (2 * r["n"]), "{:.2f}"),
    ("handler runs, C (50 patches)", lambda r: r["C"]["handler_runs"], "{:.0f}"),
    ("SIGTERM to exit (s)", lambda r: r["sigterm_to_exit_s"], "{:.2f}"),
    ("idle CPU (ms/s)", lambda r: r["idle_cpu_ms_per_s"], "{:.1f}"),
    ("server CPU per object, A+B (ms)", lambda r: server_cpu(r), "{:.2f}"),
]


def requests_per_change(r: dict[str, Any]) -> float | None:
    if "api_requests" not in r["A"]:
        return None
    return float(r["A"]["api_requests"] + r["B"]["api_requests"]) / (2 * r["n"])


def server_cpu(r: dict[str, Any]) -> float | None:
    if "server_cpu_ms_per_change" not in r["A"]:
        return None
    return float(r["A"]["server_cpu_ms_per_change"] + r["B"]["server_cpu_ms_per_change"]) / 2


def value(results: dict[str, Any], op: str, fn: Callable[[dict[str, Any]], float | None]) -> float | None:
    """The median over an operator's runs of ``fn`` (runs that failed are left out)."""
    values = []
    for r in results.get(op) or []:
        try:
            v = fn(r)
        except (KeyError, TypeError):
            v = None
        if v is not None:
            values.append(v)
    return statistics.median(values) if values else None


def table(n: int, results: dict[str, Any], operators: list[str]) -> str:
    pairs = (
        ("kopf", "engine"),
        ("engine", "reference"),
        ("engine", "bare"),
        ("engine", "engine-before"),
        ("engine", "reference-lean"),
        ("engine-lean", "engine"),
        ("reference-lean", "reference"),
    )
    ratios = [(a, b) for a, b in pairs if a in operators and b in operators]
    repeats = max(len(runs) for runs in results.values())
    head = ["N = " + format(n, ",") + (f" (median of {repeats})" if repeats > 1 else "")] + operators + [f"{a}/{b}" for a, b in ratios]
    lines = [head]
    for label, fn, fmt in ROWS:
        cells = [label]
        for op in operators:
            v = value(results, op, fn)
            cells.append("-" if v is None else fmt.format(v))
        for a, b in ratios:
            va, vb = value(results, a, fn), value(results, b, fn)
            cells.append("-" if va is None or vb is None or vb == 0 else f"{va / vb:.2f}x")
        lines.append(cells)
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    out = []
    for k, row in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[0]) if i == 0 else cell.rjust(widths[i]) for i, cell in enumerate(row)))
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    for op in operators:
        for r in results.get(op) or []:
            if "error" in r:
                out.append(f"{op}: FAILED: {r['error']}")
    return "\n".join(out)


PLOTTED: list[tuple[str, Callable[[dict[str, Any]], float | None]]] = [
    ("CPU per object, A (ms)", lambda r: r["A"]["cpu_ms_per_change"]),
    ("CPU per object, B (ms)", lambda r: r["B"]["cpu_ms_per_change"]),
    ("convergence A (s)", lambda r: r["A"]["convergence_s"]),
    ("convergence B (s)", lambda r: r["B"]["convergence_s"]),
    ("RSS peak (MiB)", lambda r: r["peak_rss_mib"]),
    ("API writes per change, B", lambda r: r["B"]["api_writes_per_change"]),
]


def plot(path: str, runs: dict[int, dict[str, Any]], operators: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(runs)
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (title, fn) in zip(axes.flat, PLOTTED, strict=True):
        if len(sizes) == 1:
            values = [value(runs[sizes[0]], op, fn) for op in operators]
            bars = ax.bar(operators, [v or 0 for v in values], color=[f"C{i}" for i in range(len(operators))])
            ax.bar_label(bars, labels=["-" if v is None else f"{v:.3g}" for v in values])
        else:
            for op in operators:
                points = [(n, value(runs[n], op, fn)) for n in sizes]
                xs = [n for n, v in points if v is not None]
                ax.plot(xs, [v for _, v in points if v is not None], marker="o", label=op)
            ax.set_xscale("log")
            ax.set_xlabel("N objects")
            ax.legend()
        ax.set_title(title)
    label = ", ".join(f"N={n:,}" for n in sizes)
    fig.suptitle(f"kopf vs engine vs minimal reference ({label}; one run, same machine and server)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ----- main -----


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.profile:
        os.makedirs(args.profile_dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="vs-kopf-")
    server = None if args.kubeconfig else ServerProcess(workdir, tls=args.tls)
    kubeconfig = args.kubeconfig or (server.kubeconfig if server else "")
    report: dict[str, Any] = {
        "meta": {
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "server": f"embedded (bench/apiserver.py{' --tls' if args.tls else ''})" if server else f"cluster from {args.kubeconfig}",
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {psutil.cpu_count()} CPUs",
            "versions": versions(),
            "args": {k: v for k, v in vars(args).items()},
            "workdir": workdir,
        },
        "runs": {},
    }
    print(f"server: {report['meta']['server']}; operator logs in {workdir}", flush=True)
    try:
        config = Config.from_kubeconfig(kubeconfig, context=args.context)
        async with Client(config, user_agent=DRIVER_AGENT, timeout=120) as client:
            await install_crds(client, [CRD])
            widgets = await client.resource(f"{GROUP}/{VERSION}", KIND)
            for n in args.n:
                print(f"N = {n:,}", flush=True)
                results: dict[str, list[dict[str, Any]]] = {name: [] for name in args.operators}
                for repeat in range(args.repeat):
                    if args.repeat > 1:
                        print(f" repeat {repeat + 1} of {args.repeat}", flush=True)
                    for name in args.operators:
                        try:
                            run = await run_operator(name, n, client, widgets, kubeconfig, server, workdir, args)
                        except Exception as exc:  # reported in the table; the next operator still runs
                            run = {"error": f"{type(exc).__name__}: {exc}"}
                            print(f"  {name} failed: {exc}", flush=True)
                        results[name].append(run)
                report["runs"][str(n)] = results
                print()
                print(table(n, results, args.operators), flush=True)
                print()
    finally:
        if server is not None:
            server.stop()
    return report


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {}
    for dist in ("kopf", "httpx", "httpcore", "trio", "aiohttp", "trio-reconciler-engine"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = trio.run(run, args)
    with open(args.json, "w") as handle:
        json.dump(report, handle, indent=2)
    print(f"figures written to {args.json}")
    if args.plot:
        plot(args.plot, {int(n): r for n, r in report["runs"].items()}, args.operators)
        print(f"chart written to {args.plot}")
    failed = any("error" in r for results in report["runs"].values() for runs in results.values() for r in runs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
