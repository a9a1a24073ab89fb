"""Counters shared by the benchmark's operators: handler runs, total and per object.

``install(path)`` makes SIGUSR1 write the counters to ``path`` as JSON (atomically, with a
sequence number the driver waits for); they are also written at exit.
"""

from __future__ import annotations

import atexit
import json
import os
import signal
from collections import Counter
from typing import Any

runs: Counter[str] = Counter()
_path: str | None = None
_sequence = 0


def count(name: str) -> None:
    runs[name] += 1


def dump(*_: Any) -> None:
    global _sequence
    if _path is None:
        return
    _sequence += 1
    data = {"sequence": _sequence, "pid": os.getpid(), "runs_total": sum(runs.values()), "runs": dict(runs)}
    tmp = f"{_path}.tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, _path)


def install(path: str) -> None:
    global _path
    _path = path
    signal.signal(signal.SIGUSR1, dump)
    atexit.register(dump)


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
