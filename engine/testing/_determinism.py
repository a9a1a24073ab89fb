"""Deterministic scheduling for a trio run: the one place that relies on a trio internal.

trio runs each batch of runnable tasks in a random order drawn from a module-level
``random.Random`` (``trio._core._run._r``). When ``_ALLOW_DETERMINISTIC_SCHEDULING`` is set
(trio's Hypothesis integration sets it), the batch is first sorted by task creation order and
then shuffled with that generator, so seeding it makes the run order a function of the seed.
Both names are private to trio; ``tests/testing/test_simulate_determinism.py`` checks they
still exist and still have that effect, so a trio upgrade that removes them fails loudly. This
is the single exception ``tests/test_layering.py`` allows to the rule that no module touches
another module's private names.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from types import ModuleType

from ._errors import HarnessError

__all__ = ["deterministic_scheduling"]

_FLAG = "_ALLOW_DETERMINISTIC_SCHEDULING"


def _scheduler() -> ModuleType:
    from trio._core import _run

    if not isinstance(getattr(_run, "_r", None), random.Random) or not hasattr(_run, _FLAG):
        raise HarnessError(
            "this trio version has no deterministic scheduling hook (trio._core._run._r and "
            "_ALLOW_DETERMINISTIC_SCHEDULING); the simulation cannot replay a seed"
        )
    return _run


@contextlib.contextmanager
def deterministic_scheduling(seed: int) -> Iterator[None]:
    """Make every ``trio.run`` inside the block schedule tasks in an order fixed by ``seed``,
    and seed the ``random`` module's own generator (for code that draws from it directly).

    Restores trio's setting and both generators' states when leaving. The setting is global
    to the process: do not run two simulations at once in different threads.
    """
    run = _scheduler()
    flag = getattr(run, _FLAG)
    scheduler_state = run._r.getstate()
    module_state = random.getstate()
    setattr(run, _FLAG, True)
    run._r.seed(seed)
    random.seed(seed)
    try:
        yield
    finally:
        setattr(run, _FLAG, flag)
        run._r.setstate(scheduler_state)
        random.setstate(module_state)
