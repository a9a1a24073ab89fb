"""CPU per status patch through the engine's client and transport, trees side by side.

Run by hand:  python bench/patch_cost.py [--root DIR ...] [--count N] [--repeat R] [--tls]

Starts the embedded API server (``bench/apiserver.py``, its own process), installs the
benchmark's Widget CRD and 200 Widgets, then, for each ``--root`` (a checkout, ``git archive
COMMIT engine bench plugins | tar -x -C DIR``; this tree by default) and each of R rounds,
interleaved, runs a fresh client process that sends N merge patches of ``status`` from 16
tasks with ``Client.patch_status(..., decode=False)``, as the benchmark's engine operator
does, and reports the CPU time (user + system, ``time.process_time``) that process spent per
patch, and the wall time per patch. Only the request path is measured: no watch, no cache, no
controller. Prints every round and the median and minimum per root. With ``--tls`` the server
serves HTTPS with client certificates, as a cluster does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

import trio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import vs_kopf  # noqa: E402

from engine.kube import Client, Config, install_crds  # noqa: E402

NAMESPACE = "patch-cost"
OBJECTS = 200
TASKS = 16

CLIENT = """
import sys, time
root, kubeconfig, namespace = sys.argv[1:4]
count, objects, tasks = map(int, sys.argv[4:7])
sys.path.insert(0, root)
import trio
from engine.kube import Client, Config

async def main():
    async with Client(Config.from_kubeconfig(kubeconfig), user_agent="patch-cost") as client:
        widgets = await client.resource("bench.example.com/v1", "Widget")
        names = [f"w-{i:04d}" for i in range(objects)]
        for name in names[:tasks]:
            await client.patch_status(widgets, name, {"status": {"observedN": 0}}, namespace=namespace, decode=False)
        sent = 0

        async def patcher():
            nonlocal sent
            while sent < count:
                sent += 1
                await client.patch_status(
                    widgets, names[sent % objects], {"status": {"observedN": sent}}, namespace=namespace, decode=False
                )

        cpu, wall = time.process_time(), time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(patcher)
        print((time.process_time() - cpu) / count * 1e6, (time.perf_counter() - wall) / count * 1e6)

trio.run(main)
"""


async def populate(kubeconfig: str) -> None:
    async with Client(Config.from_kubeconfig(kubeconfig)) as client:
        await install_crds(client, [vs_kopf.CRD])
        await client.create(await client.resource("v1", "Namespace"), {"metadata": {"name": NAMESPACE}})
        widgets = await client.resource(f"{vs_kopf.GROUP}/{vs_kopf.VERSION}", vs_kopf.KIND)
        for i in range(OBJECTS):
            await client.create(widgets, {"metadata": {"name": f"w-{i:04d}"}, "spec": {"n": 1}}, namespace=NAMESPACE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", action="append", help="a tree to measure (repeatable; default: this one)")
    parser.add_argument("--count", type=int, default=4000, help="patches per round (4000)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per tree, interleaved (5)")
    parser.add_argument("--tls", action="store_true", help="the server serves HTTPS with client certificates")
    args = parser.parse_args()
    roots = [os.path.abspath(root) for root in args.root or [os.path.dirname(HERE)]]
    with tempfile.TemporaryDirectory() as workdir:
        server = vs_kopf.ServerProcess(workdir, tls=args.tls)
        try:
            trio.run(populate, server.kubeconfig)
            cpu: dict[str, list[float]] = {root: [] for root in roots}
            for round_ in range(args.repeat):
                for root in roots:
                    out = subprocess.run(
                        [sys.executable, "-c", CLIENT, root, server.kubeconfig, NAMESPACE, str(args.count),
                         str(OBJECTS), str(TASKS)],
                        capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": root},
                    )
                    if out.returncode:
                        raise SystemExit(f"the client of {root} failed:\n{out.stderr[-2000:]}")
                    used, wall = map(float, out.stdout.split())
                    cpu[root].append(used)
                    print(f"round {round_ + 1}  {root}: {used:.1f} us CPU, {wall:.1f} us wall per patch", flush=True)
            for root in roots:
                print(f"{root}: CPU per patch median {statistics.median(cpu[root]):.1f} us, min {min(cpu[root]):.1f} us")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
