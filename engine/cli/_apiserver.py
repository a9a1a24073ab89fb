"""``python -m engine apiserver``: run the embedded API server from the command line.

It serves HTTPS with a generated CA by default, and the kubeconfig it writes carries a client
certificate in ``system:masters``: kubectl sends no bearer token over plain HTTP, so this is
what makes kubectl work while no request without credentials gets in (such a request is
``system:anonymous`` and may read ``/healthz``, ``/livez``, ``/readyz`` and ``/version``
only, as on a cluster). ``--plain-http`` serves HTTP; its kubeconfig carries a bearer token
instead, which engine.kube and httpx send but kubectl does not.
"""

from __future__ import annotations

import argparse
import signal
import sys

import trio

from ..apiserver import ApiServer, check_feature_gates
from ._args import ArgumentParser

__all__ = ["main", "server_from_args"]


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m engine apiserver",
        description="Run the embedded Kubernetes-compatible API server until SIGINT or SIGTERM. It serves HTTPS "
        "with a generated CA; the kubeconfig it writes authenticates with a client certificate in system:masters. "
        "A request without credentials is system:anonymous, which may read only /healthz, /livez, /readyz and "
        "/version.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on; 0 picks a free one (default)")
    scheme = parser.add_mutually_exclusive_group()
    scheme.add_argument("--plain-http", action="store_true",
                        help="serve plain HTTP instead; the kubeconfig then carries an admin bearer token, which "
                        "engine.kube and httpx send but kubectl does not send over HTTP (so kubectl cannot use it)")
    scheme.add_argument("--tls", action="store_true", help="serve HTTPS (the default; kept for older command lines)")
    parser.add_argument("--write-kubeconfig", metavar="PATH", help="write a kubeconfig for the server to PATH")
    parser.add_argument(
        "--no-controllers",
        action="store_true",
        help="answer as an API server without a controller manager: no garbage collection, and deleted "
        "namespaces stay Terminating until finalized",
    )
    parser.add_argument(
        "--no-authorization",
        action="store_true",
        help="let every authenticated user (service account tokens, client certificates) do everything; by "
        "default users outside system:masters are authorized by the stored RBAC objects",
    )
    parser.add_argument("--history-size", type=int, default=10_000, help="watch history length (default 10000)")
    parser.add_argument(
        "--bookmark-interval", type=float, default=60.0, help="seconds between watch BOOKMARK events (default 60)"
    )
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="NAME=BOOL,...",
        help="feature gates as kube-apiserver spells them; known: ShardedListAndWatch (default false)",
    )
    return parser


def _feature_gates(text: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise ValueError(f"--feature-gates wants NAME=true or NAME=false, got {item!r}")
        gates[name.strip()] = value.lower() == "true"
    return gates


def server_from_args(args: argparse.Namespace) -> ApiServer:
    """The (not yet started) server the parsed command line asks for."""
    return ApiServer(
        host=args.host,
        port=args.port,
        tls=not args.plain_http,
        history_size=args.history_size,
        bookmark_interval=args.bookmark_interval,
        controllers=not args.no_controllers,
        authorization=not args.no_authorization,
        feature_gates=_feature_gates(args.feature_gates),
    )


async def _serve(args: argparse.Namespace) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with server_from_args(args) as api:
            print(f"listening on {api.url}", flush=True)
            if args.write_kubeconfig:
                api.write_kubeconfig(args.write_kubeconfig)
                print(f"kubeconfig written to {args.write_kubeconfig}", flush=True)
            async for _ in signals:
                break


def main(argv: list[str]) -> int:
    """Parse ``argv`` (without the program name), serve until SIGINT/SIGTERM, return 0.

    Returns 2 for bad arguments (argparse's convention) and 1 when the server cannot start.
    """
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        check_feature_gates(_feature_gates(args.feature_gates))
    except ValueError as exc:
        print(f"python -m engine apiserver: {exc}", file=sys.stderr, flush=True)
        return 2
    try:
        trio.run(_serve, args)
    except OSError as exc:
        print(f"cannot start the API server: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0
