"""Shared helpers for the core tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

from engine import Manager, ShutdownReport


@asynccontextmanager
async def running(manager: Manager) -> AsyncIterator[list[ShutdownReport]]:
    """Run ``manager`` for the block, then stop it and wait; yields a list that gets the report."""
    reports: list[ShutdownReport] = []

    async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        reports.append(await manager.run(task_status=task_status))

    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        yield reports
        manager.stop("test finished")
