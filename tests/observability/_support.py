"""Helpers for the observability tests: a run recorder to wait on, and a /metrics parser."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from engine import Controller, Outcome, OutcomeKind, Run, RunObserver

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class Recorder(RunObserver):
    """Records started and finished runs; :meth:`wait_until` waits for a condition on them."""

    def __init__(self) -> None:
        self.started: list[tuple[str, str, int]] = []
        self.finished: list[tuple[str, str, OutcomeKind]] = []
        self._changed = trio.Event()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def on_run_started(self, controller: Controller, run: Run) -> None:
        self.started.append((controller.name, str(run.key), run.attempt))
        self._poke()

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        self.finished.append((controller.name, str(run.key), outcome.kind))
        self._poke()

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    def kinds(self, key: str) -> list[OutcomeKind]:
        return [kind for _, k, kind in self.finished if k == key]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    return samples[(metric, frozenset(labels.items()))]


async def get(address: tuple[str, int] | None, path: str, **kwargs: object) -> httpx.Response:
    assert address is not None
    host, port = address
    async with httpx.AsyncClient() as client:
        return await client.get(f"http://{host}:{port}{path}", **kwargs)  # type: ignore[arg-type]
