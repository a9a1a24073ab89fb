"""Counters shared by the benchmark's operators: handler runs, total and per object, and, with
``BENCH_GC_STATS=1`` in the environment, the CPU time spent in the cyclic garbage collector
(``gc_s``, per generation in ``gc_by_generation``; off by default, as timing every collection
costs CPU itself: two clock reads per collection, tens of thousands of collections per run).

``install(path)`` makes SIGUSR1 write the counters to ``path`` as JSON (atomically, with a
sequence number the driver waits for); they are also written at exit.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import signal
import time
from collections import Counter
from typing import Any

runs: Counter[str] = Counter()
_path: str | None = None
_sequence = 0
_gc_started = 0.0
gc_seconds = [0.0, 0.0, 0.0]
gc_collections = [0, 0, 0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    global _gc_started
    if phase == "start":
        _gc_started = time.process_time()
    else:
        generation = info["generation"]
        gc_seconds[generation] += time.process_time() - _gc_started
        gc_collections[generation] += 1


def count(name: str) -> None:
    runs[name] += 1


def dump(*_: Any) -> None:
    global _sequence
    if _path is None:
        return
    _sequence += 1
    data: dict[str, Any] = {
        "sequence": _sequence,
        "pid": os.getpid(),
        "runs_total": sum(runs.values()),
        "runs": dict(runs),
    }
    if _on_gc in gc.callbacks:
        data["gc_s"] = sum(gc_seconds)
        data["gc_by_generation"] = {"seconds": gc_seconds, "collections": gc_collections}
    tmp = f"{_path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, _path)


def install(path: str) -> None:
    global _path
    _path = path
    signal.signal(signal.SIGUSR1, dump)
    atexit.register(dump)
    if os.environ.get("BENCH_GC_STATS") == "1":
        gc.callbacks.append(_on_gc)


def add_arguments(parser: Any) -> None:
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--stats", required=True, help="where SIGUSR1 and exit write the counters (JSON)")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--cprofile", help="write cProfile stats (CPU time) of the whole run to this path")
    parser.add_argument(
        "--transport", choices=("httpx", "lean"), default="httpx", help="engine and reference: httpx's default pool, or _lean.LeanTransport (kopf ignores it)",
    )


def profiler(path: str | None) -> Any:
    """A started cProfile profiler that measures CPU time (not wall time), or None."""
    if path is None:
        return None
    import cProfile
    import time

    profile = cProfile.Profile(time.process_time)
    profile.enable()
    return profile


GROUP = "bench.example.com"
VERSION = "v1"
KIND = "Widget"
PLURAL = "widgets"
