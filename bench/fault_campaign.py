"""Fault campaign: the bundled plugins as three ``--scale-out`` replicas on a real control plane
(kube-apiserver + etcd from ``../shared/kube``), broken underneath at random moments from a seed.

Run by hand (not a test; a long run takes hours)::

    python bench/fault_campaign.py --seed 1 --cycles 3 --version 1.36.2 [--overlap] [--stop-seconds 5,60]
        [--partition-seconds 5,30] [--bound 60] [--pairs 60] [--mirrors 20] [--json PATH]

The control plane is started with ``../shared/kube/serve`` on free ports in a state folder of
its own; the campaign then holds the two processes' command lines (read from ``/proc``) and
restarts them itself, with the same etcd data and the same ports. Each replica
(``python -m engine run --plugin bundles --plugin mirror --plugin bench.operators.run_log:plugin
--scale-out``) reaches the server through a loopback TCP proxy of its own, so its network can be
held (bytes stop both ways; connections stay open, as in a partition) and cut.

The workload: ``--pairs`` Source/Bundle pairs (each Bundle applies one ConfigMap with the
Source's revision), ``--mirrors`` labelled ConfigMaps mirrored into two namespaces, and a
``flood`` namespace; a change every ``--change-interval`` seconds (a Source's next revision, or,
one change in four, a mirrored ConfigMap's next value).

A cycle injects one fault of each kind, in an order and at moments drawn from ``--seed``:

* ``apiserver-kill``: kube-apiserver SIGKILL, restarted (etcd kept);
* ``apiserver-stop``: kube-apiserver SIGSTOP for ``--stop-seconds`` (a range), then SIGCONT;
* ``etcd-restart``: etcd SIGKILL or SIGTERM, restarted on the same data;
* ``etcd-compact``: the replicas' networks held, etcd compacted at its head revision through
  its API, kube-apiserver restarted (its watch cache starts empty at the new revision), the
  networks given back: the replicas resume their watches from before the compaction and are
  answered 410 Gone;
* ``flood``: one replica's network held while ``--flood-writes`` ConfigMap writes go through the
  server, and as many again once ``--flood-window`` s have passed (default 80: kube-apiserver's
  watch cache grows while its oldest event is younger than 75 s, and only then drops old
  events for new ones), burst after burst (at most ``--flood-bursts``) until the server
  answers a watch from before the hold with 410 Gone (``evicted`` in the fault's record;
  a cache that earlier floods made large takes more), then its connections are cut and its
  network given back: its
  ConfigMap watches (label-selected, so the flood never filled them) resume from before what
  the cache still holds and are answered 410 Gone;
* ``partition``: one replica's network held for ``--partition-seconds``;
* ``replica-term``: a replica gets SIGTERM while one of its runs is in progress, and is started
  again.

A server's fault (the first four) ends once a write goes through the server again (phase
``write-served``): after etcd stopped with SIGTERM, kube-apiserver 1.36 answers ``/readyz``
with 200 while it serves no write for 4 to 23 s more (seed 44; at most 1 s after a SIGKILL),
and the checks below count from the fault's end.

By default one fault at a time: each begins ``--gap`` s after the changes accepted before the
previous one ended converged (or ``--bound`` s passed). With ``--overlap``, ``flood`` and
``partition`` run in lanes of their own beside the others (which stay one at a time: the
server's four and ``replica-term``), no lane more than a cycle ahead of another, the faults of
a replica each on a replica no other holds; a fault still begins only once the changes
accepted before the latest end of any fault converged (or ``--bound`` s passed), so a fault
that begins never excuses a change already late. A network held by two faults at once is
given back when both ended. About 1.6 times the faults an hour (the floods are what it waits for).

Checked from outside, from the server's objects (polled every ``--poll-interval`` s) and the
replicas' JSON logs (the ``run started`` / ``run ended`` records of ``run_log``, and the engine's
own lines):

* **converge**: every change the server accepted is applied (the Bundle's ``lastAppliedRevision``
  and its ConfigMap, the mirror copies) within ``--bound`` s of the later of the change and the
  end of every fault that began before it was applied;
* **overlap**: no object runs on two replicas at once (an exited replica's open runs end at its exit);
* **regress**: no Bundle's ``lastAppliedRevision`` or ``observedGeneration``, applied ConfigMap,
  Source ``observedGeneration`` or mirror copy is ever seen older than it was seen before;
* **events**: no Warning Event (nor Bundle condition) that reports a shutdown, handover or
  revocation as a failure;
* **exit**: every replica given SIGTERM exits, with status 0, within ``--grace-period`` + 10 s
  (the event flush and the shielded status writes);
* **stuck**: after each fault every replica logs a run within ``--bound`` s, or before the next
  fault that reaches it began (every fault but a flood, partition or SIGTERM of another replica;
  a window under ``--stuck-window`` s is not judged; a replica still under another fault is
  judged after that one; a process that joined its ring after the fault ended is judged from its
  join plus ``--handover-grace``): its watches and ring came back, a hung server or network was
  noticed.

A flood or partition holds a replica that joined its ring (it waits for the join): a hold of a
process that is still starting is a start-up outage, which the engine ends after
``--startup-timeout`` by design.

Prints one JSON line per fault (with the seconds of each of its steps, ``phases``, and with
``--overlap`` the faults under way beside it, ``during``) and a report: cycles, faults of each
kind, faults per hour, the slowest convergence after each kind, how many replica windows the
stuck check judged, 410s and watch failures the replicas logged, violations, and for each change
that converged late or never (``stalls``, the first ten) a timeline from the replicas' logs: the
runs of its objects on each replica, every line naming them (reconciler errors with their
``retryIn``), and how key ranges moved and watches fared meanwhile. The work
folder (the replicas' logs) is kept when there are violations.
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import logging
import os
import random
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from engine.kube import Client, Config, GoneError  # noqa: E402

KUBE = Path(os.environ.get("CAMPAIGN_KUBE_DIR", ROOT.parent / "shared" / "kube"))
NS = "campaign"
MIRROR_NAMESPACES = ("mirror-a-1", "mirror-a-2")
FLOOD_NS = "flood"
FLOOD_OBJECTS = 40
KINDS = ("apiserver-kill", "apiserver-stop", "etcd-restart", "etcd-compact", "flood", "partition", "replica-term")
REPLICA_KINDS = ("flood", "partition", "replica-term")
SERVER_FAULTS = ("apiserver-kill", "apiserver-stop", "etcd-restart", "etcd-compact")
"""The faults of one replica (each record names it); the others reach every replica."""
CONCURRENT_KINDS = ("flood", "partition")
"""What ``--overlap`` runs beside the server's faults and ``replica-term``."""
_RING_OR_WATCH = re.compile(
    r"key space|revoked|joined ring|member lease .* gone|410 Gone|went backwards|^watch of .* failed|^informer for .* failed"
)
"""Log lines that say how key ranges moved and watches fared (see :meth:`Logs.timeline`)."""
SHUTDOWN_WORDS = re.compile(r"shut ?down|handover|handed over|revoked|cancel|leadership lost", re.I)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Proc:
    """A process of the control plane: its pid, command line and (once restarted here) Popen."""

    def __init__(self, name: str, pid: int, log: Path) -> None:
        self.name = name
        self.pid = pid
        self.log = log
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            self.argv = [a.decode() for a in f.read().split(b"\0") if a]
        self.popen: subprocess.Popen[bytes] | None = None

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return _alive(self.pid)

    def signal(self, sig: int) -> None:
        if self.alive():
            os.kill(self.pid, sig)

    async def wait_exit(self, within: float) -> bool:
        with trio.move_on_after(within):
            while self.alive():
                await trio.sleep(0.05)
            return True
        return False

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.popen = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          start_new_session=True)
        self.pid = self.popen.pid


class ControlPlane:
    """etcd + kube-apiserver, started by ``serve`` and then killed, stopped and restarted here."""

    def __init__(self, version: str, state: Path) -> None:
        self.version = version
        self.state = state
        self.port = free_port()
        self.etcd_port = free_port()
        self.kubeconfig = state / "admin.kubeconfig"
        self.etcd: Proc
        self.apiserver: Proc

    def start(self) -> None:
        env = {**os.environ, "REALK8S_STATE": str(self.state), "REALK8S_PORT": str(self.port),
               "REALK8S_ETCD_PORT": str(self.etcd_port)}
        env.pop("REALK8S_KEEP_DATA", None)
        subprocess.run([str(KUBE / "serve"), self.version, str(self.kubeconfig)], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        pids = dict(line.split() for line in (self.state / "pids").read_text().splitlines())
        self.etcd = Proc("etcd", int(pids["etcd"]), self.state / "etcd.log")
        self.apiserver = Proc("kube-apiserver", int(pids["kube-apiserver"]), self.state / "apiserver.log")
        pki = self.state / "pki"
        self.tls = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.tls.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def _get(self, url: str, body: dict[str, Any] | None = None, timeout: float = 3.0) -> tuple[int, bytes]:
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.tls if url.startswith("https") else None) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except (OSError, ValueError):
            return 0, b""

    async def wait_ready(self, within: float = 180.0) -> float:
        """Wait until ``/readyz`` answers 200; return when. Raises TimeoutError after ``within``."""
        with trio.fail_after(within):
            while True:
                code, _ = await trio.to_thread.run_sync(self._get, f"https://127.0.0.1:{self.port}/readyz")
                if code == 200:
                    return time.time()
                await trio.sleep(0.2)

    async def wait_etcd(self, within: float = 60.0) -> None:
        with trio.fail_after(within):
            while True:
                code, body = await trio.to_thread.run_sync(self._get, f"http://127.0.0.1:{self.etcd_port}/health")
                if code == 200 and b'"health":"true"' in body:
                    return
                await trio.sleep(0.2)

    async def compact(self) -> int:
        """Compact etcd at its head revision (etcd's JSON gateway); return the revision."""
        key = base64.b64encode(b"/registry").decode()
        code, body = await trio.to_thread.run_sync(
            self._get, f"http://127.0.0.1:{self.etcd_port}/v3/kv/range", {"key": key, "limit": 1, "keys_only": True})
        if code != 200:
            raise RuntimeError(f"etcd range answered {code}")
        revision = int(json.loads(body)["header"]["revision"])
        code, body = await trio.to_thread.run_sync(
            self._get, f"http://127.0.0.1:{self.etcd_port}/v3/kv/compaction", {"revision": revision, "physical": True})
        if code != 200:
            raise RuntimeError(f"etcd compaction answered {code}: {body[:200]!r}")
        return revision

    async def stop(self) -> None:
        for proc in (self.apiserver, self.etcd):
            if proc.alive():
                proc.signal(signal.SIGCONT)
                proc.signal(signal.SIGTERM)
                if not await proc.wait_exit(20):
                    proc.signal(signal.SIGKILL)
                    await proc.wait_exit(10)


class Proxy:
    """A loopback TCP proxy in front of kube-apiserver for one replica. ``hold`` stops bytes both
    ways (connections stay open, new ones are accepted and wait), ``release`` lets them flow
    again once every ``hold`` was released (faults that overlap hold the same network each for
    its own time), ``cut`` closes every connection."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.port = 0
        self._open = trio.Event()
        self._open.set()
        self._holds = 0
        self._scopes: set[trio.CancelScope] = set()

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self.port)
        await trio.serve_listeners(self._handle, listeners)

    def hold(self) -> None:
        self._holds += 1
        if self._open.is_set():
            self._open = trio.Event()

    def release(self) -> None:
        self._holds = max(self._holds - 1, 0)
        if not self._holds:
            self._open.set()

    def cut(self) -> None:
        for scope in list(self._scopes):
            scope.cancel()

    async def _gate(self) -> None:
        while not self._open.is_set():
            await self._open.wait()

    async def _pump(self, src: trio.SocketStream, dst: trio.SocketStream, scope: trio.CancelScope) -> None:
        try:
            while True:
                await self._gate()
                data = await src.receive_some(65536)
                if not data:
                    break
                await self._gate()
                await dst.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        scope.cancel()

    async def _handle(self, down: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                await self._gate()
                try:
                    up = await trio.open_tcp_stream("127.0.0.1", self.upstream)
                except OSError:
                    return
                async with up, trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, down, up, scope)
                    nursery.start_soon(self._pump, up, down, scope)
            finally:
                self._scopes.discard(scope)
        with trio.CancelScope(shield=True):
            await down.aclose()


class Replica:
    """One scale-out replica slot: its proxy, kubeconfig and the processes started in it."""

    def __init__(self, index: int, proxy: Proxy, kubeconfig: Path, workdir: Path, args: argparse.Namespace) -> None:
        self.index = index
        self.proxy = proxy
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.args = args
        self.generation = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.exits: list[dict[str, Any]] = []
        self.terminating = False
        self.lives: list[tuple[int, float]] = []
        """Each process started in this slot: its pid and when it started."""

    def start(self) -> None:
        self.generation += 1
        self.terminating = False
        lease, renew, retry = self.args.lease.split(",")
        log = self.workdir / self.log_name(self.generation)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engine", "run", "--kubeconfig", str(self.kubeconfig),
                 "--plugin", "bundles", "--plugin", "mirror", "--plugin", "bench.operators.run_log:plugin",
                 "--scale-out", "--leader-election-id", "campaign", "--leader-election-namespace", NS,
                 "--leader-elect-lease-duration", lease, "--leader-elect-renew-deadline", renew,
                 "--leader-elect-retry-period", retry, "--scale-out-handover-grace", str(self.args.handover_grace),
                 "--grace-period", str(self.args.grace_period), "--webhook-bind-address", "0",
                 "--progress", "never", "--log-format", "json", "--log-level", "info"],
                cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            )
        self.lives.append((self.proc.pid, time.time()))

    def log_name(self, generation: int) -> str:
        """The log file of the process started ``generation``-th in this slot (from 1)."""
        return f"replica-{self.index}-{generation}.log"

    async def terminate(self) -> dict[str, Any]:
        """SIGTERM; wait for the exit (SIGKILL after twice the bound); what happened."""
        assert self.proc is not None
        proc = self.proc
        sent = time.time()
        self.terminating = True
        proc.send_signal(signal.SIGTERM)
        bound = self.args.grace_period + 10
        with trio.move_on_after(2 * bound):
            while proc.poll() is None:
                await trio.sleep(0.05)
        exited = time.time()
        killed = proc.poll() is None
        if killed:
            proc.kill()
            await trio.to_thread.run_sync(proc.wait)
            exited = time.time()
        record = {"replica": self.index, "pid": proc.pid, "seconds": round(exited - sent, 2),
                  "code": proc.returncode, "killed": killed, "at": exited}
        self.exits.append(record)
        return record


class Logs:
    """The replicas' JSON logs, read again as they grow."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._offsets: dict[Path, int] = {}
        self.records: list[dict[str, Any]] = []
        self.open_runs: dict[tuple[int, str], tuple[str, str, float]] = {}
        self.intervals: dict[tuple[str, str], list[tuple[float, float, int]]] = defaultdict(list)
        self.starts: dict[int, list[float]] = defaultdict(list)
        self.joined_at: dict[str, float] = {}
        """When the replica writing each log file first joined its ring."""
        self.last_error: dict[str, str] = {}
        """The last error line of each log file."""
        self.noted: list[dict[str, Any]] = []
        self.ended: list[dict[str, Any]] = []
        """Every ``run ended`` record, with its ``started`` time (for :meth:`timeline`)."""

    def refresh(self) -> None:
        for path in sorted(self.workdir.glob("replica-*.log")):
            offset = self._offsets.get(path, 0)
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self._offsets[path] = offset + end
            for line in data[:end].splitlines():
                try:
                    record = json.loads(line)
                except ValueError:
                    self.noted.append({"file": path.name, "line": line[:300].decode(errors="replace")})
                    continue
                record["_file"] = path.name
                self._take(record)

    def _take(self, r: dict[str, Any]) -> None:
        msg = r.get("msg", "")
        if r.get("level") in ("error", "critical"):
            self.last_error[r.get("_file", "")] = str(msg)
        if str(msg).startswith(("joined ring", "rejoined ring")):
            self.joined_at.setdefault(r.get("_file", ""), float(r["ts"]))
        if msg == "run started":
            self.open_runs[(r["pid"], r["reconcileID"])] = (r["controller"], r["object"], r["ts"])
            self.starts[r["pid"]].append(r["ts"])
        elif msg == "run ended":
            opened = self.open_runs.pop((r["pid"], r["reconcileID"]), None)
            if opened is not None:
                controller, obj, start = opened
                self.intervals[(controller, obj)].append((start, r["ts"], r["pid"]))
                self.ended.append({**r, "started": start})
            if r.get("outcome") in ("error", "terminal_error", "deadline"):
                self.records.append(r)
        else:
            self.records.append(r)

    def timeline(self, objects: set[str], since: float, until: float, *, limit: int = 200) -> list[str]:
        """What the replicas' logs say between ``since`` and ``until`` about ``objects`` (their
        runs, with outcome and cause, and every engine line naming one of them) and about the
        ring and the watches (key ranges gained, released or revoked, rejoins, relists, failed
        watches and informers): one line each, in time order, at most ``limit``. What a
        ``converge`` violation is reported with, so that a stall can be read from the report
        after its logs are gone."""
        lines: list[tuple[float, str]] = []
        for r in self.ended:
            if r.get("object") in objects and r["ts"] >= since and r["started"] <= until:
                lines.append((float(r["started"]), f"{r['_file']} run {r.get('controller')} {r['object']} "
                              f"{r['started']:.3f}..{r['ts']:.3f} {r.get('outcome')} {r.get('cause') or ''}".rstrip()))
        for (pid, _), (controller, obj, start) in self.open_runs.items():
            if obj in objects and since <= start <= until:
                lines.append((float(start), f"pid {pid} run {controller} {obj} {start:.3f}.. (no end logged)"))
        for r in self.records:
            ts = float(r.get("ts", 0))
            if not since <= ts <= until or r.get("msg") == "run ended":
                continue
            msg = str(r.get("msg", ""))
            if r.get("object") in objects or _RING_OR_WATCH.search(msg):
                extra = f" {r['object']}" if r.get("object") else ""
                retry = f" retryIn={r['retryIn']}" if "retryIn" in r else ""
                lines.append((ts, f"{r.get('_file', '')} {ts:.3f} {msg[:160]}{extra}{retry}"))
        lines.sort(key=lambda item: item[0])
        return [text for _, text in lines[:limit]]

    def joined(self, file: str) -> bool:
        """Whether the replica writing ``file`` joined its ring."""
        return file in self.joined_at

    def running(self, pid: int) -> int:
        return sum(1 for (p, _) in self.open_runs if p == pid)

    def overlaps(self, exited: dict[int, float]) -> list[str]:
        intervals = {k: list(v) for k, v in self.intervals.items()}
        for (pid, _), (controller, obj, start) in self.open_runs.items():
            intervals.setdefault((controller, obj), []).append((start, exited.get(pid, float("inf")), pid))
        found = []
        for (controller, obj), runs in intervals.items():
            runs.sort()
            latest_end, latest_pid = -1.0, -1
            for start, end, pid in runs:
                if pid != latest_pid and start < latest_end:
                    found.append(f"{controller} {obj}: pid {pid} started at {start:.3f} while pid {latest_pid} "
                                 f"ran it until {latest_end:.3f}")
                if end > latest_end:
                    latest_end, latest_pid = end, pid
        return found


PROBE_SECONDS = 2.0
"""How long a flood waits for the server to answer its probe watch with 410 Gone."""

STALLS_REPORTED = 10
"""Late or unconverged changes whose timelines the report carries (the first ones)."""


def _objects_of(change: dict[str, Any]) -> set[str]:
    """The run-log names of the objects whose runs apply ``change``: a Source's revision goes
    through its Bundle (and the Source's own status), a mirrored value through its ConfigMap."""
    if change["what"] == "bundle":
        i = change["i"]
        return {f"Bundle.bundles.engine.dev/{NS}/b-{i:03d}", f"Source.bundles.engine.dev/{NS}/s-{i:03d}"}
    return {f"ConfigMap/{NS}/m-{change['i']:03d}"}


def _reaches(fault: dict[str, Any], replica: int) -> bool:
    """Whether ``fault`` reaches replica ``replica``: a replica's fault only its own."""
    return fault["kind"] not in REPLICA_KINDS or fault.get("replica") in (None, replica)


def _revision(text: Any) -> int:
    return int(str(text)[1:]) if isinstance(text, str) and text[:1] == "r" and text[1:].isdigit() else 0


def _artifact(i: int, n: int) -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"applied-{i:03d}"},
             "data": {"revision": f"r{n}"}}]


class Phases:
    """The seconds each step of a fault took, in order (a step seen twice adds up)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.time()

    def mark(self, name: str) -> None:
        now = time.time()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now - self._last, 2)
        self._last = now


class Campaign:
    def __init__(self, args: argparse.Namespace, plane: ControlPlane, workdir: Path) -> None:
        self.args = args
        self.plane = plane
        self.workdir = workdir
        self.rng = random.Random(args.seed)
        self.logs = Logs(workdir)
        self.replicas: list[Replica] = []
        self.faults: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.changes: list[dict[str, Any]] = []
        self.source_revision = [1] * args.pairs
        self.mirror_value = [1] * args.mirrors
        self.seen: dict[str, int] = {}
        self.poll_failures = 0
        self.writes_failed = 0
        self.probes = 0
        self.stop_changes = False
        self.active: list[dict[str, Any]] = []
        """The faults under way (their records so far)."""
        self.last_end = 0.0
        """When the latest fault to end ended."""
        self.busy: set[int] = set()
        """The replicas a fault of a replica holds (``--overlap``)."""
        self.stuck_windows = 0

    # --- setup ---

    async def setup(self, client: Client, nursery: trio.Nursery) -> None:
        admin = yaml.safe_load(self.plane.kubeconfig.read_text())
        for i in range(3):
            proxy = Proxy(self.plane.port)
            await nursery.start(proxy.serve)
            config = json.loads(json.dumps(admin))
            config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
            path = self.workdir / f"replica-{i}.kubeconfig"
            path.write_text(yaml.safe_dump(config))
            path.chmod(0o600)
            self.replicas.append(Replica(i, proxy, path, self.workdir, self.args))
        ns = await client.resource("v1", "Namespace")
        for name, labels in [(NS, {}), (FLOOD_NS, {}), *[(m, {"team": "a"}) for m in MIRROR_NAMESPACES]]:
            await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
        self.replicas[0].start()
        with trio.fail_after(120):
            while True:
                try:
                    await client.resource("bundles.engine.dev/v1alpha1", "Bundle")
                    await client.resource("bundles.engine.dev/v1alpha1", "Source")
                    break
                except Exception:
                    await trio.sleep(0.5)
        for replica in self.replicas[1:]:
            replica.start()
        with trio.fail_after(300):
            while not all(self.logs.joined(r.log_name(r.generation)) for r in self.replicas):
                await trio.sleep(0.5)
                self.logs.refresh()
        self.sources = await client.resource("bundles.engine.dev/v1alpha1", "Source")
        self.bundles = await client.resource("bundles.engine.dev/v1alpha1", "Bundle")
        self.configmaps = await client.resource("v1", "ConfigMap")
        self.events = await client.resource("v1", "Event")
        self.leases = await client.resource("coordination.k8s.io/v1", "Lease")
        await client.create(self.leases, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                          "metadata": {"name": "probe", "namespace": FLOOD_NS}, "spec": {}})
        for i in range(self.args.pairs):
            await client.create(self.sources, {
                "apiVersion": "bundles.engine.dev/v1alpha1", "kind": "Source",
                "metadata": {"name": f"s-{i:03d}", "namespace": NS},
                "spec": {"revision": "r1", "artifact": _artifact(i, 1)}})
            await client.create(self.bundles, {
                "apiVersion": "bundles.engine.dev/v1alpha1", "kind": "Bundle",
                "metadata": {"name": f"b-{i:03d}", "namespace": NS},
                "spec": {"sourceRef": {"name": f"s-{i:03d}"}, "interval": "10m", "timeout": "1m",
                         "healthCheckWait": "0s"}})
        for j in range(self.args.mirrors):
            await client.create(self.configmaps, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"m-{j:03d}", "namespace": NS, "labels": {"mirror.engine.dev/enabled": "true"},
                             "annotations": {"mirror.engine.dev/namespace-selector": "team=a"}},
                "data": {"v": "1"}})
        for k in range(FLOOD_OBJECTS):
            await client.create(self.configmaps, {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": f"f-{k:03d}", "namespace": FLOOD_NS},
                                                  "data": {"n": "0"}})
        now = time.time()
        for i in range(self.args.pairs):
            self.changes.append({"what": "bundle", "i": i, "n": 1, "at": now, "done": None})
        for j in range(self.args.mirrors):
            self.changes.append({"what": "mirror", "i": j, "n": 1, "at": now, "done": None})

    # --- the workload and what the server shows ---

    async def changer(self) -> None:
        count = 0
        while not self.stop_changes:
            await trio.sleep(self.args.change_interval)
            count += 1
            if count % 4 == 0 and self.args.mirrors:
                j = self.rng.randrange(self.args.mirrors)
                self.mirror_value[j] += 1
                n = self.mirror_value[j]
                write: Callable[[], Awaitable[Any]] = functools.partial(
                    self.client.patch, self.configmaps, f"m-{j:03d}", {"data": {"v": str(n)}}, namespace=NS, decode=False)
                change = {"what": "mirror", "i": j, "n": n}
            else:
                i = self.rng.randrange(self.args.pairs)
                self.source_revision[i] += 1
                n = self.source_revision[i]
                write = functools.partial(
                    self.client.patch, self.sources, f"s-{i:03d}",
                    {"spec": {"revision": f"r{n}", "artifact": _artifact(i, n)}}, namespace=NS, decode=False)
                change = {"what": "bundle", "i": i, "n": n}
            ok = False
            with trio.move_on_after(10):
                try:
                    await write()
                    ok = True
                except Exception:
                    pass
            if ok:
                self.changes.append({**change, "at": time.time(), "done": None})
            else:
                self.writes_failed += 1

    def _monotonic(self, key: str, value: int, now: float) -> None:
        before = self.seen.get(key, 0)
        if value < before:
            self.violations.append(f"regress: {key} went from {before} back to {value} at {now:.3f}")
        else:
            self.seen[key] = value

    async def poll_once(self) -> bool:
        with trio.move_on_after(10):
            try:
                bundles = (await self.client.list_all(self.bundles, namespace=NS)).items
                sources = (await self.client.list_all(self.sources, namespace=NS)).items
                cms = (await self.client.list_all(self.configmaps, namespace=NS)).items
                copies = (await self.client.list_all(self.configmaps, label_selector="mirror.engine.dev/source")).items
            except Exception:
                self.poll_failures += 1
                return False
            now = time.time()
            applied: dict[int, int] = {}
            last_applied: dict[int, int] = {}
            for b in bundles:
                i = int(b["metadata"]["name"][2:])
                status = b.get("status") or {}
                rev = _revision(status.get("lastAppliedRevision"))
                self._monotonic(f"Bundle b-{i:03d} lastAppliedRevision", rev, now)
                self._monotonic(f"Bundle b-{i:03d} observedGeneration", int(status.get("observedGeneration") or 0), now)
                for c in status.get("conditions") or ():
                    if c.get("status") != "True" and SHUTDOWN_WORDS.search(str(c.get("message", ""))):
                        self.violations.append(f"events: Bundle b-{i:03d} condition {c.get('type')} "
                                               f"{c.get('reason')}: {c.get('message')}")
                ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
                last_applied[i] = rev if ready else 0
            for s in sources:
                gen = int((s.get("status") or {}).get("observedGeneration") or 0)
                self._monotonic(f"Source {s['metadata']['name']} observedGeneration", gen, now)
            for cm in cms:
                name = cm["metadata"]["name"]
                if name.startswith("applied-"):
                    applied[int(name[8:])] = rev = _revision((cm.get("data") or {}).get("revision"))
                    self._monotonic(f"ConfigMap {name} data.revision", rev, now)
            mirrored: dict[int, int] = {}
            counts: Counter[int] = Counter()
            for cm in copies:
                source = cm["metadata"]["labels"]["mirror.engine.dev/source"]
                if not source.startswith(f"{NS}.m-"):
                    continue
                j = int(source.rsplit("-", 1)[1])
                v = int((cm.get("data") or {}).get("v") or 0)
                self._monotonic(f"ConfigMap {cm['metadata']['namespace']}/{cm['metadata']['name']} data.v", v, now)
                mirrored[j] = min(mirrored.get(j, v), v)
                counts[j] += 1
            for change in self.changes:
                if change["done"] is not None:
                    continue
                i, n = change["i"], change["n"]
                if change["what"] == "bundle":
                    ok = last_applied.get(i, 0) >= n and applied.get(i, 0) >= n
                else:
                    ok = counts[i] == len(MIRROR_NAMESPACES) and mirrored.get(i, 0) >= n
                if ok:
                    change["done"] = now
            return True
        self.poll_failures += 1
        return False

    async def poller(self) -> None:
        while True:
            await self.poll_once()
            self.logs.refresh()
            self.check_alive()
            await trio.sleep(self.args.poll_interval)

    def pending(self, before: float) -> list[dict[str, Any]]:
        return [c for c in self.changes if c["done"] is None and c["at"] <= before]

    async def settle(self, since: float, within: float | None = None) -> float:
        """Wait until every change accepted before ``since`` converged, at most ``within`` s
        (default ``--bound`` s) and two polls after ``since``; the seconds since ``since``."""
        left = since + (within or self.args.bound) + 2 * self.args.poll_interval - time.time()
        with trio.move_on_after(max(left, 0.0)):
            while self.pending(since):
                await trio.sleep(0.2)
        return time.time() - since

    # --- faults ---

    async def restart_apiserver(self, sig: int, phases: Phases) -> None:
        api = self.plane.apiserver
        api.signal(signal.SIGCONT)
        api.signal(sig)
        if not await api.wait_exit(60):
            api.signal(signal.SIGKILL)
            await api.wait_exit(10)
        phases.mark("apiserver-exit")
        await trio.sleep(self.rng.uniform(0, 2))
        phases.mark("pause")
        api.start()
        await self.plane.wait_ready()
        phases.mark("apiserver-ready")

    async def fault(self, kind: str, chosen: Replica | None = None) -> dict[str, Any]:
        """Inject one fault of ``kind`` (on ``chosen``, or on a replica drawn here, if it is a
        replica's) and undo it; what it did.

        If cancelled, the fault is left where it was."""
        rng, args = self.rng, self.args
        phases = Phases()
        detail: dict[str, Any] = {"phases": phases.seconds}
        if kind in SERVER_FAULTS:
            await self._server_fault(kind, phases, detail)
            await self.wait_writable()
            phases.mark("write-served")
            return detail
        if kind == "flood":
            replica = chosen if chosen is not None else rng.choice(self.replicas)
            detail["replica"] = replica.index
            detail["waited_join"] = await self.wait_joined(replica)
            before = await self.resource_version()
            replica.proxy.hold()
            held = trio.current_time()
            phases.mark("resource-version")
            try:
                writes = await self.flood(args.flood_writes)
                phases.mark("first-burst")
                evicted = False
                if args.flood_window:
                    await trio.sleep_until(held + args.flood_window)
                    phases.mark("window")
                    for _ in range(args.flood_bursts):
                        writes += await self.flood(args.flood_writes)
                        phases.mark("burst")
                        if evicted := await self.expired(before):
                            break
                        phases.mark("probe")
                detail.update(writes=writes, evicted=evicted)
            finally:
                replica.proxy.cut()
                replica.proxy.release()
        elif kind == "partition":
            low, high = (float(x) for x in args.partition_seconds.split(","))
            replica = chosen if chosen is not None else rng.choice(self.replicas)
            detail["replica"] = replica.index
            detail["waited_join"] = await self.wait_joined(replica)
            detail["seconds"] = seconds = round(rng.uniform(low, high), 1)
            replica.proxy.hold()
            await trio.sleep(seconds)
            replica.proxy.release()
            phases.mark("held")
        elif kind == "replica-term":
            replica = chosen if chosen is not None else rng.choice(self.replicas)
            assert replica.proc is not None
            with trio.move_on_after(10):
                while True:
                    self.logs.refresh()
                    if self.logs.running(replica.proc.pid):
                        break
                    await trio.sleep(0.05)
            phases.mark("wait-run")
            detail["running"] = self.logs.running(replica.proc.pid)
            exit_ = await replica.terminate()
            phases.mark("exit")
            detail.update(replica=replica.index, exit_seconds=exit_["seconds"], code=exit_["code"])
            self.check_exit(exit_)
            await trio.sleep(rng.uniform(0, 2))
            replica.start()
            phases.mark("pause")
        return detail

    async def _server_fault(self, kind: str, phases: Phases, detail: dict[str, Any]) -> None:
        rng, args = self.rng, self.args
        if kind == "apiserver-kill":
            await self.restart_apiserver(signal.SIGKILL, phases)
        elif kind == "apiserver-stop":
            low, high = (float(x) for x in args.stop_seconds.split(","))
            detail["seconds"] = seconds = round(rng.uniform(low, high), 1)
            self.plane.apiserver.signal(signal.SIGSTOP)
            await trio.sleep(seconds)
            self.plane.apiserver.signal(signal.SIGCONT)
            phases.mark("stopped")
        elif kind == "etcd-restart":
            etcd = self.plane.etcd
            sig = rng.choice([signal.SIGKILL, signal.SIGTERM])
            detail["signal"] = signal.Signals(sig).name
            etcd.signal(sig)
            if not await etcd.wait_exit(30):
                etcd.signal(signal.SIGKILL)
                await etcd.wait_exit(10)
            phases.mark("etcd-exit")
            await trio.sleep(rng.uniform(0, 2))
            phases.mark("pause")
            etcd.start()
            await self.plane.wait_etcd()
            phases.mark("etcd-ready")
            await self.plane.wait_ready()
            phases.mark("apiserver-ready")
        elif kind == "etcd-compact":
            for r in self.replicas:
                r.proxy.hold()
            try:
                await trio.sleep(rng.uniform(1, 3))
                phases.mark("held")
                detail["revision"] = await self.plane.compact()
                phases.mark("compact")
                await self.restart_apiserver(signal.SIGKILL, phases)
            finally:
                for r in self.replicas:
                    r.proxy.release()

    async def wait_joined(self, replica: Replica) -> float:
        """Wait (at most ``--bound`` s) until ``replica``'s process joined its ring; the seconds
        waited. A hold of a replica's network is a fault of a running replica: one that begins
        while the process still starts is a start-up outage, which ends the start after
        ``--startup-timeout`` by design (as a pod's container would then be restarted)."""
        began = trio.current_time()
        with trio.move_on_after(self.args.bound):
            while True:
                self.logs.refresh()
                if self.logs.joined(replica.log_name(replica.generation)):
                    break
                await trio.sleep(0.2)
        return round(trio.current_time() - began, 1)

    async def wait_writable(self, within: float = 180.0) -> None:
        """Return once writes of a ConfigMap and of a Lease go through the API server (merge
        patches of a flood ConfigMap and of a probe Lease, each attempt given 3 s): the end of a
        server fault. ``/readyz`` answers 200 seconds before kube-apiserver serves writes again
        after an etcd restart, and each resource's storage reconnects to etcd on its own: Lease
        writes (the ring's renewals) came back 10 s after ConfigMap writes once."""
        with trio.fail_after(within):
            while True:
                self.probes += 1
                with trio.move_on_after(3):
                    try:
                        for resource, name in ((self.configmaps, "f-000"), (self.leases, "probe")):
                            await self.client.patch(resource, name, {"metadata": {"annotations": {
                                "campaign/probe": str(self.probes)}}}, namespace=FLOOD_NS, decode=False)
                        return
                    except Exception:
                        pass
                await trio.sleep(0.2)

    def check_exit(self, exit_: dict[str, Any]) -> None:
        bound = self.args.grace_period + 10
        if exit_["killed"] or exit_["seconds"] > bound or exit_["code"] != 0:
            self.violations.append(f"exit: replica {exit_['replica']} pid {exit_['pid']} exited with {exit_['code']} "
                                   f"after {exit_['seconds']} s (bound {bound} s; killed: {exit_['killed']})")

    async def resource_version(self) -> str:
        """The server's current resourceVersion (a one-item list of the flood's ConfigMaps),
        waiting out a kube-apiserver stopped by a fault beside this one (``--overlap``)."""
        high = float(self.args.stop_seconds.split(",")[1])
        with trio.fail_after(high + 30):
            listed = await self.client.list(self.configmaps, namespace=FLOOD_NS, limit=1)
        return str(listed.resource_version)

    async def expired(self, resource_version: str) -> bool:
        """Whether the server answers a ConfigMap watch from ``resource_version`` with 410 Gone
        (the watch cache no longer holds what came after it; the cache answers that at once,
        and no answer within ``PROBE_SECONDS`` s counts as held)."""
        with trio.move_on_after(PROBE_SECONDS):
            try:
                async with self.client.watch(self.configmaps, namespace=FLOOD_NS, label_selector="campaign-probe=none",
                                             resource_version=resource_version) as events:
                    async for _ in events:
                        return False
            except GoneError:
                return True
            except Exception:
                return False
        return False

    async def flood(self, writes: int) -> int:
        done = 0
        send, receive = trio.open_memory_channel[int](0)

        async def worker() -> None:
            nonlocal done
            async for k in receive:
                with trio.move_on_after(10):
                    try:
                        await self.client.patch(self.configmaps, f"f-{k % FLOOD_OBJECTS:03d}", {"data": {"n": str(k)}},
                                                namespace=FLOOD_NS, decode=False)
                        done += 1
                    except Exception:
                        pass

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(worker)
            async with send:
                for k in range(writes):
                    await send.send(k)
        return done

    def check_stuck(self, fault: dict[str, Any], exited: dict[int, float]) -> int:
        """Every replica that lived from the fault's end until ``--bound`` s after it, or until
        the next fault that reaches it began if that came first, started a run in that time
        (its watches and ring came back). A fault reaches every replica but a flood, partition
        or SIGTERM of another one. A replica that another fault still reached when this one
        ended is judged after that one instead, and a window shorter than ``--stuck-window`` s
        is not judged. A process that joined its ring after the fault ended is judged from its
        join plus ``--handover-grace`` (until then the others still own its keys); one that had
        not joined by the window's end is stuck if it was started ``--bound`` s before that end.
        Returns how many replica lives were judged."""
        end = fault["end"]
        judged = 0
        for replica in self.replicas:
            reaching = [f for f in self.faults if f is not fault and _reaches(f, replica.index)]
            if any(f["start"] < end < f["end"] for f in reaching):
                continue
            until = min([end + self.args.bound, *(f["start"] for f in reaching if f["start"] >= end)])
            if until - end < self.args.stuck_window:
                continue
            for generation, (pid, born) in enumerate(replica.lives, start=1):
                if born > end or exited.get(pid, float("inf")) < until:
                    continue
                joined = self.logs.joined_at.get(replica.log_name(generation), float("inf"))
                if joined > until:
                    if until - born >= self.args.bound:
                        judged += 1
                        self.violations.append(f"stuck: replica {replica.index} pid {pid} started at {born:.3f} "
                                               f"had not joined its ring by {until:.3f}")
                    continue
                since = max(end, joined + self.args.handover_grace)
                if until - since < self.args.stuck_window:
                    continue
                judged += 1
                if not any(since <= ts <= until for ts in self.logs.starts.get(pid, ())):
                    late = f" (it joined its ring at {joined:.3f})" if joined > end else ""
                    self.violations.append(f"stuck: replica {replica.index} pid {pid} started no run in the "
                                           f"{until - since:.1f} s after {fault['kind']} #{fault['n']} ended at "
                                           f"{end:.3f}{late}")
        return judged

    def check_alive(self) -> None:
        """A replica that exited without being told to is a violation; it is started again (as a
        pod's container would be)."""
        for replica in self.replicas:
            proc = replica.proc
            if proc is None or replica.terminating or proc.poll() is None:
                continue
            self.logs.refresh()
            last = self.logs.last_error.get(replica.log_name(replica.generation), "")
            self.violations.append(f"exit: replica {replica.index} pid {proc.pid} exited on its own with "
                                   f"{proc.returncode} at {time.time():.3f}: {last}")
            replica.exits.append({"replica": replica.index, "pid": proc.pid, "seconds": 0.0, "code": proc.returncode,
                                  "killed": False, "at": time.time(), "unasked": True})
            replica.start()

    # --- the run ---

    async def run(self) -> dict[str, Any]:
        args = self.args
        async with Client(Config.from_kubeconfig(self.plane.kubeconfig), user_agent="fault-campaign/1.0") as client:
            self.client = client
            async with trio.open_nursery() as nursery:
                await self.setup(client, nursery)
                nursery.start_soon(self.poller)
                started = time.time()
                took = await self.settle(started, within=300)
                print(json.dumps({"setup": "converged" if not self.pending(started) else "NOT converged",
                                  "seconds": round(took, 1)}), flush=True)
                nursery.start_soon(self.changer)
                kinds = Counter[str]()
                campaign_start = time.time()
                chosen = [k for k in args.kinds.split(",") if k]
                for cycle in range(0 if args.overlap else args.cycles):
                    if self.past_until():
                        break
                    for kind in self.rng.sample(chosen, len(chosen)):
                        await self.inject(cycle, kind, kinds)
                        if self.past_until():
                            break
                if args.overlap:
                    await self.overlapping(chosen, kinds)
                self.stop_changes = True
                await trio.sleep(args.change_interval + 1)
                final = time.time()
                await self.settle(final)
                await trio.sleep(self.args.poll_interval * 2)
                for replica in self.replicas:
                    self.check_exit(await replica.terminate())
                self.logs.refresh()
                exited = {e["pid"]: e["at"] for r in self.replicas for e in r.exits}
                self.stuck_windows = sum(self.check_stuck(fault, exited) for fault in self.faults)
                events = (await client.list_all(self.events)).items
                nursery.cancel_scope.cancel()
        return self.report(kinds, campaign_start, final, events)

    def past_until(self) -> bool:
        return bool(self.args.until) and time.time() > self.args.until

    async def inject(
        self, cycle: int, kind: str, kinds: Counter[str], begun: Callable[[], None] | None = None
    ) -> None:
        """One fault: a pause drawn from ``--gap``, :meth:`gate`, the fault (if it is a replica's,
        on a replica drawn here: with ``--overlap`` one that no other fault holds), then the wait
        for the changes accepted before it ended; its record is added to ``faults`` when it ends
        and printed once they converged. ``begun()`` is called as it begins.

        If cancelled, the fault is left where it was (a network held, a process stopped)."""
        gap_start = time.time()
        await trio.sleep(self.rng.uniform(*(float(x) for x in self.args.gap.split(","))))
        gap = time.time() - gap_start
        await self.gate()
        replica = None
        if self.args.overlap and kind in REPLICA_KINDS:
            replica = self.rng.choice([r for r in self.replicas if r.index not in self.busy])
            self.busy.add(replica.index)
        kinds[kind] += 1
        record: dict[str, Any] = {"cycle": cycle + 1, "kind": kind, "n": kinds[kind], "start": round(time.time(), 3)}
        self.active.append(record)
        if begun is not None:
            begun()
        try:
            detail = await self.fault(kind, replica)
        except Exception as exc:
            detail = {"error": f"{type(exc).__name__}: {exc}"}
            self.violations.append(f"fault {kind} #{kinds[kind]} could not be injected: {exc}")
        finally:
            self.active.remove(record)
            if replica is not None:
                self.busy.discard(replica.index)
        end = time.time()
        self.last_end = max(self.last_end, end)
        record.update(end=round(end, 3), fault_seconds=round(end - record["start"], 1), gap_seconds=round(gap, 1),
                      **detail)
        if self.args.overlap:
            record["during"] = [f"{f['kind']} #{f['n']}" for f in sorted([*self.faults, *self.active], key=lambda f: f["start"])
                                if f["start"] < end and f.get("end", end) > record["start"]]
        self.faults.append(record)
        record["settled_seconds"] = round(await self.settle(end), 1)
        self.logs.refresh()
        print(json.dumps(record), flush=True)

    async def gate(self) -> None:
        """Wait until every change accepted before the latest end of a fault converged, or
        ``--bound`` s (and two polls) passed since that end; again if another fault ended
        meanwhile. A fault that begins moves the deadline of every change still unconverged
        (see :meth:`deadline`): begun only past this gate, it cannot excuse a change that is
        already late. Serial faults pass it at once (each waited for its own changes).

        If cancelled, nothing is left behind."""
        while True:
            since = self.last_end
            await self.settle(since)
            if self.last_end == since:
                return

    async def overlapping(self, chosen: list[str], kinds: Counter[str]) -> None:
        """``--cycles`` cycles of ``--overlap`` in lanes side by side: the faults of the server
        and ``replica-term`` one after the other (in an order drawn for each cycle), and a lane
        each for ``flood`` and ``partition``. A lane begins a cycle once every other lane began
        the one before (its first fault of it began: no kind runs more than a cycle ahead); every fault passes
        :meth:`gate` first, and a fault of a replica takes one no other fault of a replica holds
        (a flood's, a partition's hold and a SIGTERM never meet on one replica).

        If cancelled, the faults under way are left where they were."""
        lanes = [[k for k in chosen if k not in CONCURRENT_KINDS], *([k] for k in chosen if k in CONCURRENT_KINDS)]
        lanes = [lane for lane in lanes if lane]
        begun = [0] * len(lanes)
        progress = trio.Event()

        def moved(i: int, cycles: int) -> None:
            nonlocal progress
            begun[i] = cycles
            progress.set()
            progress = trio.Event()

        async def lane(i: int, lane_kinds: list[str]) -> None:
            try:
                for cycle in range(self.args.cycles):
                    while any(b < cycle for j, b in enumerate(begun) if j != i) and not self.past_until():
                        with trio.move_on_after(1):
                            await progress.wait()
                    if self.past_until():
                        return
                    for n, kind in enumerate(self.rng.sample(lane_kinds, len(lane_kinds))):
                        if self.past_until():
                            return
                        await self.inject(cycle, kind, kinds, functools.partial(moved, i, cycle + 1) if n == 0 else None)
            finally:
                moved(i, self.args.cycles)

        async with trio.open_nursery() as nursery:
            for i, lane_kinds in enumerate(lanes):
                nursery.start_soon(lane, i, lane_kinds)

    def deadline(self, change: dict[str, Any]) -> tuple[float, float, str]:
        """When ``change`` must have converged: ``--bound`` s after the later of the change and
        the end of each fault that began before that deadline (and before it converged), taken
        in the order they began; also the end of the last such fault and its kind."""
        bound = self.args.bound
        done = change["done"] if change["done"] is not None else float("inf")
        deadline, last_end, blamed = change["at"] + bound, change["at"], "none"
        for fault in sorted(self.faults, key=lambda f: f["start"]):
            if fault["start"] > min(deadline, done) or fault["end"] < change["at"] - bound:
                continue
            deadline = max(deadline, fault["end"] + bound)
            if fault["end"] > last_end:
                last_end, blamed = fault["end"], fault["kind"]
        return deadline, last_end, blamed

    def report(self, kinds: Counter[str], start: float, end: float, events: list[dict[str, Any]]) -> dict[str, Any]:
        args = self.args
        slowest: dict[str, float] = defaultdict(float)
        unconverged = 0
        stalls: list[dict[str, Any]] = []
        for change in self.changes:
            deadline, last_end, blamed = self.deadline(change)
            if change["done"] is None:
                unconverged += 1
                self.violations.append(f"converge: {change['what']} {change['i']} value {change['n']} (changed at "
                                       f"{change['at']:.3f}) never converged")
                stalls.append(self.stall(change, end))
                continue
            after = change["done"] - max(change["at"], last_end)
            slowest[blamed] = max(slowest[blamed], after)
            if change["done"] > deadline:
                self.violations.append(f"converge: {change['what']} {change['i']} value {change['n']} changed at "
                                       f"{change['at']:.3f} converged at {change['done']:.3f}, after the deadline "
                                       f"{deadline:.3f}")
                stalls.append(self.stall(change, end))
        exited = {e["pid"]: e["at"] for r in self.replicas for e in r.exits}
        self.violations += [f"overlap: {o}" for o in self.logs.overlaps(exited)]
        warnings: Counter[str] = Counter()
        for event in events:
            if event.get("type") != "Warning" or event.get("reason") == "KubeAPIReadyz":
                continue
            warnings[str(event.get("reason"))] += event.get("count") or 1
            if SHUTDOWN_WORDS.search(str(event.get("message", ""))):
                obj = event.get("involvedObject") or {}
                self.violations.append(f"events: Warning {event.get('reason')} on {obj.get('kind')} "
                                       f"{obj.get('namespace')}/{obj.get('name')}: {event.get('message')}")
        relists: Counter[str] = Counter()
        for r in self.logs.records:
            if "410 Gone" in str(r.get("msg", "")):
                ts = float(r.get("ts", 0))
                kind = next((f["kind"] for f in reversed(self.faults) if f["start"] <= ts <= f["end"] + 30), "none")
                relists[kind] += 1
        logged: Counter[str] = Counter()
        errors: list[str] = []
        for r in self.logs.records:
            msg = str(r.get("msg", ""))
            if "410 Gone" in msg:
                logged["watch 410 Gone (relist)"] += 1
            elif msg.startswith("watch of") and "failed" in msg:
                logged["watch failed (resumed)"] += 1
            elif "revoked" in msg:
                logged["key ranges revoked"] += 1
            elif msg.startswith("rejoined ring"):
                logged["rejoined ring"] += 1
            elif "history" in msg and "back" in msg:
                logged["history went back (relist)"] += 1
            if r.get("level") in ("error", "critical") or r.get("outcome") in ("error", "terminal_error", "deadline"):
                logged[f"{r.get('level')}: {msg[:60]}"] += 1
                if len(errors) < 40:
                    errors.append(f"{r['_file']} {r.get('ts')} {msg} {r.get('object', '')} {r.get('error', '')}")
        hours = max(end - start, 1e-9) / 3600
        return {
            "seed": args.seed, "version": args.version, "cycles": min(args.cycles, max(kinds.values(), default=0)),
            "faults": dict(kinds), "campaign_seconds": round(end - start, 1),
            "faults_per_hour": {k: round(v / hours, 1) for k, v in kinds.items()},
            "changes": len(self.changes), "changes_unconverged": unconverged, "writes_failed": self.writes_failed,
            "overlap": args.overlap, "stuck_windows_judged": self.stuck_windows,
            "bound_seconds": args.bound, "exit_bound_seconds": args.grace_period + 10,
            "slowest_convergence_after_fault": {k: round(v, 1) for k, v in sorted(slowest.items())},
            "runs": sum(len(v) for v in self.logs.intervals.values()),
            "replica_exits": [{k: v for k, v in e.items() if k != "at"} for r in self.replicas for e in r.exits],
            "watch_410_by_fault": dict(relists), "warning_events": dict(warnings), "logged": dict(logged), "error_lines": errors,
            "unparsed_log_lines": self.logs.noted[:10],
            "violations": self.violations,
            "stalls": stalls[:STALLS_REPORTED],
        }

    def stall(self, change: dict[str, Any], end: float) -> dict[str, Any]:
        """A change that converged late or never, with what the replicas' logs say about its
        objects and the ring from ``--bound`` s before it until it converged (or ``end``)."""
        objects = _objects_of(change)
        until = (change["done"] if change["done"] is not None else end) + 5
        return {"change": {k: change[k] for k in ("what", "i", "n", "at", "done")}, "objects": sorted(objects),
                "timeline": self.logs.timeline(objects, change["at"] - self.args.bound, until)}


async def main(args: argparse.Namespace) -> int:
    logging.getLogger("engine").setLevel(logging.ERROR)
    unknown = {k for k in args.kinds.split(",") if k} - set(KINDS)
    if unknown:
        print(f"error: unknown fault kinds: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="fault-campaign-"))
    workdir.mkdir(parents=True, exist_ok=True)
    state = workdir / "kube"
    plane = ControlPlane(args.version, state)
    print(json.dumps({"workdir": str(workdir), "seed": args.seed}), flush=True)
    plane.start()
    campaign = Campaign(args, plane, workdir)
    try:
        report = await campaign.run()
    finally:
        for replica in campaign.replicas:
            if replica.proc is not None and replica.proc.poll() is None:
                replica.proc.kill()
                replica.proc.wait()
        await plane.stop()
    print(json.dumps(report, indent=2), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "faults": campaign.faults,
                                               "changes": campaign.changes, "report": report}, indent=2))
    if report["violations"]:
        print(json.dumps({"logs kept": str(workdir)}), flush=True)
    elif not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if report["violations"] else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cycles", type=int, default=1, help="cycles of one fault of each kind (default 1)")
    p.add_argument("--until", type=float, default=0, help="stop after the first fault that ends past this epoch time")
    p.add_argument("--version", default="1.36.2", help="the folder of ../shared/kube to run (default 1.36.2)")
    p.add_argument("--pairs", type=int, default=60, help="Source/Bundle pairs (default 60)")
    p.add_argument("--mirrors", type=int, default=20, help="mirrored ConfigMaps (default 20, two copies each)")
    p.add_argument("--change-interval", type=float, default=1.0)
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--gap", default="2,10", help="seconds between a fault's settling and the next (a range)")
    p.add_argument("--stop-seconds", default="5,60", help="kube-apiserver SIGSTOP length (a range; default 5,60)")
    p.add_argument("--partition-seconds", default="5,30", help="a replica's network loss (a range; default 5,30)")
    p.add_argument("--flood-writes", type=int, default=1500, help="writes in each of the flood's two bursts")
    p.add_argument("--flood-window", type=float, default=80.0,
                   help="seconds from the first burst to the second (0: one burst only; default 80)")
    p.add_argument("--flood-bursts", type=int, default=6,
                   help="at most this many bursts after the window, until the cache dropped the held replica's place")
    p.add_argument("--stuck-window", type=float, default=15.0,
                   help="the shortest quiet time after a fault in which every replica must start a run (default 15 s)")
    p.add_argument("--overlap", action="store_true",
                   help="run flood and partition beside the server's faults and replica-term, each fault of a "
                        "replica on a replica of its own (default: one fault at a time)")
    p.add_argument("--kinds", default=",".join(KINDS), help="the fault kinds to inject (default: all)")
    p.add_argument("--bound", type=float, default=60.0, help="convergence bound after a fault ends (default 60 s)")
    p.add_argument("--lease", default="8,6,1", help="lease duration, renew deadline, retry period (default 8,6,1)")
    p.add_argument("--grace-period", type=float, default=5.0)
    p.add_argument("--handover-grace", type=float, default=3.0)
    p.add_argument("--workdir", help="where logs and the control plane's state go (default: a new temp folder)")
    p.add_argument("--keep", action="store_true",
                   help="keep the work folder (logs) after the run (it is always kept when there are violations)")
    p.add_argument("--json", metavar="PATH", help="also write the faults and the report here")
    return p


if __name__ == "__main__":
    sys.exit(trio.run(main, parser().parse_args()))
