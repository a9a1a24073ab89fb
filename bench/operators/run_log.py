"""A plugin that logs the start and end of every run of the other plugins, for the fault campaign.

At ``info`` level the engine logs no line per run (only failures, and ``run ... ended`` at
``debug`` together with every HTTP request), so ``bench/fault_campaign.py`` adds this plugin next
to the bundled ones: a :class:`~engine.RunObserver` that writes ``run started`` and ``run ended``
records to the replica's JSON log (logger ``engine.campaign.runs``), each with ``controller``,
``object``, ``reconcileID``, ``pid`` and, at the end, ``outcome`` and ``cause``. The record's
``ts`` is the wall-clock time, so runs of different replicas can be laid side by side.
"""

from __future__ import annotations

import logging
import os

from engine import Controller, Outcome, Run, RunObserver
from engine.kube import Plugin, PluginContext

logger = logging.getLogger("engine.campaign.runs")


class RunLog(RunObserver):
    """Logs every run's start and end (cheap, synchronous, never raises)."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def on_run_started(self, controller: Controller, run: Run) -> None:
        logger.info("run started", extra={"controller": run.controller, "object": str(run.key),
                                          "reconcileID": run.id, "pid": self.pid})

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        logger.info("run ended", extra={"controller": run.controller, "object": str(run.key),
                                        "reconcileID": run.id, "pid": self.pid, "outcome": outcome.kind.value,
                                        "cause": None if run.cause is None else run.cause.value})


async def _setup(ctx: PluginContext) -> None:
    ctx.manager.add_observer(RunLog())


plugin = Plugin(name="run-log", setup=_setup, description="Logs every run's start and end (fault campaign).")
