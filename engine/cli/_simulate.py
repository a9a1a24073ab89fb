"""``python -m engine simulate``: seeded fault simulation of a plugin; exit 1 on a violation."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from ..kube import PluginError
from ..testing._schedule import parse_fault_kinds
from ..testing._simulate import DEFAULT_BOUND, DEFAULT_DURATION, simulate_seeds
from ..testing._simulation import simulation_for

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m engine simulate",
        description=(
            "Run a plugin through seeded workloads and faults under virtual time, with trio's scheduling "
            "fixed by the seed, checking the engine's guarantees at every step. Exits 1 on a violation, "
            "printing the seed, a replay command and the last steps of the trace."
        ),
    )
    parser.add_argument("--plugin", required=True, help="plugin to simulate: bundled name, entry point or module:attr")
    parser.add_argument("--seeds", type=int, default=None, help="how many seeds to run (default 100, or 1 with --seed)")
    parser.add_argument("--seed", type=int, default=None, help="the first seed (default 0); alone, replays that seed")
    parser.add_argument("--faults", default="all", help="comma-separated fault kinds, 'all' (default) or 'none'")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION,
                        help=f"virtual seconds of workload and faults (default {DEFAULT_DURATION:g})")
    parser.add_argument("--bound", type=float, default=DEFAULT_BOUND,
                        help=f"virtual seconds to converge once the faults stop (default {DEFAULT_BOUND:g})")
    parser.add_argument("--budget", type=float, default=None,
                        help="stop starting new seeds after this many seconds of wall time")
    parser.add_argument("--keep-going", action="store_true", help="run every seed even after a violation")
    parser.add_argument("--trace", type=int, default=40, metavar="N", help="trace entries to print on a violation")
    parser.add_argument("--show-trace", action="store_true", help="print the whole trace of every seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="let the engine's logs through (to stderr)")
    return parser


def main(argv: list[str]) -> int:
    """Parse ``argv`` (without the program name), simulate, return the exit code: 0 when every
    seed held, 1 on a violation, 2 for bad arguments or a plugin that cannot be loaded."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        kinds = parse_fault_kinds(args.faults)
    except ValueError as exc:
        print(f"python -m engine simulate: {exc}", file=sys.stderr)
        return 2
    if args.duration <= 0 or args.bound <= 0 or (args.seeds is not None and args.seeds < 1):
        print("python -m engine simulate: --duration, --bound and --seeds must be > 0", file=sys.stderr)
        return 2
    try:
        simulation = simulation_for(args.plugin)
    except PluginError as exc:
        print(f"python -m engine simulate: {exc}", file=sys.stderr)
        return 2
    if not args.verbose:
        logging.disable(logging.CRITICAL)
    first = 0 if args.seed is None else args.seed
    count = args.seeds if args.seeds is not None else (1 if args.seed is not None else 100)
    started = time.perf_counter()
    try:
        results = simulate_seeds(
            simulation, range(first, first + count), budget=args.budget, keep_going=args.keep_going,
            faults=kinds, duration=args.duration, bound=args.bound, plugin=args.plugin,
        )
    finally:
        if not args.verbose:
            logging.disable(logging.NOTSET)
    wall = time.perf_counter() - started
    failed = [r for r in results if not r.ok]
    for result in results:
        if args.show_trace:
            print(f"--- seed {result.seed} (trace digest {result.digest[:16]})")
            print("\n".join(str(e) for e in result.trace))
        if not result.ok:
            print(result.report(args.trace))
    per_seed = wall / len(results) if results else 0.0
    summary = (f"{simulation.plugin.name}: {len(results)} seed(s) from {first}, {len(failed)} violation(s), "
               f"{wall:.1f}s ({per_seed:.2f}s per seed)")
    if len(results) < count and not failed:
        summary += f"; stopped by the budget of {args.budget:g}s"
    print(summary)
    return 1 if failed else 0
