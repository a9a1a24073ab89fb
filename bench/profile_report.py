"""Summarise an operator profile from ``vs_kopf.py --profile``: where the CPU goes, by layer.

    python bench/profile_report.py PROFILE [--top 25]

PROFILE is a py-spy raw (collapsed stacks) file (``*.pyspy.txt``, samples during workloads A
and B; samples waiting in the event loop's epoll are left out) or a cProfile file (``*.pstats``, CPU time of the whole run). Prints the share of
samples (py-spy) or of CPU time (cProfile) per layer (the innermost frame decides the layer:
httpcore's connection pool, h11, httpx request building, the engine, trio, ...), the top
functions by own time, and, for py-spy, the inclusive share of a few known call sites.
"""

from __future__ import annotations

import argparse
import pstats
import re
from collections import Counter

LAYERS: list[tuple[str, str]] = [
    ("httpcore connection pool", r"httpcore/_async/connection_pool\.py|httpcore/_async/connection\.py|httpcore/_synchronization"),
    ("httpcore HTTP/1.1 + trio backend", r"httpcore/"),
    ("h11 (HTTP/1.1 parsing)", r"h11/"),
    ("httpx URL parsing", r"httpx/_urlparse\.py|httpx/_urls\.py"),
    ("httpx request/response models", r"httpx/_models\.py|httpx/_content\.py|httpx/_utils\.py|httpx/_multipart"),
    ("httpx client + auth + transport", r"httpx/"),
    ("json", r"json/"),
    ("engine.kube", r"engine/kube/"),
    ("engine core", r"engine/"),
    ("trio run loop + sockets", r"trio/"),
    ("kopf", r"kopf/"),
    ("aiohttp", r"aiohttp/|multidict/|yarl/"),
    ("asyncio", r"asyncio/"),
    ("benchmark operator code", r"_op\.py|_lean\.py|_stats\.py"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in LAYERS]
CALL_SITES: list[tuple[str, str]] = [
    ("httpcore _assign_requests_to_connections", "_assign_requests_to_connections"),
    ("httpcore is_idle", "is_idle"),
    ("httpx build_request", "build_request"),
    ("httpx AsyncClient.send", "AsyncClient.send"),
    ("engine Informer (watch path)", "Informer."),
    ("engine Controller._work (runs)", "Controller._work"),
    ("json loads/dumps", "json/"),
]


STAGES: list[tuple[str, str]] = [
    ("watch: decode events (JSON, checks)", r"WatchStream\._decode|_watch_once.*_json\.py"),
    ("watch: receive events (socket, HTTP chunks, lines)", r"WatchStream\.__anext__|WatchStream\._next_line|WatchStream\._read_chunk"),
    ("queue: predicate, trigger, work queue", r"Controller\.trigger|WorkQueue\.add|Cluster\.watches\.<locals>\.handle|generation_changed"),
    ("cache: store, compact form, informer", r"Informer\._on_event|Informer\._prepared|Store\.apply|compact \("),
    ("watch: the watcher's loop (event records, resourceVersion)", r"Watcher\._watch_once"),
    ("status patch: parse the response", r"Transport\._receive|parse_head|Body\.read|Body\._read_chunked|Response\.__init__|Response\.aread|_error_from_response|_decode_object"),
    ("status patch: send (HTTP head, socket write)", r"Transport\._send|request_head|Transport\._acquire|_SocketType\.is_readable"),
    ("status patch: build (client, URL, headers, JSON)", r"Client\.patch|Client\._send|Client\._request|RequestOptions\.|Sender\.send|RequestDefaults\.|call_with_retries|_json\.py"),
    ("reconcile (the operator's own code)", r"main\.<locals>\.reconcile"),
    ("runs: worker, run records, queue get/done", r"Controller\._work|Controller\._begin|Controller\._end|WorkQueue\.|RunContext"),
    ("trio scheduler (run loop, epoll, timeouts)", r"trio/_core/|trio/_timeouts"),
]
"""Stages of one object's trip through the engine operator, for ``--stages``: a sample counts for
the first stage (in this order) whose pattern matches anywhere in its stack."""
COMPILED_STAGES = [(name, re.compile(pattern)) for name, pattern in STAGES]


IDLE = re.compile(r"EpollIOManager\.get_events|EpollSelector\.select|KqueueIOManager\.get_events")
"""Innermost frames that are the event loop waiting for I/O: py-spy does not always see them as idle."""


def layer(location: str) -> str:
    for name, pattern in COMPILED:
        if pattern.search(location):
            return name
    return "other (stdlib, builtins, ...)"


def stage(stack: str) -> str:
    for name, pattern in COMPILED_STAGES:
        if pattern.search(stack):
            return name
    return "other (stack without a known frame)"


def pyspy(path: str, top: int, stages: bool = False) -> None:
    own: Counter[str] = Counter()
    by_stage: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    sites: Counter[str] = Counter()
    total = idle = 0
    with open(path) as handle:
        for line in handle:
            stack, _, count_text = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            count = int(count_text)
            frames = stack.split(";")
            if IDLE.search(frames[-1]):
                idle += count
                continue
            total += count
            own[re.sub(r":\d+\)$", ")", frames[-1])] += count
            layers[layer(frames[-1])] += count
            by_stage[stage(stack)] += count
            for label, needle in CALL_SITES:
                if needle in stack:
                    sites[label] += count
    print(f"{path}: {total} busy samples (shares below are of these), {idle} in the event loop's I/O wait left out")
    print("\nby layer (innermost frame):")
    for name, count in layers.most_common():
        print(f"  {100 * count / total:5.1f}%  {name}")
    if stages:
        print("\nby stage of an object's trip (first matching frame in the stack):")
        for name, _ in [*STAGES, ("other (stack without a known frame)", "")]:
            print(f"  {100 * by_stage[name] / total:5.1f}%  {name}")
    print("\ninclusive share of call sites:")
    for label, _ in CALL_SITES:
        print(f"  {100 * sites[label] / total:5.1f}%  {label}")
    print(f"\ntop {top} functions by own samples:")
    for frame, count in own.most_common(top):
        print(f"  {100 * count / total:5.1f}%  {frame}")


def cprofile(path: str, top: int) -> None:
    stats = pstats.Stats(path)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(tt for (_, _, tt, _, _) in entries.values())
    layers: Counter[str] = Counter()
    rows = []
    for (filename, lineno, func), (_, ncalls, tt, ct, _) in entries.items():
        layers[layer(filename if filename != "~" else func)] += tt
        rows.append((tt, ncalls, ct, f"{func} ({filename.split('site-packages/')[-1]}:{lineno})"))
    print(f"{path}: {total:.2f} s CPU in profiled functions")
    print("\nby layer (own time):")
    for name, tt in layers.most_common():
        print(f"  {100 * tt / total:5.1f}%  {tt:7.2f} s  {name}")
    print(f"\ntop {top} functions by own CPU time:")
    print(f"  {'share':>6} {'own s':>7} {'incl s':>7} {'calls':>9}  function")
    for tt, ncalls, ct, name in sorted(rows, reverse=True)[:top]:
        print(f"  {100 * tt / total:5.1f}% {tt:7.2f} {ct:7.2f} {ncalls:9d}  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--stages", action="store_true", help="py-spy: shares by stage of an object's trip")
    args = parser.parse_args()
    if args.profile.endswith(".pstats"):
        cprofile(args.profile, args.top)
    else:
        pyspy(args.profile, args.top, args.stages)


if __name__ == "__main__":
    main()
