"""The embedded API server for the benchmark, in its own process, counting requests.

    python bench/apiserver.py --write-kubeconfig PATH [--history-size N] [--watch-buffer N] [--tls]

``python -m engine apiserver`` plus two things the benchmark needs: larger watch history and
per-watcher buffers (so that 30,000 objects created at full speed never force a relist), and
request counts per client. Counts are keyed by User-Agent and ``VERB kind`` (``PATCH status``,
``POST object``, ``GET watch``, ...) and served as JSON at ``GET /_bench/requests``. With
``--tls`` it serves HTTPS with a generated CA and client certificates, as a real cluster's
kubeconfig does (the kubeconfig it writes carries both).

Counting wraps the server's private request router (``engine.apiserver._api.Router.handle``);
the server itself is unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections import Counter
from typing import Any

import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from engine._http import Request, Response  # noqa: E402
from engine.apiserver import ApiServer  # noqa: E402
from engine.apiserver._api import Router  # noqa: E402

COUNTS: Counter[str] = Counter()


def classify(request: Request) -> str:
    path = request.path.rstrip("/")
    if request.query.get("watch") in ("true", "1"):
        what = "watch"
    elif path.endswith("/status"):
        what = "status"
    elif "/events" in path:
        what = "event"
    elif request.method == "GET" and (path.count("/") <= 3 or path.startswith("/openapi")):
        what = "discovery"
    else:
        what = "object"
    return f"{request.method} {what}"


def install_counter() -> None:
    handle = Router.handle

    async def counting(self: Router, request: Request, **kwargs: Any) -> Response:
        if request.path == "/_bench/requests":
            body = json.dumps({"counts": dict(COUNTS)}).encode()
            return Response(200, [("Content-Type", "application/json")], body)
        COUNTS[f"{request.user_agent.split('/')[0]}|{classify(request)}"] += 1
        return await handle(self, request, **kwargs)

    Router.handle = counting  # type: ignore[method-assign]


async def serve(args: argparse.Namespace) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with ApiServer(
            host=args.host, port=args.port, history_size=args.history_size, watch_buffer=args.watch_buffer,
            tls=args.tls, feature_gates={"ShardedListAndWatch": args.sharded_watch},
        ) as api:
            api.write_kubeconfig(args.write_kubeconfig)
            print(f"listening on {api.url}", flush=True)
            async for _ in signals:
                break


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--write-kubeconfig", required=True, metavar="PATH")
    parser.add_argument("--history-size", type=int, default=200_000)
    parser.add_argument("--watch-buffer", type=int, default=100_000)
    parser.add_argument("--tls", action="store_true", help="serve HTTPS with client certificates")
    parser.add_argument("--sharded-watch", action="store_true", help="turn the ShardedListAndWatch gate on")
    args = parser.parse_args()
    install_counter()
    trio.run(serve, args)


if __name__ == "__main__":
    main()
