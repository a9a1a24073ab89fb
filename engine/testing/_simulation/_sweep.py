"""Sweeping seeds: one after another or in forked worker processes, within a budget of wall time, stopping at the first violation."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ._result import SimulationResult
from ._seed import simulate
from ._spec import Simulation

__all__ = ["simulate_seeds"]


def simulate_seeds(
    simulation: Simulation,
    seeds: Sequence[int] | range,
    *,
    budget: float | None = None,
    keep_going: bool = False,
    on_result: Callable[[SimulationResult], None] | None = None,
    jobs: int = 1,
    **options: Any,
) -> list[SimulationResult]:
    """:func:`simulate` each seed in order; stop at the first violation (unless
    ``keep_going``) or once ``budget`` seconds of wall time are spent (the seeds in progress
    finish). ``on_result`` is called with each seed's result as soon as it and every earlier
    seed are known. Returns the results of the seeds that ran, in seed order.

    With ``jobs`` > 1, seeds run in that many forked worker processes, at most ``2 * jobs``
    ahead of the first unfinished one; the results (and the seeds they stop at) are those a
    sequential run gives, since each seed's run depends on the seed alone. Raises
    ``ValueError`` when ``jobs`` < 1."""
    if jobs < 1:
        raise ValueError("jobs must be >= 1")
    if jobs == 1:
        return _sequential(simulation, seeds, budget, keep_going, on_result, options)
    return _parallel(simulation, seeds, budget, keep_going, on_result, jobs, options)


def _sequential(
    simulation: Simulation, seeds: Iterable[int], budget: float | None, keep_going: bool,
    on_result: Callable[[SimulationResult], None] | None, options: Mapping[str, Any],
) -> list[SimulationResult]:
    results: list[SimulationResult] = []
    start = time.perf_counter()
    for seed in seeds:
        if budget is not None and results and time.perf_counter() - start >= budget:
            break
        result = simulate(simulation, seed, **options)
        results.append(result)
        if on_result is not None:
            on_result(result)
        if not result.ok and not keep_going:
            break
    return results


_WORKER_SIMULATION: list[Simulation] = []


def _worker_init(simulation: Simulation) -> None:
    import logging

    _WORKER_SIMULATION[:] = [simulation]
    logging.disable(logging.CRITICAL)


def _worker_run(seed: int, options: Mapping[str, Any]) -> SimulationResult:
    return simulate(_WORKER_SIMULATION[0], seed, **options)


def _parallel(
    simulation: Simulation, seeds: Iterable[int], budget: float | None, keep_going: bool,
    on_result: Callable[[SimulationResult], None] | None, jobs: int, options: Mapping[str, Any],
) -> list[SimulationResult]:
    import collections
    import concurrent.futures
    import multiprocessing

    results: list[SimulationResult] = []
    start = time.perf_counter()
    pending: collections.deque[concurrent.futures.Future[SimulationResult]] = collections.deque()
    todo = iter(seeds)
    context = multiprocessing.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_worker_init,
                                                initargs=(simulation,)) as pool:
        try:
            while True:
                while len(pending) < 2 * jobs and (budget is None or time.perf_counter() - start < budget
                                                   or not (results or pending)):
                    seed = next(todo, None)
                    if seed is None:
                        break
                    pending.append(pool.submit(_worker_run, seed, dict(options)))
                if not pending:
                    return results
                result = pending.popleft().result()
                results.append(result)
                if on_result is not None:
                    on_result(result)
                if not result.ok and not keep_going:
                    return results
        finally:
            for future in pending:
                future.cancel()
