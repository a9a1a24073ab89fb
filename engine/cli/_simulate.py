"""``python -m engine simulate``: seeded fault simulation of a plugin; exit 1 on a violation.

The first line says which simulation runs (found beside the plugin, given with
``--simulation``, or the default one); on a terminal one line, rewritten in place, shows the
seeds done, the violations so far and the seeds per second.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from ..kube import PluginError, load_plugin
from ..testing import (
    DEFAULT_BOUND,
    DEFAULT_DURATION,
    DEFAULT_SEED_TIMEOUT,
    Simulation,
    SimulationResult,
    find_simulation,
    load_simulation,
    parse_fault_kinds,
    simulate_seeds,
)
from ._args import ArgumentParser
from ._progress import SeedProgress

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m engine simulate",
        description=(
            "Run a plugin through seeded workloads and faults under virtual time, with trio's scheduling "
            "fixed by the seed, checking the engine's guarantees at every step. Exits 1 on a violation, "
            "printing the seed, a replay command and the last steps of the trace."
        ),
    )
    parser.add_argument("--plugin", help="plugin to simulate: bundled name, entry point or module:attr")
    parser.add_argument("--simulation", metavar="MODULE:ATTR",
                        help="the Simulation to run (default: the plugin's own, found beside it, else the default one)")
    parser.add_argument("--seeds", type=int, default=None, help="how many seeds to run (default 100, or 1 with --seed)")
    parser.add_argument("--seed", type=int, default=None, help="the first seed (default 0); alone, replays that seed")
    parser.add_argument("--faults", default="all", help="comma-separated fault kinds, 'all' (default) or 'none'")
    parser.add_argument("--duration", type=float, default=DEFAULT_DURATION,
                        help=f"virtual seconds of workload and faults (default {DEFAULT_DURATION:g})")
    parser.add_argument("--bound", type=float, default=DEFAULT_BOUND,
                        help=f"virtual seconds to converge once the faults stop (default {DEFAULT_BOUND:g})")
    parser.add_argument("--budget", type=float, default=None,
                        help="stop starting new seeds after this many seconds of wall time")
    parser.add_argument("--seed-timeout", type=float, default=DEFAULT_SEED_TIMEOUT, metavar="SECONDS",
                        help="report a seed as hung (a violation, with its replay command) once it ran this many "
                             f"seconds of wall time (default {DEFAULT_SEED_TIMEOUT:g}; 0: no limit)")
    parser.add_argument("--jobs", type=int, default=1, metavar="J",
                        help="run seeds in J worker processes (same results as one; default 1)")
    parser.add_argument("--no-rbac", dest="rbac", action="store_false",
                        help="run the replicas as cluster admin instead of as the plugin's ServiceAccount under the "
                             "Role `python -m engine manifests` generates (the default; a 403 is then a violation)")
    parser.add_argument("--scale-out", action="store_true",
                        help="run the replicas as members of a scale-out ring (two at first) instead of with leader "
                             "election, with the faults scale-up, scale-down, crash and partition (not lease-loss)")
    parser.add_argument("--no-webhooks", dest="webhooks", action="store_false",
                        help="do not register the plugin's admission and conversion webhooks (by default they are, "
                             "served by the live replicas, and nothing a validating one must refuse may be stored)")
    parser.add_argument("--keep-going", action="store_true", help="run every seed even after a violation")
    parser.add_argument("--trace", type=int, default=40, metavar="N", help="trace entries to print on a violation")
    parser.add_argument("--show-trace", action="store_true", help="print the whole trace of every seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="let the engine's logs through (to stderr)")
    return parser


def main(argv: list[str]) -> int:
    """Parse ``argv`` (without the program name), simulate, return the exit code: 0 when every
    seed held, 1 on a violation (a hung seed included), 2 for bad arguments or a plugin that
    cannot be loaded, 130 when interrupted (Ctrl-C)."""
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
    if args.seed_timeout < 0:
        print("python -m engine simulate: --seed-timeout must be >= 0", file=sys.stderr)
        return 2
    if args.duration <= 0 or args.bound <= 0 or (args.seeds is not None and args.seeds < 1) or args.jobs < 1:
        print("python -m engine simulate: --duration, --bound, --seeds and --jobs must be > 0", file=sys.stderr)
        return 2
    if args.plugin is None and args.simulation is None:
        print("python -m engine simulate: give --plugin, --simulation or both", file=sys.stderr)
        return 2
    try:
        simulation, origin = _simulation(args.plugin, args.simulation)
    except PluginError as exc:
        print(f"python -m engine simulate: {exc}", file=sys.stderr)
        return 2
    print(f"{simulation.plugin.name}: simulation {origin}", flush=True)
    if not args.verbose:
        logging.disable(logging.CRITICAL)
    first = 0 if args.seed is None else args.seed
    count = args.seeds if args.seeds is not None else (1 if args.seed is not None else 100)
    started = time.perf_counter()
    progress = SeedProgress(sys.stdout, count)
    done: list[SimulationResult] = []

    def on_result(result: SimulationResult) -> None:
        done.append(result)
        progress.update(len(done), sum(not r.ok for r in done))

    progress.update(0, 0)
    try:
        results = simulate_seeds(
            simulation, range(first, first + count), budget=args.budget, keep_going=args.keep_going,
            on_result=on_result, faults=kinds, duration=args.duration, bound=args.bound, plugin=args.plugin,
            simulation_ref=args.simulation, jobs=args.jobs, rbac=args.rbac, scale_out=args.scale_out,
            webhooks=args.webhooks, seed_timeout=args.seed_timeout or None,
        )
    except (KeyboardInterrupt, BaseExceptionGroup) as exc:
        # Ctrl-C reaches the seed's trio.run, which may raise it within a group of its tasks'.
        if isinstance(exc, BaseExceptionGroup) and exc.split(KeyboardInterrupt)[0] is None:
            raise
        progress.clear()
        print(f"{simulation.plugin.name}: interrupted after {len(done)} seed(s) from {first}", flush=True)
        return 130
    finally:
        progress.clear()
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


def _simulation(plugin: str | None, ref: str | None) -> tuple[Simulation, str]:
    """The simulation to run and how to name where it came from. Raises
    :class:`~engine.kube.PluginError` when it cannot be loaded, or when ``--plugin`` names
    another plugin than the ``--simulation``'s."""
    if ref is None:
        assert plugin is not None
        return find_simulation(plugin)
    simulation = load_simulation(ref)
    if plugin is not None and (named := load_plugin(plugin).name) != simulation.plugin.name:
        raise PluginError(
            f"simulation {ref!r} is for plugin {simulation.plugin.name!r}, not {named!r}"
        )
    return simulation, f"{ref} (--simulation)"
