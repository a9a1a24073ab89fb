"""Bursts of 50 ``spec.n`` patches to one Widget, against an engine operator, to look for a stall.

    python bench/burst_stall.py [--root CHECKOUT] [--rounds N] [--hold SECONDS]

Starts ``apiserver.py`` (its own process) and ``CHECKOUT/bench/operators/engine_op.py`` (the
engine of that checkout; this one by default), then runs ``--rounds`` bursts as workload C of
``vs_kopf.py`` does (one object, patches sent one after another). After each burst it waits up
to 5 s for ``status.observedN == spec.n`` and counts a stall if that never happens (then nudges
``spec.n`` once more, so the next burst starts converged); a watch counts every time
``status.observedN`` went back (a write landing after a later one). ``--hold`` asks the server
(``POST /_faults``) to hold the operator's first patch of each burst that long, which makes a
supersede cut it in flight. Prints one line per stall and a summary. Wall-clock and not deterministic: a search for rare interleavings, not a test.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import subprocess
import sys
import tempfile
from typing import Any

import httpx
import trio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

from vs_kopf import BURST, CRD, GROUP, KIND, VERSION  # noqa: E402

from engine.kube import Client, Config, install_crds  # noqa: E402


async def bursts(kubeconfig: str, root: str, rounds: int, hold: float, workdir: str) -> tuple[int, int]:
    config = Config.from_kubeconfig(kubeconfig)
    server = config.server.rstrip("/")
    async with Client(config, user_agent="bench-driver") as client:
        await install_crds(client, [CRD])
        await client.create(await client.resource("v1", "Namespace"), {"metadata": {"name": "stall"}})
        widgets = await client.resource(f"{GROUP}/{VERSION}", KIND)
        await client.create(widgets, {"metadata": {"name": BURST}, "spec": {"n": 0}}, namespace="stall")
        log = open(os.environ.get("BURST_STALL_LOG") or os.path.join(workdir, "operator.log"), "w")
        op = subprocess.Popen(
            [sys.executable, os.path.join(root, "bench", "operators", "engine_op.py"), "--kubeconfig", kubeconfig,
             "--namespace", "stall", "--stats", os.path.join(workdir, "stats.json")],
            stderr=log,
        )  # fmt: skip
        observed: list[Any] = []

        async def watch() -> None:
            async with client.watch(widgets, namespace="stall") as events:
                async for event in events:
                    observed.append((event.object.get("status") or {}).get("observedN"))

        async def state() -> tuple[int, Any]:
            obj = await client.get(widgets, BURST, namespace="stall")
            return obj["spec"]["n"], (obj.get("status") or {}).get("observedN")

        stalls = regressions = 0
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                for r in range(rounds):
                    while (now := await state())[0] != now[1]:
                        await trio.sleep(0.05)
                    observed.clear()
                    base = now[0]
                    if hold:
                        fault = {"type": "latency", "seconds": hold, "count": 1, "verbs": ["patch"],
                                 "client": "bench-engine-operator"}
                        post = functools.partial(httpx.post, f"{server}/_faults", json=fault, timeout=30)
                        answer = await trio.to_thread.run_sync(post)
                        answer.raise_for_status()
                    for value in range(base + 1, base + 51):
                        await client.patch(widgets, BURST, {"spec": {"n": value}}, namespace="stall")
                    with trio.move_on_after(5):
                        while (now := await state())[1] != base + 50:
                            await trio.sleep(0.02)
                    seen = [n for n in observed if n is not None]
                    regressions += sum(1 for a, b in zip(seen, seen[1:]) if b < a)
                    if now[1] != base + 50:
                        stalls += 1
                        print(f"burst {r}: stalled at spec.n {now[0]}, status.observedN {now[1]}", flush=True)
                        await client.patch(widgets, BURST, {"spec": {"n": base + 51}}, namespace="stall")
                nursery.cancel_scope.cancel()
        finally:
            op.send_signal(signal.SIGTERM)
            op.wait(30)
            log.close()
        return stalls, regressions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(HERE, ".."), help="checkout whose engine operator runs")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds the server holds one operator patch per burst")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        kubeconfig = os.path.join(workdir, "kubeconfig")
        server = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "apiserver.py"), "--write-kubeconfig", kubeconfig],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert server.stdout is not None
            if not server.stdout.readline().startswith("listening on "):
                raise SystemExit("the embedded API server did not start")
            stalls, regressions = trio.run(bursts, kubeconfig, args.root, args.rounds, args.hold, workdir)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    print(f"{args.rounds} bursts of 50: {stalls} stalled, observedN went back {regressions} times")


if __name__ == "__main__":
    main()
