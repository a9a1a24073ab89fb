"""The embedded API server under a volume of hostile requests (issue 36, item 3).

    python bench/apiserver_fuzz.py [--requests 100000] [--concurrency 32] [--seed 1] [--duration S]

Starts ``python -m engine apiserver --plain-http`` in its own process, then sends
``--requests`` malformed and hostile requests (``tests/apiserver/hostile.py``: bad paths, bad
JSON, deep nesting, huge bodies, invalid patches, bad selectors and query parameters, bad
content types, chunked bodies, protobuf garbage, missing and bogus credentials, watches) from
``--concurrency`` clients, while one more client runs well-formed create, get, list, patch,
delete rounds and checks their answers. Prints counts by status code and class, every 5xx
that is not one a real kube-apiserver gives (must be 0), every other wrong answer, the
latencies of the well-formed requests, and whether the server still answers at the end.
Exits 1 if anything was wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Any

import httpx
import trio
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tests.apiserver.fuzzing import seed_objects, send, well_formed  # noqa: E402
from tests.apiserver.hostile import hostile_request, judge  # noqa: E402


def _start_server(kubeconfig: str, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "apiserver", "--plain-http", "--port", "0", "--write-kubeconfig", kubeconfig],
        stdout=subprocess.DEVNULL, stderr=log,
    )


async def _main(args: argparse.Namespace) -> int:
    workdir = tempfile.mkdtemp(prefix="apiserver-fuzz-")
    kubeconfig = os.path.join(workdir, "kubeconfig")
    log_path = os.path.join(workdir, "server.log")
    log = open(log_path, "wb")
    server = _start_server(kubeconfig, log)
    try:
        with trio.fail_after(60):
            while not os.path.exists(kubeconfig) or not os.path.getsize(kubeconfig):
                await trio.sleep(0.1)
        config = yaml.safe_load(open(kubeconfig))
        url = config["clusters"][0]["cluster"]["server"]
        token = config["users"][0]["user"]["token"]
        return await _drive(args, url, token, server)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()
        with open(log_path, "rb") as handle:
            lines = handle.read().decode(errors="replace").splitlines()
        errors = [line for line in lines if "Traceback" in line or "ERROR" in line or "Error" in line]
        print(f"server exit code {server.returncode}; server log: {len(errors)} error lines")
        for line in errors[:20]:
            print("  ", line[:300])
        for path in (kubeconfig, log_path):
            if os.path.exists(path):
                os.unlink(path)
        os.rmdir(workdir)


async def _drive(args: argparse.Namespace, url: str, token: str, server: subprocess.Popen[bytes]) -> int:
    admin = {"Authorization": f"Bearer {token}"}
    statuses: Counter[int] = Counter()
    by_kind: Counter[str] = Counter()
    problems: Counter[str] = Counter()
    examples: dict[str, str] = {}
    latencies: list[float] = []
    well_problems: list[str] = []
    stalls: list[str] = []
    rnd = random.Random(args.seed)
    requests = iter(range(args.requests))
    done = trio.Event()
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    started = time.monotonic()

    async def hostile_worker(client: httpx.AsyncClient) -> None:
        for _ in requests:
            if time.monotonic() - started > args.duration:
                return
            request = hostile_request(rnd, huge_share=args.huge_share)
            try:
                status, body, ctype = await send(client, request, admin_token=token, timeout=30)
            except trio.TooSlowError:
                problems["no answer within 30 s"] += 1
                examples.setdefault("no answer within 30 s", repr(request)[:400])
                stalls.append(f"at {time.monotonic() - started:.0f} s: {request!r}"[:400] + "; " + await _again(request))
                continue
            except httpx.TransportError as exc:
                key = f"transport error {type(exc).__name__}"
                problems[key] += 1
                examples.setdefault(key, f"{exc}: {request!r}"[:400])
                continue
            statuses[status] += 1
            by_kind[f"{request.kind} {status}"] += 1
            problem = judge(request, status, body, ctype)
            if problem is not None:
                key = problem[:120]
                problems[key] += 1
                examples.setdefault(key, repr(request)[:400])

    async def _again(request: Any) -> str:
        async with httpx.AsyncClient(base_url=url, timeout=None) as fresh:
            began = time.monotonic()
            try:
                status, _, _ = await send(fresh, request, admin_token=token, timeout=30)
            except (trio.TooSlowError, httpx.TransportError) as exc:
                return f"sent again alone on a new connection: {type(exc).__name__}"
            return f"sent again alone on a new connection: {status} in {(time.monotonic() - began) * 1000:.0f} ms"

    async def well_formed_worker(client: httpx.AsyncClient) -> None:
        serial = 0
        while not done.is_set():
            began = time.monotonic()
            try:
                with trio.fail_after(30):
                    found = await well_formed(client, serial)
            except (trio.TooSlowError, httpx.TransportError) as exc:
                found = [f"well-formed round {serial}: {type(exc).__name__} {exc}"]
            latencies.append(time.monotonic() - began)
            well_problems.extend(found)
            serial += 1

    async with httpx.AsyncClient(base_url=url, headers=admin, timeout=30) as setup:
        await seed_objects(setup)
    async with httpx.AsyncClient(base_url=url, timeout=None, limits=limits) as hostile, \
            httpx.AsyncClient(base_url=url, headers=admin, timeout=30) as good:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(well_formed_worker, good)
            async with trio.open_nursery() as workers:
                for _ in range(args.concurrency):
                    workers.start_soon(hostile_worker, hostile)

                async def progress() -> None:
                    while True:
                        await trio.sleep(30)
                        total = sum(statuses.values())
                        print(f"  {time.monotonic() - started:6.0f} s: {total} hostile answered, "
                              f"{len(latencies)} well-formed rounds", flush=True)

                nursery.start_soon(progress)
            done.set()
            nursery.cancel_scope.cancel()
    elapsed = time.monotonic() - started
    async with httpx.AsyncClient(base_url=url, headers=admin, timeout=10) as final:
        end = await final.get("/api/v1/namespaces/wellformed")
        final_problems = await well_formed(final, 10**9)
    alive = server.poll() is None and end.status_code == 200 and not final_problems

    total = sum(statuses.values())
    print(f"hostile requests answered: {total} of {args.requests} in {elapsed:.0f} s ({total / elapsed:.0f}/s), "
          f"concurrency {args.concurrency}, seed {args.seed}")
    print("by status:", json.dumps(dict(sorted(statuses.items()))))
    fives = {k: v for k, v in statuses.items() if k >= 500}
    print("5xx answered (all, including the real server's 504 ResourceVersionTooLarge / 500 etcd too large):",
          json.dumps(fives))
    print("by class and status:")
    for key, count in sorted(by_kind.items()):
        print(f"  {key:28} {count}")
    print(f"wrong answers: {sum(problems.values())}")
    for key, count in problems.most_common():
        print(f"  {count:6}  {key}\n          e.g. {examples[key]}")
    latencies.sort()
    if latencies:
        def pct(p: float) -> float:
            return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000

        print(f"well-formed rounds (create, get, list, patch, delete): {len(latencies)}, "
              f"latency p50 {pct(0.5):.0f} ms, p99 {pct(0.99):.0f} ms, max {latencies[-1] * 1000:.0f} ms")
    for line in stalls[:10]:
        print("  stall", line)
    print(f"well-formed wrong answers: {len(well_problems)}")
    for line in well_problems[:10]:
        print("  ", line[:300])
    print(f"server still answers at the end: {alive} (GET namespace wellformed {end.status_code}; final round {final_problems or 'ok'})")
    return 0 if alive and not problems and not well_problems and total == args.requests else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--duration", type=float, default=float("inf"),
                        help="stop sending after this many seconds (the report says how many were sent)")
    parser.add_argument("--huge-share", type=float, default=0.05,
                        help="share of the draws of a multi-megabyte body that are sent as such (default 0.05)")
    sys.exit(trio.run(_main, parser.parse_args()))


if __name__ == "__main__":
    main()
