"""Benchmark: operators side by side on real API servers, measured from the server's side too.

Run by hand (not a test)::

    python bench/side_by_side.py [--n 1000 [10000 ...]] [--operators bare,engine,client-go]
                                 [--kube-version 1.36.2] [--repeat R] [--start] [--audit]
                                 [--client-go PATH] [--json PATH]

Every operator gets **a fresh server** (etcd and kube-apiserver started empty for it and stopped
after it; with ``--repeat`` the order alternates), because a real server's CPU depends on its
history. The servers are real binaries: ``$KUBEBUILDER_ASSETS`` when set, else
``../shared/kube/assets VERSION`` when that folder exists (started with its
``real-apiserver.sh``, on ports of this run's own); with neither, the embedded server
(``bench/apiserver.py``), said in the output.

Contenders: the Python operators of ``bench/operators/`` (``bare``, ``engine``, ``reference``,
``kopf``) and ``client-go``, any operator binary that keeps the bench's contract (``--client-go
PATH``; default ``../shared/bench/client-go/widget-op.gz``, a ``.gz`` is unpacked into
``~/.cache/engine-bench/``; skipped, with the reason, when absent). The contract: kubeconfig from
``$KUBECONFIG``, namespace from ``$BENCH_NAMESPACE``, one status merge patch
``{"status": {"observedN": spec.n}}`` per change, a line ``<time> <name> <n>`` per reconcile
appended to ``$BENCH_RECONCILE_LOG`` (so its runs count no-op reconciles too), exit on SIGTERM.
Its resource is ``widgets.bench.example/v1`` (``--client-go-group``); the Python operators use
``widgets.bench.example.com/v1``. Each server gets the CRD of its operator's group.

Phases (the driver's requests are the same for every operator):

* start-up: from spawning the process until a first object (``burst``) is reconciled;
* A: create N Widgets (``spec.n = 1``, 16 concurrent requests) until all are reconciled;
* B: merge-patch ``spec.n = 2`` on all N until all are reconciled;
* with ``--start``, S instead of all three: N Widgets created first, then the operator starts;
  from spawning it to its first status write seen by the server and to all N reconciled once.

For each operator and phase: the operator's CPU; the API server's and etcd's CPU (``/proc``) and
peak RSS (``VmHWM``); the server's ``/metrics`` deltas (``apiserver_request_total``, the request
and response bytes, the time spent, by verb, resource and subresource; watch events sent and
their bytes; long-running watches open; watchers the server closed for reading too slowly,
``apiserver_terminated_watchers_total``); the operator's TCP connections to the server (the
server's log is kept beside the operators' logs). Peak RSS
of the operator is its own ``VmHWM`` (a child's ``ru_maxrss`` counts the parent's pages from
before ``exec``). Memory per cached object: the operator's RSS after B less its RSS after
start-up (one object), over N. With ``--audit`` the server also writes an audit log (level
Metadata, the bench's namespaces only; it costs the server CPU, so CPU figures of an audited run
are not comparable) and the table lists the operator's own requests by verb, path pattern and
query parameters.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
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
sys.path.insert(0, HERE)

from vs_kopf import CRD, SETTLE, Observer, ServerProcess, child_env, fan_out  # noqa: E402

from engine.kube import Client, Config, Resource, install_crds  # noqa: E402

PYTHON_OPERATORS = ("bare", "engine", "reference", "kopf")
BINARY = "client-go"
SHARED = os.environ.get("ENGINE_SHARED_DIR", os.path.join(os.path.dirname(ROOT), "shared"))
DEFAULT_BINARY = os.path.join(SHARED, "bench", "client-go", "widget-op.gz")
PYTHON_GROUP = "bench.example.com"
DRIVER_AGENT = "bench-driver"
BURST = "burst"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  namespaces: {namespaces}
- level: None
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[1000], help="objects per run (1000)")
    parser.add_argument(
        "--operators",
        default=f"bare,engine,{BINARY}",
        help=f"comma-separated, from {','.join(PYTHON_OPERATORS + (BINARY,))}",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per operator, the order alternating (1)")
    parser.add_argument(
        "--kube-version", default="1.36.2", help="the real server's version from ../shared/kube (1.36.2)"
    )
    parser.add_argument(
        "--embedded", action="store_true", help="the embedded server even when real binaries are present"
    )
    parser.add_argument(
        "--client-go",
        default=os.environ.get("BENCH_CLIENT_GO", DEFAULT_BINARY),
        help="the binary contender (a .gz is unpacked)",
    )
    parser.add_argument("--client-go-group", default="bench.example", help="the binary's API group (bench.example)")
    parser.add_argument(
        "--workers", type=int, default=16, help="workers of the Python operators (16; the binary keeps its default)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="the driver's concurrent requests (16)")
    parser.add_argument(
        "--start", action="store_true", help="measure a start over N existing objects instead of A and B"
    )
    parser.add_argument(
        "--audit", action="store_true", help="audit log: the operator's requests by path and query (costs server CPU)"
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds a phase may take (1800)")
    parser.add_argument("--port", type=int, default=0, help="the real server's port (0: a free one)")
    parser.add_argument("--json", default="side_by_side.json", help="write the figures here (side_by_side.json)")
    args = parser.parse_args(argv)
    args.operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    unknown = sorted(set(args.operators) - set(PYTHON_OPERATORS) - {BINARY})
    if unknown or not args.operators:
        parser.error(f"--operators: unknown {unknown}")
    return args


# ----- /proc -----

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def proc_status(pid: int, key: str) -> int:
    """A ``kB`` line of /proc/PID/status (``VmHWM``, ``VmRSS``) in bytes; 0 if gone."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ----- metrics -----

LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
FAMILIES = (
    "apiserver_request_total",
    "apiserver_request_duration_seconds_sum",
    "apiserver_response_sizes_sum",
    "apiserver_request_body_size_bytes_sum",
    "apiserver_watch_events_total",
    "apiserver_watch_events_sizes_sum",
    "apiserver_longrunning_requests",
    "apiserver_terminated_watchers_total",
    "process_cpu_seconds_total",
)
Sample = tuple[str, tuple[tuple[str, str], ...]]


def parse_metrics(text: str) -> dict[Sample, float]:
    out: dict[Sample, float] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        name, _, rest = line.partition("{")
        if not rest:
            name, _, value = line.partition(" ")
            labels = ""
        else:
            labels, _, value = rest.rpartition("} ")
        if name not in FAMILIES:
            continue
        out[(name, tuple(sorted(LABEL.findall(labels))))] = float(value.split()[0])
    return out


def request_key(labels: dict[str, str]) -> str:
    resource = labels.get("resource") or labels.get("subresource") or "-"
    sub = labels.get("subresource") if labels.get("resource") else ""
    return f"{labels.get('verb', '?')} {resource}{'/' + sub if sub else ''}"


def metrics_delta(
    before: dict[Sample, float], after: dict[Sample, float], baseline: dict[Sample, float] | None = None
) -> dict[str, Any]:
    """Per ``VERB resource[/subresource]``: requests, seconds, response and request bytes; watch
    events sent and their bytes per resource; watches open after, beyond those of ``baseline``
    (the server's own, before the bench's client and operator)."""
    requests: dict[str, dict[str, float]] = {}
    watch_events: dict[str, dict[str, float]] = {}
    terminated: Counter[str] = Counter()
    column = {
        "apiserver_request_total": "requests",
        "apiserver_request_duration_seconds_sum": "seconds",
        "apiserver_response_sizes_sum": "response_bytes",
        "apiserver_request_body_size_bytes_sum": "request_bytes",
    }
    for (name, labels_t), value in after.items():
        labels = dict(labels_t)
        if name == "apiserver_longrunning_requests":
            continue
        delta = value - before.get((name, labels_t), 0.0)
        if not delta:
            continue
        if name in column:
            if name == "apiserver_request_body_size_bytes_sum":
                key = f"{labels.get('verb', '?')} {labels.get('resource', '?')}"
            else:
                key = request_key(labels)
            requests.setdefault(key, {})[column[name]] = requests.setdefault(key, {}).get(column[name], 0.0) + delta
        elif name == "apiserver_terminated_watchers_total":
            terminated[labels.get("resource", "?")] += int(delta)
        elif name in ("apiserver_watch_events_total", "apiserver_watch_events_sizes_sum"):
            what = "events" if name.endswith("total") else "bytes"
            entry = watch_events.setdefault(labels.get("resource", "?"), {})
            entry[what] = entry.get(what, 0.0) + delta
    opened = watches_open(after) - watches_open(baseline or {})
    return {
        "requests": requests,
        "watch_events": watch_events,
        "watches_open": dict(opened),
        "watchers_terminated": dict(terminated),
    }


def watches_open(metrics: dict[Sample, float]) -> Counter[str]:
    """Long-running watches open now, by resource."""
    out: Counter[str] = Counter()
    for (name, labels_t), value in metrics.items():
        labels = dict(labels_t)
        if name == "apiserver_longrunning_requests" and labels.get("verb") == "WATCH" and value:
            out[labels.get("resource", "?")] += int(value)
    return out


# ----- servers -----


class RealServer:
    """etcd and kube-apiserver from a folder of binaries, started empty by ``real-apiserver.sh``."""

    def __init__(self, assets: str, script: str, workdir: str, port: int, audit_namespaces: list[str] | None) -> None:
        self.state = tempfile.mkdtemp(prefix="state-", dir=workdir)
        home = os.path.join(self.state, "home")
        os.makedirs(os.path.join(home, "bin"))
        for binary in ("kube-apiserver", "etcd"):
            os.symlink(os.path.join(assets, binary), os.path.join(home, "bin", binary))
        self.port = port or free_port()
        self.kubeconfig = os.path.join(self.state, "kubeconfig")
        self.script = script
        self.env = dict(
            os.environ, REALK8S_HOME=home, REALK8S_STATE=self.state, REALK8S_PORT=str(self.port),
            REALK8S_ETCD_PORT=str(free_port()),
        )  # fmt: skip
        self.audit_log: str | None = None
        if audit_namespaces is not None:
            policy = os.path.join(self.state, "audit-policy.yaml")
            with open(policy, "w") as handle:
                handle.write(AUDIT_POLICY.format(namespaces=json.dumps(audit_namespaces)))
            self.audit_log = os.path.join(self.state, "audit.log")
            self.env["REALK8S_EXTRA_ARGS"] = (
                f"{os.environ.get('REALK8S_EXTRA_ARGS', '')} --audit-policy-file={policy} "
                f"--audit-log-path={self.audit_log} --audit-log-mode=batch"
            )
        subprocess.run([script, "start", self.kubeconfig], env=self.env, check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(self.state, "pids")) as handle:
            self.pids = dict(line.split() for line in handle if line.strip())
        self.apiserver = int(self.pids["kube-apiserver"])
        self.etcd = int(self.pids["etcd"])
        config = Config.from_kubeconfig(self.kubeconfig)
        self.http = httpx.Client(base_url=config.server, verify=config.ssl_context(), timeout=60)

    def cpu(self) -> dict[str, float]:
        return {"apiserver": proc_cpu(self.apiserver), "etcd": proc_cpu(self.etcd)}

    def memory(self) -> dict[str, float]:
        return {
            "apiserver_rss_mib": proc_status(self.apiserver, "VmRSS") / 2**20,
            "apiserver_hwm_mib": proc_status(self.apiserver, "VmHWM") / 2**20,
            "etcd_rss_mib": proc_status(self.etcd, "VmRSS") / 2**20,
        }

    def metrics(self) -> dict[Sample, float]:
        answer = self.http.get("/metrics")
        answer.raise_for_status()
        return parse_metrics(answer.text)

    def stop(self) -> None:
        self.http.close()
        subprocess.run([self.script, "stop"], env=self.env, check=False, stdout=subprocess.DEVNULL)
        log = os.path.join(self.state, "apiserver.log")
        if os.path.exists(log):
            shutil.copy(log, f"{self.state}-apiserver.log")
        shutil.rmtree(self.state, ignore_errors=True)


class EmbeddedServer:
    """The fallback: ``bench/apiserver.py`` (no /metrics, no etcd)."""

    def __init__(self, workdir: str) -> None:
        self.inner = ServerProcess(tempfile.mkdtemp(prefix="embedded-", dir=workdir), tls=True)
        self.kubeconfig = self.inner.kubeconfig
        self.port = int(self.inner.url.rsplit(":", 1)[1])
        self.audit_log = None

    def cpu(self) -> dict[str, float]:
        return {"apiserver": proc_cpu(self.inner.popen.pid)}

    def memory(self) -> dict[str, float]:
        return {
            "apiserver_rss_mib": proc_status(self.inner.popen.pid, "VmRSS") / 2**20,
            "apiserver_hwm_mib": proc_status(self.inner.popen.pid, "VmHWM") / 2**20,
        }

    def metrics(self) -> dict[Sample, float]:
        return {}

    def stop(self) -> None:
        self.inner.stop()


def real_assets(version: str) -> tuple[str, str] | str:
    """(assets folder, real-apiserver.sh), or why there are none."""
    script = os.path.join(SHARED, "kube", "real-apiserver.sh")
    if not os.path.exists(script):
        return f"no {script}"
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        tool = os.path.join(SHARED, "kube", "assets")
        if not os.path.exists(tool):
            return f"no $KUBEBUILDER_ASSETS and no {tool}"
        found = subprocess.run([tool, version], capture_output=True, text=True)
        if found.returncode != 0:
            return f"{tool} {version}: {found.stderr.strip()}"
        assets = found.stdout.strip()
    if not all(os.path.exists(os.path.join(assets, b)) for b in ("kube-apiserver", "etcd")):
        return f"no kube-apiserver and etcd in {assets}"
    return assets, script


# ----- operators -----


def unpack_binary(path: str) -> str:
    """The binary to run: ``path`` itself, or a ``.gz`` unpacked once into a cache folder."""
    if not path.endswith(".gz"):
        return path
    with open(path, "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:16]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "engine-bench")
    target = os.path.join(cache, f"{os.path.basename(path)[:-3]}-{digest}")
    if not os.path.exists(target):
        os.makedirs(cache, exist_ok=True)
        tmp = f"{target}.{os.getpid()}.tmp"
        with gzip.open(path, "rb") as source, open(tmp, "wb") as out:
            shutil.copyfileobj(source, out)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    return target


class Operator:
    """One operator process: a Python operator (runs counted over SIGUSR1) or a binary (runs
    counted from its reconcile log)."""

    def __init__(
        self, name: str, binary: str | None, kubeconfig: str, namespace: str, workdir: str, args: argparse.Namespace
    ) -> None:
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}-{namespace}.log")
        self.runs_path = os.path.join(workdir, f"{name}-{namespace}.runs")
        self.stats_path = os.path.join(workdir, f"{name}-{namespace}.stats.json")
        env = child_env()
        env.update(KUBECONFIG=kubeconfig, BENCH_NAMESPACE=namespace)
        if binary is not None:
            env["BENCH_RECONCILE_LOG"] = self.runs_path
            command = [binary]
        else:
            command = [
                sys.executable, os.path.join(HERE, "operators", f"{name}_op.py"), "--kubeconfig", kubeconfig,
                "--namespace", namespace, "--stats", self.stats_path, "--workers", str(args.workers),
            ]  # fmt: skip
        self.log = open(self.log_path, "w")  # noqa: SIM115
        self.started = time.perf_counter()
        self.popen = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.proc = psutil.Process(self.popen.pid)
        self.binary = binary is not None
        self.sequence = 0
        self.ports_seen: set[int] = set()
        self.server_port = 0

    def cpu(self) -> float:
        return proc_cpu(self.popen.pid)

    def rss(self) -> int:
        return proc_status(self.popen.pid, "VmRSS")

    def hwm(self) -> int:
        return proc_status(self.popen.pid, "VmHWM")

    def connections(self) -> int:
        """Established TCP connections to the server now (their local ports are remembered)."""
        try:
            conns = [c for c in self.proc.net_connections("tcp") if c.raddr and c.raddr.port == self.server_port]
        except psutil.Error:
            return 0
        established = [c for c in conns if c.status == psutil.CONN_ESTABLISHED]
        self.ports_seen.update(c.laddr.port for c in established)
        return len(established)

    async def runs(self) -> int:
        if self.binary:
            try:
                with open(self.runs_path, "rb") as handle:
                    return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 20), b""))
            except OSError:
                return 0
        self.sequence += 1
        self.popen.send_signal(signal.SIGUSR1)
        with trio.fail_after(30):
            while True:
                try:
                    with open(self.stats_path) as handle:
                        data = json.load(handle)
                    if data["sequence"] >= self.sequence:
                        self.sequence = data["sequence"]
                        return int(data["runs_total"])
                except (OSError, ValueError):
                    pass
                await trio.sleep(0.01)

    async def terminate(self, timeout: float = 60.0) -> float | None:
        start = time.perf_counter()
        self.popen.send_signal(signal.SIGTERM)
        with trio.move_on_after(timeout):
            while self.popen.poll() is None:
                await trio.sleep(0.01)
            return time.perf_counter() - start
        self.popen.kill()
        self.popen.wait()
        return None

    def close(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self.log.close()


# ----- one operator on its own server -----


def crd_for(group: str) -> dict[str, Any]:
    crd = copy.deepcopy(CRD)
    crd["metadata"]["name"] = f"widgets.{group}"
    crd["spec"]["group"] = group
    return crd


class Phase:
    """Snapshots before a phase, and the figures after it."""

    def __init__(self, server: Any, op: Operator | None, baseline: dict[Sample, float]) -> None:
        self.server = server
        self.baseline = baseline
        self.op = op
        self.metrics = server.metrics()
        self.server_cpu = server.cpu()
        self.op_cpu = op.cpu() if op else 0.0
        self.start = time.perf_counter()

    async def finish(self, changes: int, runs0: int | None = None) -> dict[str, Any]:
        await trio.sleep(SETTLE)
        server_cpu = self.server.cpu()
        out: dict[str, Any] = {
            "changes": changes,
            "server_cpu_s": {k: v - self.server_cpu[k] for k, v in server_cpu.items()},
            "server_memory": self.server.memory(),
            "server": metrics_delta(self.metrics, self.server.metrics(), self.baseline),
        }
        if self.op is not None:
            cpu = self.op.cpu() - self.op_cpu
            out.update(
                cpu_s=cpu, cpu_ms_per_change=cpu * 1000 / changes, rss_mib=self.op.rss() / 2**20,
                connections=self.op.connections(),
            )  # fmt: skip
            if runs0 is not None:
                out["handler_runs"] = await self.op.runs() - runs0
        return out


async def run_operator(
    name: str, n: int, workdir: str, assets: tuple[str, str] | None, args: argparse.Namespace
) -> dict[str, Any]:
    binary = unpack_binary(args.client_go) if name == BINARY else None
    group = args.client_go_group if binary else PYTHON_GROUP
    namespace = f"bench-{name}-{n}-{secrets.token_hex(3)}"
    if assets is not None:
        server: Any = await trio.to_thread.run_sync(
            lambda: RealServer(*assets, workdir, args.port, [namespace] if args.audit else None)
        )
    else:
        server = EmbeddedServer(workdir)
    result: dict[str, Any] = {"operator": name, "namespace": namespace, "n": n, "group": group}
    result["baseline"] = server.metrics()
    op: Operator | None = None
    try:
        config = Config.from_kubeconfig(server.kubeconfig)
        async with Client(config, user_agent=DRIVER_AGENT, timeout=120) as client:
            await install_crds(client, [crd_for(group)])
            widgets = await client.resource(f"{group}/v1", "Widget")
            namespaces = await client.resource("v1", "Namespace")
            await client.create(namespaces, {"metadata": {"name": namespace}})
            names = [f"w-{i:06d}" for i in range(n)]
            observer = Observer(client, widgets, namespace)
            async with trio.open_nursery() as nursery:
                await nursery.start(observer.run)
                phases = start_phase if args.start else change_phases
                op = await phases(result, server, client, widgets, observer, names, workdir, binary, nursery, args)
                result["peak_rss_mib"] = op.hwm() / 2**20
                result["connections_opened"] = len(op.ports_seen)
                result["sigterm_to_exit_s"] = await op.terminate()
                nursery.cancel_scope.cancel()
        if server.audit_log is not None:
            await trio.sleep(2)
            result["audit"] = read_audit(server.audit_log, namespace)
    finally:
        result.pop("baseline", None)
        if op is not None:
            op.close()
        await trio.to_thread.run_sync(server.stop)
    return result


def watch_operator(op: Operator, nursery: trio.Nursery) -> None:
    async def sample() -> None:
        while True:
            await trio.to_thread.run_sync(op.connections)
            await trio.sleep(0.5)

    async def exited() -> None:
        while op.popen.poll() is None:
            await trio.sleep(0.1)
        if op.popen.returncode not in (0, -signal.SIGTERM):
            raise RuntimeError(f"{op.name} exited with {op.popen.returncode}; see {op.log_path}")

    nursery.start_soon(sample)
    nursery.start_soon(exited)


async def change_phases(
    result: dict[str, Any], server: Any, client: Client, widgets: Resource, observer: Observer,
    names: list[str], workdir: str, binary: str | None, nursery: trio.Nursery, args: argparse.Namespace,
) -> Operator:  # fmt: skip
    namespace = result["namespace"]
    op = Operator(result["operator"], binary, server.kubeconfig, namespace, workdir, args)
    op.server_port = server.port
    print(f"  {op.name}: pid {op.popen.pid}, namespace {namespace}", flush=True)
    watch_operator(op, nursery)
    await client.create(widgets, {"metadata": {"name": BURST}, "spec": {"n": 0}}, namespace=namespace)
    ready = await observer.wait(observer.converged([BURST], 0), args.timeout)
    if ready is None:
        raise RuntimeError(f"{op.name} did not reconcile its first object; see {op.log_path}")
    result["startup_s"] = ready - op.started
    await trio.sleep(2 * SETTLE)
    result["rss_started_mib"] = op.rss() / 2**20

    async def create(i: int) -> None:
        await client.create(widgets, {"metadata": {"name": names[i]}, "spec": {"n": 1}}, namespace=namespace)

    async def bump(i: int) -> None:
        await client.patch(widgets, names[i], {"spec": {"n": 2}}, namespace=namespace)

    n = len(names)
    for phase, work, target in (("A", create, 1), ("B", bump, 2)):
        runs0 = await op.runs()
        snap = await trio.to_thread.run_sync(lambda: Phase(server, op, result["baseline"]))
        await fan_out(work, n, args.concurrency)
        converged = await observer.wait(observer.converged(names, target), args.timeout)
        if converged is None:
            raise RuntimeError(f"{op.name} did not converge in phase {phase}; see {op.log_path}")
        result[phase] = await snap.finish(n, runs0)
        result[phase]["convergence_s"] = converged - snap.start
        print(f"    {phase}: {summary(result[phase])}", flush=True)
    result["memory_per_object_kib"] = (result["B"]["rss_mib"] - result["rss_started_mib"]) * 1024 / n
    return op


async def start_phase(
    result: dict[str, Any], server: Any, client: Client, widgets: Resource, observer: Observer,
    names: list[str], workdir: str, binary: str | None, nursery: trio.Nursery, args: argparse.Namespace,
) -> Operator:  # fmt: skip
    namespace = result["namespace"]

    async def create(i: int) -> None:
        await client.create(widgets, {"metadata": {"name": names[i]}, "spec": {"n": 1}}, namespace=namespace)

    before = time.perf_counter()
    await fan_out(create, len(names), args.concurrency)
    result["create_s"] = time.perf_counter() - before
    result["server_memory_before"] = server.memory()
    await trio.sleep(2 * SETTLE)
    snap = await trio.to_thread.run_sync(lambda: Phase(server, None, result["baseline"]))
    op = Operator(result["operator"], binary, server.kubeconfig, namespace, workdir, args)
    op.server_port = server.port
    print(f"  {op.name}: pid {op.popen.pid}, namespace {namespace}, {len(names):,} objects exist", flush=True)
    watch_operator(op, nursery)
    converged = await observer.wait(observer.converged(names, 1), args.timeout)
    if converged is None:
        raise RuntimeError(f"{op.name} did not reconcile all objects; see {op.log_path}")
    first = min(since for n, observed, since in observer.state.values() if observed == 1)
    result["S"] = await snap.finish(len(names))
    cpu = op.cpu()
    result["S"].update(
        cpu_s=cpu, cpu_ms_per_change=cpu * 1000 / len(names), rss_mib=op.rss() / 2**20,
        first_reconcile_s=first - op.started, all_reconciled_s=converged - op.started,
        handler_runs=await op.runs(),
    )  # fmt: skip
    print(f"    S: first reconcile {first - op.started:.2f} s, all {converged - op.started:.2f} s", flush=True)
    return op


def summary(phase: dict[str, Any]) -> str:
    writes = phase["server"]["requests"]
    status = sum(v.get("requests", 0) for k, v in writes.items() if k.startswith("PATCH ") and k.endswith("/status"))
    return (
        f"converged in {phase['convergence_s']:.2f} s, CPU {phase['cpu_ms_per_change']:.2f} ms/object, "
        f"server CPU {phase['server_cpu_s']['apiserver']:.2f} s, status patches {status:.0f}"
    )


# ----- audit -----

PARAM = re.compile(r"[?&]([^=&]+)=([^&]*)")


def read_audit(path: str, namespace: str) -> dict[str, int]:
    """The operator's requests (not the driver's) by user agent, verb, path pattern and query
    parameter names (values of ``watch``, ``sendInitialEvents``, ``resourceVersionMatch`` and
    ``limit`` kept)."""
    counts: Counter[str] = Counter()
    try:
        handle = open(path)  # noqa: SIM115
    except OSError:
        return {}
    with handle:
        for line in handle:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            agent = event.get("userAgent", "")
            if agent.startswith(DRIVER_AGENT) or event.get("stage") != "ResponseComplete":
                continue
            uri = event.get("requestURI", "")
            path_part, _, query = uri.partition("?")
            path_part = re.sub(rf"/namespaces/{re.escape(namespace)}", "/namespaces/NS", path_part)
            path_part = re.sub(r"/(w-\d+|burst)(/|$)", r"/NAME\2", path_part)
            kept = ("watch", "sendInitialEvents", "resourceVersionMatch", "limit", "allowWatchBookmarks")
            params = sorted(f"{k}={v}" if k in kept else k for k, v in PARAM.findall("?" + query))
            code = event.get("responseStatus", {}).get("code")
            counts[
                f"{agent.split(' ')[0]} {event.get('verb')} {path_part}{'?' + '&'.join(params) if params else ''} -> {code}"
            ] += 1
    return dict(counts)


# ----- report -----


BENCH_RESOURCES = frozenset({"widgets", "events", "namespaces", "customresourcedefinitions"})
"""Resources an operator of the bench may touch; the rest of the server's requests (its own
Leases, its informers' watches, OpenAPI) are summed in one row."""


def request_rows(runs: dict[str, dict[str, Any]], phase: str) -> list[str]:
    ops = list(runs)

    def server(op: str) -> dict[str, Any]:
        found: dict[str, Any] = (runs[op].get(phase) or {}).get("server") or {}
        return found

    def ours(key: str) -> bool:
        return key.split(" ", 1)[-1].split("/")[0] in BENCH_RESOURCES

    keys = sorted({key for op in ops for key in server(op).get("requests", {}) if ours(key)})
    head = f"{'phase ' + phase + ': requests (response KiB)':<40}" + "".join(f"{op:>20}" for op in ops)
    lines = [head, "-" * len(head)]
    for key in keys:
        cells = []
        for op in ops:
            entry = server(op).get("requests", {}).get(key, {})
            count, size = entry.get("requests"), entry.get("response_bytes")
            cell = "-" if count is None else f"{count:.0f}" + (f" ({size / 1024:.0f})" if size else "")
            if count is None and "request_bytes" in entry:
                cell = f"body {entry['request_bytes'] / 1024:.0f} KiB"
            cells.append(f"{cell:>20}")
        lines.append(f"{key:<40}" + "".join(cells))

    def others(op: str) -> str:
        entries = [v for k, v in server(op).get("requests", {}).items() if not ours(k)]
        return f"{sum(v.get('requests', 0) for v in entries):.0f}"

    def watch_events(op: str) -> str:
        found = server(op).get("watch_events", {}).get("widgets")
        return "-" if not found else f"{found.get('events', 0):.0f} ({found.get('bytes', 0) / 1024:.0f})"

    def terminated(op: str) -> str:
        return f"{sum(server(op).get('watchers_terminated', {}).values()):.0f}"

    def watches(op: str) -> str:
        return "; ".join(f"{k} {v}" for k, v in server(op).get("watches_open", {}).items()) or "-"

    for label, fn in (
        ("other requests (the server's own)", others),
        ("widget watch events sent (KiB)", watch_events),
        ("watchers closed for being slow", terminated),
        ("watches open after (not the server's)", watches),
    ):
        lines.append(f"{label:<40}" + "".join(f"{fn(op):>20}" for op in ops))
    return lines


ROWS: list[tuple[str, Callable[[dict[str, Any]], float | None], str]] = [
    ("start-up to first reconcile (s)", lambda r: r["startup_s"], "{:.2f}"),
    ("operator CPU per object, A (ms)", lambda r: r["A"]["cpu_ms_per_change"], "{:.3f}"),
    ("operator CPU per object, B (ms)", lambda r: r["B"]["cpu_ms_per_change"], "{:.3f}"),
    ("API server CPU, A (s)", lambda r: r["A"]["server_cpu_s"]["apiserver"], "{:.2f}"),
    ("API server CPU, B (s)", lambda r: r["B"]["server_cpu_s"]["apiserver"], "{:.2f}"),
    ("etcd CPU, A / B (s)", lambda r: r["A"]["server_cpu_s"]["etcd"] + r["B"]["server_cpu_s"]["etcd"], "{:.2f}"),
    ("convergence A (s)", lambda r: r["A"]["convergence_s"], "{:.2f}"),
    ("convergence B (s)", lambda r: r["B"]["convergence_s"], "{:.2f}"),
    (
        "handler runs per object, A+B",
        lambda r: (r["A"]["handler_runs"] + r["B"]["handler_runs"]) / (2 * r["n"]),
        "{:.2f}",
    ),
    ("operator peak RSS, VmHWM (MiB)", lambda r: r["peak_rss_mib"], "{:.1f}"),
    ("operator RSS after start-up (MiB)", lambda r: r["rss_started_mib"], "{:.1f}"),
    ("memory per cached object (KiB)", lambda r: r["memory_per_object_kib"], "{:.2f}"),
    ("API server peak RSS (MiB)", lambda r: r["B"]["server_memory"]["apiserver_hwm_mib"], "{:.0f}"),
    ("connections to the server (seen)", lambda r: r["connections_opened"], "{:.0f}"),
    ("SIGTERM to exit (s)", lambda r: r["sigterm_to_exit_s"], "{:.2f}"),
]
START_ROWS: list[tuple[str, Callable[[dict[str, Any]], float | None], str]] = [
    ("driver: create N (s)", lambda r: r["create_s"], "{:.1f}"),
    ("spawn to first reconcile (s)", lambda r: r["S"]["first_reconcile_s"], "{:.2f}"),
    ("spawn to all reconciled once (s)", lambda r: r["S"]["all_reconciled_s"], "{:.2f}"),
    ("operator CPU (s)", lambda r: r["S"]["cpu_s"], "{:.2f}"),
    ("operator peak RSS, VmHWM (MiB)", lambda r: r["peak_rss_mib"], "{:.1f}"),
    ("operator RSS after (MiB)", lambda r: r["S"]["rss_mib"], "{:.1f}"),
    ("API server CPU during (s)", lambda r: r["S"]["server_cpu_s"]["apiserver"], "{:.2f}"),
    ("etcd CPU during (s)", lambda r: r["S"]["server_cpu_s"].get("etcd"), "{:.2f}"),
    ("API server RSS before (MiB)", lambda r: r["server_memory_before"]["apiserver_rss_mib"], "{:.0f}"),
    ("API server peak RSS (MiB)", lambda r: r["S"]["server_memory"]["apiserver_hwm_mib"], "{:.0f}"),
    ("handler runs", lambda r: r["S"]["handler_runs"], "{:.0f}"),
]


def median_of(runs: list[dict[str, Any]], fn: Callable[[dict[str, Any]], float | None]) -> float | None:
    values = []
    for r in runs:
        try:
            v = fn(r)
        except (KeyError, TypeError):
            continue
        if v is not None:
            values.append(v)
    values.sort()
    return values[len(values) // 2] if values else None


def table(n: int, results: dict[str, list[dict[str, Any]]], start: bool) -> str:
    ops = [op for op in results if results[op]]
    lines = [f"{'N = ' + format(n, ','):<38}" + "".join(f"{op:>14}" for op in ops)]
    lines.append("-" * len(lines[0]))
    for label, fn, fmt in START_ROWS if start else ROWS:
        cells = []
        for op in ops:
            v = median_of(results[op], fn)
            cells.append(f"{'-' if v is None else fmt.format(v):>14}")
        lines.append(f"{label:<38}" + "".join(cells))
    first = {op: runs[0] for op, runs in results.items() if runs and "error" not in runs[0]}
    for phase in ("S",) if start else ("A", "B"):
        lines.append("")
        lines.extend(request_rows(first, phase))
    for op, runs in results.items():
        for r in runs:
            if "error" in r:
                lines.append(f"{op}: FAILED: {r['error']}")
            for key, count in sorted((r.get("audit") or {}).items(), key=lambda kv: -kv[1]):
                lines.append(f"  audit {op}: {count:>7}  {key}")
    return "\n".join(lines)


# ----- main -----


async def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="side-by-side-")
    found = None if args.embedded else real_assets(args.kube_version)
    assets = found if isinstance(found, tuple) else None
    where = (
        f"real kube-apiserver {args.kube_version} from {assets[0]}"
        if assets
        else f"embedded (bench/apiserver.py --tls): {found or '--embedded'}"
    )
    print(f"server: {where}, a fresh one per operator; logs in {workdir}", flush=True)
    operators = list(args.operators)
    skipped: dict[str, str] = {}
    if BINARY in operators and not os.path.exists(args.client_go):
        skipped[BINARY] = f"no binary at {args.client_go} (--client-go)"
        operators.remove(BINARY)
        print(f"  {BINARY} skipped: {skipped[BINARY]}", flush=True)
    report: dict[str, Any] = {
        "meta": {"when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "server": where, "args": vars(args),
                 "load_before": os.getloadavg(), "skipped": skipped},
        "runs": {},
    }  # fmt: skip
    for n in args.n:
        print(f"N = {n:,}", flush=True)
        results: dict[str, list[dict[str, Any]]] = {op: [] for op in operators}
        for repeat in range(args.repeat):
            order = operators if repeat % 2 == 0 else operators[::-1]
            for name in order:
                try:
                    r = await run_operator(name, n, workdir, assets, args)
                except Exception as exc:  # noqa: BLE001  reported in the table; the next operator still runs
                    r = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"  {name} failed: {exc}", flush=True)
                r["load"] = os.getloadavg()
                results[name].append(r)
        report["runs"][str(n)] = results
        print()
        print(table(n, results, args.start), flush=True)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print()
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = trio.run(run, args)
    with open(args.json, "w") as handle:
        json.dump(report, handle, indent=2, default=str)
    print(f"figures written to {args.json}")
    return 1 if any("error" in r for rs in report["runs"].values() for runs in rs.values() for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
