"""Seeds per second of the simulator through the embedded server's memory transport (HTTP/1.1
bytes) and its direct transport, side by side in one process, alternating, so both see the
same machine load: ``python -m tests.testing.transport_bench [PLUGIN] [SEEDS]`` (default
``bundles 8``). The first pass also pays one-time costs (the CEL environment)."""

from __future__ import annotations

import logging
import sys
import time

from engine.testing import simulate, simulation_for
from engine.testing._simulation import _seed


def main(argv: list[str]) -> int:
    plugin = argv[0] if argv else "bundles"
    seeds = int(argv[1]) if len(argv) > 1 else 8
    logging.disable(logging.CRITICAL)
    simulation = simulation_for(plugin)
    for direct in (False, True, False, True):
        _seed.DIRECT_TRANSPORT = direct
        started = time.perf_counter()
        failed = [seed for seed in range(seeds) if not simulate(simulation, seed).ok]
        took = time.perf_counter() - started
        print(f"{plugin} {'direct' if direct else 'http  '} {seeds} seeds {took:.1f}s {seeds / took:.2f} seeds/s"
              + (f" violations at {failed}" if failed else ""), flush=True)
    _seed.DIRECT_TRANSPORT = True
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
