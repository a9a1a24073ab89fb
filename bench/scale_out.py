"""Benchmark: one controller as 1, 2 and 4 scale-out replicas, side by side in one run.

Run by hand (not a test; needs ``psutil``)::

    python bench/scale_out.py [--n 10000] [--replicas 1,2,4] [--workers 2] [--run-seconds 0.05]
                              [--lease 15,10,2] [--no-server-filter] [--json PATH]

The embedded API server runs in its own process (``bench/apiserver.py``). For each replica
count R, in a fresh namespace holding N ConfigMaps, R ``python -m engine run --scale-out``
processes run ``bench/operators/ring_op.py``: one run per change, waiting ``--run-seconds`` (an
I/O wait), ``--workers`` at a time per replica. Measured per R:

* **converge**: from the first patch of ``data.n`` on all N objects (16 concurrent requests)
  until every object was reconciled at the new value, as the replicas record it; the goal is
  within 1.2x of 1/R of one replica's time (``ideal`` = one replica's time / R);
* **CPU** (user + system during the change, read 1 s after it converged) and **RSS** of each
  replica, from the OS;
* **join**: one more replica starts; the objects it reconciles (its share, moved to it) and
  how long some part of the key space was owned by nobody (``unowned``, from the replicas'
  owned shares sampled every 20 ms), from its start until the shares settled;
* **leave**: that replica gets SIGTERM; the objects the others reconcile because of it
  (moved back) and ``unowned`` likewise.

The server runs with the ``ShardedListAndWatch`` gate on, so each replica lists and watches only
the objects of its key ranges (``shardSelector``) and caches about N/R of them; with
``--no-server-filter`` the server ignores the parameter (as every server before 1.36 does) and
each replica receives, decodes and drops all N objects, which shows what the filter saves.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import psutil
import trio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from engine.kube import Client, Config  # noqa: E402


class Records:
    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self.runs: list[tuple[int, str, str, float]] = []
        self.owned: list[tuple[int, float, float]] = []

    def refresh(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path) as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind("\n") + 1
        self._offset += len(data[:end].encode())
        for line in data[:end].splitlines():
            parts = line.split()
            if parts[0] == "run":
                self.runs.append((int(parts[1]), parts[2], parts[3], float(parts[4])))
            elif parts[0] == "owned":
                self.owned.append((int(parts[1]), float(parts[2]), float(parts[3])))

    def done(self, names: set[str], value: str, since: float) -> float | None:
        """The time the last of ``names`` was reconciled at ``value`` after ``since``, or None."""
        seen: dict[str, float] = {}
        for _, name, n, when in self.runs:
            if n == value and when >= since and name in names and name not in seen:
                seen[name] = when
        return max(seen.values()) if len(seen) == len(names) else None

    def ran_by(self, pid: int, since: float) -> set[str]:
        return {name for p, name, _, when in self.runs if p == pid and when >= since}

    def unowned(self, pids: set[int], start: float, end: float) -> float:
        """Seconds in [start, end] during which the shares of ``pids`` summed to less than 1."""
        events = sorted((when, pid, share) for pid, share, when in self.owned if pid in pids and when <= end)
        shares: dict[int, float] = defaultdict(float)
        total, last, gap = 0.0, start, 0.0
        for when, pid, share in events:
            if when > start and total < 0.99999:
                gap += when - max(last, start)
            last = max(when, start)
            total += share - shares[pid]
            shares[pid] = share
        if total < 0.99999:
            gap += end - last
        return gap


async def wait_for(check: Any, records: Records, within: float) -> Any:
    with trio.fail_after(within):
        while True:
            records.refresh()
            result = check()
            if result:
                return result
            await trio.sleep(0.1)


async def quiet(records: Records, seconds: float = 1.5) -> None:
    """Wait until no run was recorded for ``seconds``."""
    while True:
        records.refresh()
        count = len(records.runs)
        await trio.sleep(seconds)
        records.refresh()
        if len(records.runs) == count:
            return


class Bench:
    def __init__(self, args: argparse.Namespace, kubeconfig: str, workdir: str) -> None:
        self.args = args
        self.kubeconfig = kubeconfig
        self.workdir = workdir

    def start_replica(self, namespace: str, record: str, ring: str) -> psutil.Popen:
        lease, renew, retry = self.args.lease.split(",")
        env = {**os.environ, "PYTHONPATH": ROOT, "BENCH_RECORD": record,
               "BENCH_RUN_SECONDS": str(self.args.run_seconds), "BENCH_WORKERS": str(self.args.workers)}
        return psutil.Popen(
            [sys.executable, "-m", "engine", "run", "--kubeconfig", self.kubeconfig,
             "--plugin", "bench.operators.ring_op:plugin", "--namespace", namespace, "--scale-out",
             "--leader-election-id", ring, "--leader-elect-lease-duration", lease,
             "--leader-elect-renew-deadline", renew, "--leader-elect-retry-period", retry,
             "--no-cluster-events", "--progress", "never", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.workdir, f"{ring}.log"), "ab"),
        )

    async def patch_all(self, client: Client, namespace: str, names: list[str], value: str) -> None:
        cm = await client.resource("v1", "ConfigMap")
        send, receive = trio.open_memory_channel[str](0)

        async def worker() -> None:
            async for name in receive:
                await client.patch(cm, name, {"data": {"n": value}}, namespace=namespace, decode=False)

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(worker)
            async with send:
                for name in names:
                    await send.send(name)

    async def create_all(self, client: Client, namespace: str, names: list[str]) -> None:
        cm = await client.resource("v1", "ConfigMap")
        send, receive = trio.open_memory_channel[str](0)

        async def worker() -> None:
            async for name in receive:
                await client.create(cm, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": name, "namespace": namespace}, "data": {"n": "1"}})

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(worker)
            async with send:
                for name in names:
                    await send.send(name)

    async def one(self, client: Client, replicas: int) -> dict[str, Any]:
        n = self.args.n
        namespace = f"scale-{replicas}"
        ring = f"bench-ring-{replicas}"
        record = os.path.join(self.workdir, f"{namespace}.log")
        records = Records(record)
        ns = await client.resource("v1", "Namespace")
        await client.create(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        names = [f"cm-{i:05d}" for i in range(n)]
        await self.create_all(client, namespace, names)
        procs: list[psutil.Popen] = []
        try:
            for _ in range(replicas):
                procs.append(self.start_replica(namespace, record, ring))
            pids = {p.pid for p in procs}

            def settled() -> bool:
                latest: dict[int, float] = {}
                for pid, share, _ in records.owned:
                    if pid in pids:
                        latest[pid] = share
                return len(latest) == len(pids) and abs(sum(latest.values()) - 1) < 1e-5 and all(latest.values())

            await wait_for(lambda: records.done(set(names), "1", 0.0) and settled(), records, 600)
            await trio.sleep(2)
            cpu0 = {p.pid: sum(p.cpu_times()[:2]) for p in procs}
            start = time.time()
            await self.patch_all(client, namespace, names, "2")
            patched = time.time() - start
            last = await wait_for(lambda: records.done(set(names), "2", start), records, 1200)
            converge = last - start
            await trio.sleep(1)
            cpu = [sum(p.cpu_times()[:2]) - cpu0[p.pid] for p in procs]
            rss = [p.memory_info().rss / 2**20 for p in procs]
            per_replica = [len({name for pid, name, v, w in records.runs if pid == p.pid and v == "2" and w >= start})
                           for p in procs]
            result: dict[str, Any] = {
                "replicas": replicas, "objects": n, "patch_seconds": round(patched, 2),
                "converge_seconds": round(converge, 2), "runs_per_replica": per_replica,
                "cpu_seconds": [round(c, 2) for c in cpu], "rss_mib": [round(r, 1) for r in rss],
            }
            # A replica joins: what moves to it, and how long part of the key space had no owner.
            joined_at = time.time()
            newcomer = self.start_replica(namespace, record, ring)
            procs.append(newcomer)
            pids.add(newcomer.pid)
            await wait_for(settled, records, 120)
            settled_at = time.time()
            await quiet(records)
            result["join_moved"] = len(records.ran_by(newcomer.pid, joined_at))
            result["join_unowned_seconds"] = round(records.unowned(pids, joined_at, settled_at), 2)
            result["join_settle_seconds"] = round(settled_at - joined_at, 2)
            # It leaves with SIGTERM.
            left_at = time.time()
            newcomer.send_signal(signal.SIGTERM)
            newcomer.wait(60)
            procs.remove(newcomer)
            pids.discard(newcomer.pid)
            await wait_for(settled, records, 120)
            settled_at = time.time()
            await quiet(records)
            moved_back = set()
            for p in procs:
                moved_back |= records.ran_by(p.pid, left_at)
            result["leave_moved"] = len(moved_back)
            result["leave_unowned_seconds"] = round(records.unowned(pids | {newcomer.pid}, left_at, settled_at), 2)
            result["leave_settle_seconds"] = round(settled_at - left_at, 2)
            return result
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(60)
                except psutil.TimeoutExpired:
                    p.kill()


async def main(args: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="bench-scale-out-")
    kubeconfig = os.path.join(workdir, "kubeconfig")
    server = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "apiserver.py"), "--write-kubeconfig", kubeconfig,
         *([] if args.no_server_filter else ["--sharded-watch"])],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        results = []
        async with Client(Config.from_kubeconfig(kubeconfig), user_agent="bench-driver/1.0") as client:
            bench = Bench(args, kubeconfig, workdir)
            for replicas in [int(r) for r in args.replicas.split(",")]:
                result = await bench.one(client, replicas)
                print(json.dumps(result), flush=True)
                results.append(result)
        one = next((r for r in results if r["replicas"] == 1), None)
        print()
        print("| replicas | converge (s) | ideal (s) | ratio | patching (s) | runs per replica | CPU s per replica "
              "| RSS MiB per replica | join: moved, unowned (s) | leave: moved, unowned (s) |")
        print("|---:|---:|---:|---:|---:|---|---|---|---|---|")
        for r in results:
            ideal = one["converge_seconds"] / r["replicas"] if one else float("nan")
            print(f"| {r['replicas']} | {r['converge_seconds']} | {ideal:.2f} | {r['converge_seconds'] / ideal:.2f} "
                  f"| {r['patch_seconds']} | {r['runs_per_replica']} | {r['cpu_seconds']} | {r['rss_mib']} "
                  f"| {r['join_moved']}, {r['join_unowned_seconds']} | {r['leave_moved']}, "
                  f"{r['leave_unowned_seconds']} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "results": results}, f, indent=2)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--workers", type=int, default=2, help="concurrent runs per replica (default 2)")
    parser.add_argument("--run-seconds", type=float, default=0.05)
    parser.add_argument("--lease", default="15,10,2", help="lease duration, renew deadline, retry period")
    parser.add_argument("--no-server-filter", action="store_true", help="the server ignores shardSelector")
    parser.add_argument("--json", metavar="PATH")
    trio.run(main, parser.parse_args())
