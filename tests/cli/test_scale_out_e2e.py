"""``python -m engine run --scale-out``: replicas against one ``python -m engine apiserver``
process, in real time, with short lease timings.

Three replicas converge 300 ConfigMaps, each running a fair share; one is SIGKILLed and its
objects are taken over within the lease duration plus a few seconds; a fourth joins and takes
a share; one is stopped with SIGTERM and hands over with no failure and no Warning event. The
test plugin records the start and end of every run with its pid, and across all of it no two
replicas ever run one object at the same time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import pytest
import trio

from engine.kube import Client, Config

from .._e2e import ROOT, Runner, runner

LEASE, RENEW, RETRY = 4.0, 3.0, 0.5
OBJECTS = 300
NAMESPACE = "ring"

pytestmark = pytest.mark.timeout(150)


@asynccontextmanager
async def apiserver(tmp_path: Path, *, sharded_watch: bool = False) -> AsyncIterator[Path]:
    kubeconfig = tmp_path / "kc.yaml"
    gates = ["--feature-gates", "ShardedListAndWatch=true"] if sharded_watch else []
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "engine", "apiserver", "--port", "0", "--write-kubeconfig", str(kubeconfig), *gates],
        cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        buffer = b""
        with trio.fail_after(30):
            while buffer.count(b"\n") < 2:
                chunk = await proc.stdout.receive_some()
                assert chunk, "the API server exited at start-up"
                buffer += chunk
        yield kubeconfig
    finally:
        proc.send_signal(signal.SIGTERM)
        with trio.move_on_after(10):
            await proc.wait()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


class Records:
    """The run records of every replica: ``(what, pid, key, time)``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[tuple[str, int, str, float]]:
        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            what, pid, key, when = line.split()
            out.append((what, int(pid), key, float(when)))
        return out

    def keys_by_pid(self, since: float, until: float = float("inf")) -> dict[int, set[str]]:
        per: dict[int, set[str]] = defaultdict(set)
        for what, pid, key, when in self.read():
            if what == "start" and since <= when < until:
                per[pid].add(key)
        return per

    def first_start_after(self, keys: set[str], pids: set[int], since: float) -> dict[str, float]:
        first: dict[str, float] = {}
        for what, pid, key, when in self.read():
            if what == "start" and pid in pids and key in keys and when >= since and key not in first:
                first[key] = when
        return first

    def overlaps(self, killed: dict[int, float]) -> list[str]:
        """Runs of one key on two replicas at once (an unfinished run of a killed replica
        lasts until it was killed)."""
        open_runs: dict[tuple[int, str], list[float]] = defaultdict(list)
        intervals: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
        for what, pid, key, when in self.read():
            if what == "start":
                open_runs[(pid, key)].append(when)
            else:
                intervals[key].append((open_runs[(pid, key)].pop(), when, pid))
        for (pid, key), starts in open_runs.items():
            for start in starts:
                intervals[key].append((start, killed.get(pid, float("inf")), pid))
        found = []
        for key, runs in intervals.items():
            runs.sort()
            latest_end, latest_pid = -1.0, -1
            for start, end, pid in runs:
                if pid != latest_pid and start < latest_end:
                    found.append(f"{key}: pid {pid} started at {start:.3f} while pid {latest_pid} ran until {latest_end:.3f}")
                if end > latest_end:
                    latest_end, latest_pid = end, pid
        return found


async def wait_until(condition, *, within: float, what: str) -> float:  # type: ignore[no-untyped-def]
    start = time.monotonic()
    with trio.fail_after(within):
        while not condition():
            await trio.sleep(0.2)
    return time.monotonic() - start


def settled(records: Records, pids: list[int]) -> bool:
    """Over the last 2.5 s every live replica ran a fair share, and no object ran on two."""
    window = records.keys_by_pid(time.time() - 2.5)
    sets = [window.get(pid, set()) for pid in pids]
    return fair(window, pids) and sum(len(k) for k in sets) == len(set().union(*sets)) == OBJECTS


def fair(per: dict[int, set[str]], pids: list[int]) -> bool:
    counts = [len(per.get(pid, ())) for pid in pids]
    return all(OBJECTS / len(pids) * 0.5 <= c <= OBJECTS / len(pids) * 1.5 for c in counts)


@pytest.mark.parametrize("sharded_watch", [False, True], ids=["server-ignores-shardSelector", "server-filters"])
async def test_replicas_share_objects_take_over_on_crash_and_hand_over_on_sigterm(
    tmp_path: Path, sharded_watch: bool
) -> None:
    record = tmp_path / "runs.log"
    records = Records(record)
    os.environ["RING_RECORD"] = str(record)
    os.environ["RING_RUN_SECONDS"] = "1.0"
    os.environ["RING_REQUEUE_SECONDS"] = "0.5"
    os.environ["RING_WORKERS"] = "200"
    flags = [
        "--plugin", "tests.programs.ring_recorder:plugin", "--namespace", NAMESPACE, "--scale-out",
        "--leader-elect-lease-duration", str(LEASE), "--leader-elect-renew-deadline", str(RENEW),
        "--leader-elect-retry-period", str(RETRY), "--scale-out-handover-grace", "2", "--grace-period", "3",
        "--progress", "never",
    ]
    killed: dict[int, float] = {}
    async with apiserver(tmp_path, sharded_watch=sharded_watch) as kubeconfig, Client(Config.from_kubeconfig(kubeconfig)) as client:
        ns = await client.resource("v1", "Namespace")
        await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        cm = await client.resource("v1", "ConfigMap")
        for i in range(OBJECTS):
            await client.create(cm, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": f"cm-{i:03d}", "namespace": NAMESPACE}, "data": {"i": str(i)}})
        async with AsyncExitStack() as stack:
            replicas: list[Runner] = []
            for _ in range(3):
                replicas.append(await stack.enter_async_context(runner(kubeconfig, *flags)))
            a, b, c = replicas
            pids = [r.proc.pid for r in replicas]

            # Three replicas converge every object, each doing a fair share.
            await wait_until(lambda: len(set().union(*records.keys_by_pid(0).values())) == OBJECTS,
                             within=30, what="every object ran")
            await wait_until(lambda: settled(records, pids), within=30, what="a fair share")

            # SIGKILL one: its objects run elsewhere within the lease duration plus a few seconds.
            window = records.keys_by_pid(time.time() - 2.5)
            orphans = window[c.proc.pid]
            assert len(orphans) > OBJECTS / 6
            c.proc.kill()
            await c.proc.wait()
            killed[c.proc.pid] = time.time()
            await wait_until(lambda: len(records.first_start_after(orphans, {a.proc.pid, b.proc.pid}, killed[c.proc.pid]))
                             == len(orphans), within=LEASE + 8, what="the crashed replica's objects taken over")
            taken = records.first_start_after(orphans, {a.proc.pid, b.proc.pid}, killed[c.proc.pid])
            assert max(taken.values()) - killed[c.proc.pid] <= LEASE + 4

            # A fourth replica joins and takes its share.
            d = await stack.enter_async_context(runner(
                kubeconfig, *flags, "--metrics-bind-address", ":0", "--health-probe-bind-address", ":0"))
            live = [a.proc.pid, b.proc.pid, d.proc.pid]
            await wait_until(lambda: settled(records, live), within=30, what="the new replica's share")
            urls = {line.split(" on ")[0]: line.split(" on ")[1] for line in d.stdout if " on http://" in line}
            async with httpx.AsyncClient() as http:
                assert (await http.get(urls["health probes"] + "/readyz")).status_code == 200
                # A member that first sees the killed replica's Lease counts it live for a lease duration.
                with trio.fail_after(LEASE + 2):
                    while 'engine_ring_members{ring="engine-ring-recorder"} 3.0' not in (
                        metrics := (await http.get(urls["metrics"] + "/metrics")).text
                    ):
                        await trio.sleep(0.2)
            share = float(metrics.split('engine_ring_owned_share{ring="engine-ring-recorder"} ')[1].split()[0])
            assert 0.1 < share < 0.6, "the new replica owns a share of the key space"
            filtered = 'engine_informer_server_shard_filter{resource="configmaps/v1"} 1.0' in metrics
            assert filtered == sharded_watch, "the informer sends shardSelector exactly when the server honours it"
            cached = float(metrics.split('engine_informer_cached_objects{resource="configmaps/v1"} ')[1].split()[0])
            assert cached < OBJECTS * 0.8, "the replica caches only the objects of its ranges"

            # SIGTERM one: it hands over, exits 0, with no failure and no Warning event.
            await wait_until(lambda: settled(records, live), within=30, what="a settled ring")
            t = time.time()
            handed = records.keys_by_pid(t - 2.5)[a.proc.pid]
            a.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                assert await a.proc.wait() == 0
            stopped = time.time()
            await wait_until(lambda: len(records.first_start_after(handed, {b.proc.pid, d.proc.pid}, t)) == len(handed),
                             within=10, what="the stopped replica's objects taken over")
            taken = records.first_start_after(handed, {b.proc.pid, d.proc.pid}, t)
            assert max(taken.values()) - stopped < LEASE, "a graceful leave does not wait for the lease to expire"
            for r in (b, d):
                r.proc.send_signal(signal.SIGTERM)
            for r in (b, d):
                with trio.fail_after(20):
                    assert await r.proc.wait() == 0
        for r in (a, b, d):
            assert r.messages("reconciler error") == [], "no run failed"
        assert d.messages("joined ring engine-ring-recorder as ")
        shares = [(e["members"], e["owned"]) for e in d.messages("ring engine-ring-recorder: this replica")]
        assert shares[0][1] == 0.0 and any(0.1 < owned < 0.6 for _, owned in shares), shares
        events = await client.resource("events.k8s.io/v1", "Event")
        warnings = [e for e in (await client.list(events, namespace=NAMESPACE)).items if e.get("type") == "Warning"]
        assert warnings == []
    assert records.overlaps(killed) == []
