"""The simulation's replay relies on trio internals (``trio._core._run._r`` and
``_ALLOW_DETERMINISTIC_SCHEDULING``): these tests fail if a trio upgrade removes them or
they stop making the run order a function of the seed."""

from __future__ import annotations

import random

import trio
import trio.testing
from trio._core import _run

from engine.testing._determinism import deterministic_scheduling


def _race() -> list[int]:
    order: list[int] = []

    async def worker(i: int) -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()
            order.append(i)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            for i in range(8):
                nursery.start_soon(worker, i)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    return order


def test_the_trio_internals_it_relies_on_exist() -> None:
    assert isinstance(_run._r, random.Random)
    assert isinstance(_run._ALLOW_DETERMINISTIC_SCHEDULING, bool)


def test_a_seed_fixes_the_run_order_and_different_seeds_give_different_orders() -> None:
    flag = _run._ALLOW_DETERMINISTIC_SCHEDULING
    orders = []
    for seed in range(6):
        with deterministic_scheduling(seed):
            first = _race()
        with deterministic_scheduling(seed):
            assert _race() == first
        orders.append(tuple(first))
    assert len(set(orders)) > 1
    assert _run._ALLOW_DETERMINISTIC_SCHEDULING == flag


def test_it_seeds_the_random_module_and_restores_it() -> None:
    state = random.getstate()
    with deterministic_scheduling(7):
        drawn = random.random()
    with deterministic_scheduling(7):
        assert random.random() == drawn
    assert random.getstate() == state
