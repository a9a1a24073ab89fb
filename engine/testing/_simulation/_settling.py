"""Settling: once the faults stopped, everything converges within the bound, what is owed is paid, and the replicas stop."""

from __future__ import annotations

import attrs
import trio
import trio.testing

from ._checks import OWNED_AGAIN_BOUND
from ._fleet import TICK, Fleet
from ._notifications import WATCH_BOUND
from ._oracle import Oracle
from ._spec import Simulation

__all__ = ["Settler"]


@attrs.define(eq=False)
class Settler:
    """Waits, once the faults stopped, for the plugin's objects to converge within ``bound``
    seconds (counted from the end of the longest rate-limited backoff then pending), then for
    every watched change still owed a trigger and every key-space range lost to be owned again;
    then stops the replicas and makes the last checks."""

    simulation: Simulation
    oracle: Oracle
    fleet: Fleet
    bound: float

    async def settle(self) -> None:
        assert self.oracle.checks.state is not None
        # A key that failed often during the faults waits out its backoff (up to the rate
        # limiter's cap, 1000 s by default) before its next run: the bound starts after it.
        backoff = max((c.queue.statistics().last_delay_ends_in for rep in self.oracle.roster.current.values() if rep.alive
                       and rep.harness is not None for c in rep.harness.manager.controllers), default=0.0)
        if backoff > 0:
            self.oracle.trace.add("sim", "settle", f"the last rate-limited retry is due in {backoff:.3f}s")
        deadline = trio.current_time() + backoff + self.bound
        while True:
            problems = (self.simulation.convergence(self.oracle.checks.state) if not self.fleet.restarting
                        else ["a replica is restarting"])
            if not problems:
                self.oracle.trace.add("sim", "settle", "converged")
                await self._owed_paid()
                await self._owned_again()
                return
            if trio.current_time() >= deadline:
                shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
                after = f" and a backoff of {backoff:.1f}s" if backoff > 0 else ""
                self.oracle.verdict.fail(f"not converged {self.bound:g}s after the faults stopped{after}: {shown}")
                await trio.sleep_forever()
            await trio.sleep(TICK)

    async def _owned_again(self) -> None:
        """Scale-out mode, once converged: wait until every range a crashed or cut-off replica
        owned is owned again (:meth:`Checks.check_owned_again` fails at its bound): a range that holds
        no object the convergence check looks at is not let off because everything converged."""
        if not self.oracle.checks.unowned:
            return
        self.oracle.trace.add("sim", "settle", f"{len(self.oracle.checks.unowned)} lost range(s) not owned again yet")
        deadline = trio.current_time() + 2 * OWNED_AGAIN_BOUND
        while self.oracle.checks.unowned and self.oracle.verdict.violation is None:
            if trio.current_time() >= deadline:
                item = self.oracle.checks.unowned[0]
                self.oracle.verdict.fail(f"{100 * item.remaining.share:.1f}% of the key space that {item.victim} owned when it "
                                         f"{item.what} at {item.at - self.oracle.trace.origin:.3f}s was still owned by no live replica "
                                         f"{2 * OWNED_AGAIN_BOUND:g}s after everything converged")
                return
            await trio.sleep(TICK / 10)

    async def _owed_paid(self) -> None:
        """Once converged: wait until every watched change still owed a trigger got it, or
        its :data:`WATCH_BOUND` passed (the monitor then reports it): a change dropped late in
        the faults is not let off because everything converged before its bound."""
        if not self.oracle.notifications.obligations:
            return
        owed_now = len(self.oracle.notifications.obligations)
        self.oracle.trace.add("sim", "settle", f"{owed_now} watched change(s) still owed a trigger")
        deadline = trio.current_time() + 2 * WATCH_BOUND
        while self.oracle.notifications.obligations and self.oracle.verdict.violation is None:
            if trio.current_time() >= deadline:
                (identity, controller, ref), owed = next(iter(self.oracle.notifications.obligations.items()))
                self.oracle.verdict.fail(f"{identity} {controller}: {owed.change} of {ref} at "
                                         f"{owed.at - self.oracle.trace.origin:.3f}s "
                                         f"still had no trigger from its watch handler {2 * WATCH_BOUND:g}s after everything "
                                         "converged, its replica being refused reads all along")
                return
            await trio.sleep(TICK)
            self.oracle.notifications.check_notifications()

    async def finish(self) -> None:
        await trio.testing.wait_all_tasks_blocked()
        self.oracle.checks.check_quiescent()
        self.oracle.checks.check_wakeups()
        self.oracle.checks.check()
        for rep in list(self.oracle.roster.current.values()):
            if rep.alive:
                self.fleet.stop(rep)
        for rep in list(self.oracle.roster.current.values()):
            await rep.done.wait()
        for rep in self.oracle.roster.replicas:
            self.oracle.checks.check_events(rep)
        self.oracle.trace.add("sim", "end", f"{sum(len(r.harness.runs) for r in self.oracle.roster.replicas if r.harness)} runs")
