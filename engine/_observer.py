"""Observing runs: hooks for metrics, the live stream and tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ._outcome import Outcome, OutcomeKind
from ._refs import ObjectRef, Trigger
from ._run import Run

if TYPE_CHECKING:
    from ._controller import Controller

__all__ = ["RunObserver", "RunRecord", "RunLog"]


class RunObserver:
    """Base class of run observers; override what you need.

    Every hook is called synchronously on the engine's hot path: it must be cheap, must not
    block and must not raise.
    """

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        """A trigger was accepted; ``superseded`` is the run it cancelled, if any."""

    def on_run_started(self, controller: Controller, run: Run) -> None:
        """A run started."""

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        """A run ended with ``outcome``."""

    def on_ready(self, ref: ObjectRef, revision: str | None) -> None:
        """``ref`` was reported ready (``Manager.mark_ready``), before its dependents are triggered."""


@attrs.frozen
class RunRecord:
    """One finished run, as :class:`RunLog` keeps it."""

    controller: str
    key: ObjectRef
    run_id: str
    trigger: Trigger
    attempt: int
    outcome: Outcome
    started_at: float
    finished_at: float

    @property
    def kind(self) -> OutcomeKind:
        return self.outcome.kind


class RunLog(RunObserver):
    """Keeps every finished run in :attr:`records`, and started runs in :attr:`started`."""

    def __init__(self) -> None:
        self.records: list[RunRecord] = []
        self.started: list[tuple[str, ObjectRef, Trigger, float]] = []

    def on_run_started(self, controller: Controller, run: Run) -> None:
        self.started.append((controller.name, run.key, run.trigger, run.started_at))

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        self.records.append(
            RunRecord(
                controller=controller.name,
                key=run.key,
                run_id=run.id,
                trigger=run.trigger,
                attempt=run.attempt,
                outcome=outcome,
                started_at=run.started_at,
                finished_at=run.finished_at if run.finished_at is not None else run.started_at,
            )
        )

    def kinds(self, key: ObjectRef | None = None) -> list[OutcomeKind]:
        """Outcome kinds in order, optionally for one key."""
        return [r.kind for r in self.records if key is None or r.key == key]

    def for_key(self, key: ObjectRef) -> list[RunRecord]:
        return [r for r in self.records if r.key == key]
