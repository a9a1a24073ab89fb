"""Benchmark: failover of a leader-elected controller, warm standby against cold, in one run.

Run by hand (not a test; needs ``psutil``)::

    python bench/failover.py [--n 10000] [--repeat 2] [--lease 15,10,2] [--kubeconfig PATH] [--json PATH]

Without ``--kubeconfig`` the embedded API server runs in its own process
(``bench/apiserver.py``); with it, the benchmark uses that cluster (a real kube-apiserver:
``../shared/kube/serve 1.36.2 PATH``). In the namespace ``bench-failover`` it creates N
ConfigMaps; then, for each mode, interleaved ``--repeat`` times, two
``python -m engine run --leader-elect`` processes run ``bench/operators/failover_op.py`` (one
run per ConfigMap, recorded) on a Lease of their own:

1. replica A starts, takes the Lease and runs every object (a converged controller's start);
2. replica B starts and stands by; the warm one (the default) waits until its cache synced, the
   cold one (``--no-warm-standby``) has nothing to wait for;
3. A is killed with SIGKILL (no release: B must wait for the Lease to expire), and the time to
   B's first run is measured, with when B acquired the Lease, and how many lists B's informer
   had done before it led and by its first run. The Lease's expiry is read from the Lease A
   left: its last ``renewTime`` plus ``leaseDurationSeconds`` (all processes share one clock).

The Lease expires ``lease duration`` after A's last renewal, at most ``lease duration`` after
the kill; B counts from when it last saw the Lease change (its watch of the Lease shows a
renewal within milliseconds; polling alone, up to one retry period later) and tries again at
the expiry it observed, or at its next retry when its watch of the Lease is refused. The goal
(issue 33): the warm standby's first run within the Lease's expiry plus 1 s, i.e. within
1 s of B acquiring it, however many objects there are; the cold one lists them all first.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import psutil
import trio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from engine.kube import Client, Config  # noqa: E402
from engine.kube.lowlevel import LEASE_RESOURCE  # noqa: E402

NAMESPACE = "bench-failover"


class Records:
    """The lines the replicas append (see ``bench/operators/failover_op.py``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[list[str]] = []
        self._offset = 0

    def refresh(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        self.lines.extend(line.split() for line in data[:end].decode().splitlines())

    def first(self, kind: str, pid: int) -> list[str] | None:
        self.refresh()
        return next((line for line in self.lines if line[0] == kind and int(line[1]) == pid), None)

    def runs(self, pid: int) -> int:
        """The runs of ``pid`` recorded so far (every ``BENCH_EVERY``-th, and the first)."""
        self.refresh()
        return sum(1 for line in self.lines if line[0] == "run" and int(line[1]) == pid)


async def wait_for(check: Any, within: float, what: str) -> Any:
    with trio.fail_after(within):
        while True:
            result = check()
            if result:
                return result
            await trio.sleep(0.01)
    raise AssertionError(what)


class Bench:
    def __init__(self, args: argparse.Namespace, kubeconfig: str, workdir: str, client: Client) -> None:
        self.client = client
        self.args = args
        self.kubeconfig = kubeconfig
        self.workdir = workdir

    def replica(self, lease_name: str, record: str, *, warm: bool) -> psutil.Popen:
        lease, renew, retry = self.args.lease.split(",")
        env = {**os.environ, "PYTHONPATH": ROOT, "BENCH_RECORD": record, "BENCH_EVERY": str(self.args.every)}
        return psutil.Popen(
            [sys.executable, "-m", "engine", "run", "--kubeconfig", self.kubeconfig,
             "--plugin", "bench.operators.failover_op:plugin", "--namespace", NAMESPACE,
             "--leader-elect", "--leader-election-id", lease_name, "--leader-election-namespace", NAMESPACE,
             "--leader-elect-lease-duration", lease, "--leader-elect-renew-deadline", renew,
             "--leader-elect-retry-period", retry, *([] if warm else ["--no-warm-standby"]),
             "--no-cluster-events", "--progress", "never", "--log-level", "warning"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.workdir, f"{lease_name}.log"), "ab"),
        )

    async def create_all(self, client: Client, n: int) -> None:
        ns = await client.resource("v1", "Namespace")
        await client.apply(ns, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                           field_manager="bench", force=True)
        cm = await client.resource("v1", "ConfigMap")
        existing = {o["metadata"]["name"] for o in (await client.list_all(cm, namespace=NAMESPACE)).items}
        send, receive = trio.open_memory_channel[str](0)

        async def worker() -> None:
            async for name in receive:
                await client.create(cm, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"name": name, "namespace": NAMESPACE}, "data": {"n": "1"}})

        async with trio.open_nursery() as nursery:
            for _ in range(16):
                nursery.start_soon(worker)
            async with send:
                for i in range(n):
                    name = f"cm-{i:05d}"
                    if name not in existing:
                        await send.send(name)

    async def one(self, mode: str, round_: int) -> dict[str, Any]:
        warm = mode == "warm"
        n, every = self.args.n, self.args.every
        lease_name = f"failover-{mode}-{round_}"
        record = os.path.join(self.workdir, f"{lease_name}.record")
        records = Records(record)
        a = self.replica(lease_name, record, warm=warm)
        b: psutil.Popen | None = None
        try:
            await wait_for(lambda: records.first("leading", a.pid), 120, "A did not lead")
            await wait_for(lambda: records.runs(a.pid) >= 1 + n // every, 600, "A did not run every object")
            b = self.replica(lease_name, record, warm=warm)
            await wait_for(lambda: records.first("standby", b.pid), 120, "B did not start")
            if warm:
                synced = await wait_for(lambda: records.first("synced", b.pid), 600, "B did not sync")
                assert synced[4] == "1", "B synced only after leading"
            await trio.sleep(2 * float(self.args.lease.split(",")[2]))
            rss = b.memory_info().rss / 2**20
            killed = time.time()
            a.send_signal(signal.SIGKILL)
            a.wait(30)
            spec = (await self.client.get(LEASE_RESOURCE, lease_name, namespace=NAMESPACE))["spec"]
            assert spec["holderIdentity"] != "" and not spec["holderIdentity"].endswith(f"_{b.pid}")
            renewed = dt.datetime.strptime(spec["renewTime"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)
            expiry = renewed.timestamp() + float(spec["leaseDurationSeconds"])
            lease_duration = float(self.args.lease.split(",")[0])
            first = await wait_for(lambda: records.first("run", b.pid), lease_duration + 600, "B never ran")
            leading = records.first("leading", b.pid)
            assert leading is not None
            await wait_for(lambda: records.runs(b.pid) >= 1 + n // every, 600, "B did not run every object")
            runs_done = max(float(line[3]) for line in records.lines if line[0] == "run" and int(line[1]) == b.pid)
            led, ran = float(leading[2]), float(first[3])
            return {
                "mode": mode, "round": round_, "objects": n,
                "kill_to_expiry": round(expiry - killed, 3), "expiry_to_acquire": round(led - expiry, 3),
                "kill_to_acquire": round(led - killed, 3), "acquire_to_first_run": round(ran - led, 3),
                "expiry_to_first_run": round(ran - expiry, 3),
                "kill_to_first_run": round(ran - killed, 3), "kill_to_all_runs": round(runs_done - killed, 3),
                "lists_before_leading": int(leading[3]) if warm else 0, "lists_at_first_run": int(first[4]),
                "standby_rss_mib": round(rss, 1),
                "within_expiry_plus_1s": ran - expiry <= 1.0,
            }
        finally:
            for p in (a, b):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in (a, b):
                if p is None:
                    continue
                try:
                    p.wait(60)
                except psutil.TimeoutExpired:
                    p.kill()


async def run(args: argparse.Namespace, kubeconfig: str, workdir: str, where: str) -> list[dict[str, Any]]:
    async with Client(Config.from_kubeconfig(kubeconfig), user_agent="bench-driver/1.0") as client:
        bench = Bench(args, kubeconfig, workdir, client)
        started = time.time()
        await bench.create_all(client, args.n)
        print(f"{args.n} ConfigMaps in {NAMESPACE} ({where}) ready in {time.time() - started:.1f} s", flush=True)
        results = []
        for round_ in range(args.repeat):
            for mode in ("warm", "cold") if round_ % 2 == 0 else ("cold", "warm"):
                result = await bench.one(mode, round_)
                print(json.dumps(result), flush=True)
                results.append(result)
        return results


def table(results: list[dict[str, Any]], where: str, args: argparse.Namespace) -> None:
    lease, _, retry = args.lease.split(",")
    print()
    print(f"failover on {where}, {args.n} objects, lease {lease} s, retry {retry} s "
          f"(SIGKILL of the leader to the new leader's first run; seconds):")
    print("| mode | kill to Lease expiry | expiry to acquire | acquire to first run | expiry to first run "
          "| kill to first run | kill to all runs | lists before leading / by first run | standby RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in sorted(results, key=lambda r: (r["mode"] != "warm", r["round"])):
        print(f"| {r['mode']} | {r['kill_to_expiry']} | {r['expiry_to_acquire']} | {r['acquire_to_first_run']} "
              f"| {r['expiry_to_first_run']} | {r['kill_to_first_run']} | {r['kill_to_all_runs']} "
              f"| {r['lists_before_leading']} / {r['lists_at_first_run']} | {r['standby_rss_mib']} |")
    warm = [r["acquire_to_first_run"] for r in results if r["mode"] == "warm"]
    cold = [r["acquire_to_first_run"] for r in results if r["mode"] == "cold"]
    if warm and cold:
        print(f"acquire to first run, best: warm {min(warm):.3f} s, cold {min(cold):.3f} s, "
              f"cold/warm {min(cold) / max(min(warm), 1e-3):.0f}x; warm's first run within the Lease's expiry "
              f"plus 1 s every time: {all(r['within_expiry_plus_1s'] for r in results if r['mode'] == 'warm')}")


async def main(args: argparse.Namespace) -> None:
    workdir = tempfile.mkdtemp(prefix="bench-failover-")
    print(f"load: {os.getloadavg()}, records in {workdir}", flush=True)
    if args.kubeconfig:
        results = await run(args, args.kubeconfig, workdir, "the given cluster")
        table(results, f"the cluster of {os.path.basename(args.kubeconfig)}", args)
    else:
        kubeconfig = os.path.join(workdir, "kubeconfig")
        server = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "apiserver.py"), "--write-kubeconfig", kubeconfig],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert server.stdout is not None
            server.stdout.readline()
            results = await run(args, kubeconfig, workdir, "the embedded server")
            table(results, "the embedded server", args)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    print(f"load: {os.getloadavg()}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000, help="objects (default 10,000)")
    parser.add_argument("--repeat", type=int, default=2, help="failovers per mode, interleaved (default 2)")
    parser.add_argument("--lease", default="15,10,2", help="lease duration, renew deadline, retry period (default 15,10,2)")
    parser.add_argument("--every", type=int, default=1000, help="record every n-th run (default 1000)")
    parser.add_argument("--kubeconfig", help="a running cluster (default: the embedded server in its own process)")
    parser.add_argument("--json", metavar="PATH")
    trio.run(main, parser.parse_args())
