"""The replica observers: what the engine of each replica reports (triggers, runs, readiness, events, a lost lease, ring changes), checked as it happens."""

from __future__ import annotations

import attrs
import trio

from engine import CancelCause, Controller, Event, ObjectRef, Outcome, OutcomeKind, Run, RunObserver, Trigger

from ._checks import Checks
from ._notifications import Notifications
from ._replica import CUT_KEPT, ROUTINE, Replica

__all__ = ["ReplicaObserver"]

_QUIET = frozenset({OutcomeKind.SUPERSEDED, OutcomeKind.SHUTDOWN, OutcomeKind.LEADERSHIP_LOST, OutcomeKind.HANDOVER})
_NOT_FAILURES = frozenset(
    {CancelCause.SUPERSEDED, CancelCause.SHUTDOWN, CancelCause.LEADERSHIP_LOST, CancelCause.HANDOVER}
)


@attrs.define(eq=False)
class ReplicaObserver(RunObserver):
    """The observer of one life of a replica: the engine's run hooks, its event tap, its lease
    loss and its ring's changes, recorded on the :class:`Replica` and checked."""

    replica: Replica
    checks: Checks
    notifications: Notifications

    def ring_changed(self) -> None:
        rep, checks = self.replica, self.checks
        ring = rep.ring
        if ring is None:
            return
        stats = ring.statistics()
        ranges = stats.owned | stats.releasing
        if not rep.may_run or rep.may_run[-1][1] != ranges:
            rep.may_run.append((trio.current_time(), ranges, checks.serial))
        checks.check_exclusive(rep)
        checks.covered(rep)

    def tap(self, event: Event) -> None:
        rep, checks = self.replica, self.checks
        rep.emitted.append((trio.current_time(), event))
        if rep.lost_at is not None and trio.current_time() > rep.lost_at:
            checks.verdict.fail(f"{rep.identity} emitted {event.type.value} {event.reason} about {event.involved} "
                                f"{trio.current_time() - rep.lost_at:.3f}s after it lost its lease (no fencing)")

    def lose(self, reason: str) -> None:
        rep, checks = self.replica, self.checks
        rep.lost_at = trio.current_time()
        checks.verdict.trace.add(rep.identity, "lease", f"lost: {reason}")
        self.notifications.forget_obligations(rep.identity)

    def on_trigger(self, controller: Controller, trigger: Trigger, superseded: Run | None) -> None:
        rep, checks = self.replica, self.checks
        checks.serial += 1
        rep.last_trigger[(controller.name, trigger.ref)] = (checks.serial, trigger)
        text = f"{controller.name} {trigger.ref} #{trigger.sequence} {trigger.reason or ''}".rstrip()
        if superseded is not None:
            text += f"; supersedes {superseded.id}"
            rep.cancelled_at.setdefault(superseded.id, trio.current_time())
        checks.verdict.trace.add(rep.identity, "trigger", text)
        kind, _, change = (trigger.reason or "").partition(" ")
        if kind == trigger.ref.kind and change in ("added", "modified", "deleted"):
            self.notifications.learn_direct(rep, controller.name, trigger.ref)
            self.notifications.discharge(rep.identity, controller.name, trigger.ref, change, trigger.revision)

    def on_run_started(self, controller: Controller, run: Run) -> None:
        rep, checks = self.replica, self.checks
        checks.serial += 1
        key = (controller.name, run.key)
        rep.last_start[key] = checks.serial
        rep.waiting.pop(key, None)
        rep.pending.pop(key, None)
        rep.running[key] = run
        if rep.ring is not None and (known := rep.ring.gate.key_of(run.key)) is not None:
            rep.started_under[key] = known
        checks.run_keys.add((run.key.kind, run.key.group, run.key.namespace or None, run.key.name))
        checks.place(rep.identity, run)
        checks.verdict.trace.add(rep.identity, "start", f"{run.id} {run.key} trigger #{run.trigger.sequence} attempt {run.attempt}")
        other = checks.in_progress.get(key)
        if other is not None and other[0] != rep.identity and not checks.check_overlap:
            checks.verdict.trace.add(rep.identity, "overlap", f"{run.id} runs {run.key} while {other[0]} {other[1]} does "
                                     "(the overlap check is off)")
        elif other is not None:
            since = checks.restored_lease_window()
            if other[0] == rep.identity:
                checks.verdict.fail(f"two runs of {run.key} at once on one replica: {rep.identity} {other[1]} and {run.id} "
                                    "(the queue handed out a key that was still processing)")
            elif since is None and not checks.recreated(other, (rep.identity, run.id)):
                checks.verdict.fail(f"two runs of {run.key} at once across replicas: {other[0]} {other[1]} and {rep.identity} "
                                    f"{run.id} (no fencing)")
            elif since is None:
                checks.verdict.trace.add(rep.identity, "overlap", f"{run.id} runs {run.key} while {other[0]} {other[1]} does: "
                                         "they know the name by different uids (an object re-created under its name: a known limit "
                                         "of scale-out)")
            else:
                checks.verdict.trace.add(rep.identity, "overlap", f"{run.id} runs {run.key} while {other[0]} {other[1]} does, "
                                         f"{since:.3f}s after a history rewind brought back an older Lease (allowed for renew_deadline)")
        checks.in_progress[key] = (rep.identity, run.id)

    def on_run_finished(self, controller: Controller, run: Run, outcome: Outcome) -> None:
        rep, checks = self.replica, self.checks
        key = (controller.name, run.key)
        rep.running.pop(key, None)
        rep.ended[key] = run
        self._check_shielded(run)
        self._check_requeued(run, outcome)
        if run.cause is not None and not run.forced and not run.shields_at_cancel and run.finished_at is not None:
            rep.cut_unshielded = [r for r in rep.cut_unshielded
                                  if r.finished_at is not None and r.finished_at >= run.finished_at - CUT_KEPT]
            rep.cut_unshielded.append(run)
        if checks.in_progress.get(key) == (rep.identity, run.id):
            del checks.in_progress[key]
        checks.placed.pop((rep.identity, run.id), None)
        cause = f" cause {run.cause.value}" if run.cause is not None else ""
        error = f": {type(outcome.error).__name__}" if outcome.error is not None else ""
        checks.verdict.trace.add(rep.identity, "end", f"{run.id} {run.key} {outcome.kind.value}{cause}{error}")
        if outcome.kind in _QUIET:
            rep.quiet_runs.add(run.id)
        if run.cause in _NOT_FAILURES and outcome.is_failure:
            checks.verdict.fail(f"run {rep.identity} {run.id} of {run.key} was cancelled ({run.cause.value}) but counted as "
                                f"{outcome.kind.value}: an error metric for a run that did not fail")
        if outcome.kind in _QUIET and run.id in rep.failure_status and run.id not in rep.failed_before_cancel:
            checks.verdict.fail(f"run {rep.identity} {run.id} of {run.key} wrote a failure status and ended "
                                f"{outcome.kind.value}: a run the engine cancelled must not report failure")
        if outcome.kind is OutcomeKind.SHUTDOWN and rep.stop_at is not None and run.finished_at is not None:
            ran = run.finished_at - rep.stop_at
            if ran < checks.grace_period - 1e-6:
                checks.verdict.fail(f"run {rep.identity} {run.id} of {run.key} was cancelled {ran:.3f}s after the graceful stop, "
                                    f"before the grace period of {checks.grace_period:g}s ended (no drain)")
        if outcome.kind is OutcomeKind.DEPENDENCY_NOT_READY:
            rep.waiting[key] = outcome.dependencies

    def _check_requeued(self, run: Run, outcome: Outcome) -> None:
        """A run that the server failed a write of, and that did not write it again and get it
        written, does not end as a success: its key would not run again (no retry, no
        backoff), and what the write was for would wait for the next change, or forever. A run
        the engine cancelled is let off: its key runs again (here, or on the replica it goes to)."""
        rep, checks = self.replica, self.checks
        failed = rep.unretried.pop(run.id, None)
        if failed and outcome.kind is OutcomeKind.SUCCEEDED and run.cause is None:
            first = next(iter(failed.values()))
            more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
            checks.verdict.fail(f"run {rep.identity} {run.id} of {run.key} ended as a success, but the server failed its "
                                f"write {first}{more} and the run did not write it again: a failure not requeued")

    def _check_shielded(self, run: Run) -> None:
        """A run cancelled inside a ``shield`` gets its final write to the server, or reports
        (its shield timed out) that it did not."""
        rep, checks = self.replica, self.checks
        if not run.shields_at_cancel or run.cause is None or run.forced or run.finished_at is None:
            return
        if any(scope.cancelled_caught for scope in run.shields_at_cancel):
            checks.verdict.trace.add(rep.identity, "shield", f"{run.id} {run.key}: its shielded write did not finish in time "
                                     "(the run reports it)")
            return
        since = rep.cancelled_at.get(run.id, rep.stop_at if run.cause is CancelCause.SHUTDOWN else rep.lost_at)
        if since is None:
            return
        writes = self.notifications.log.writes(actor=rep.identity, since=since)
        if not any(since <= r.answered_at <= run.finished_at for r in writes if r.served.kind not in ROUTINE):
            checks.verdict.fail(f"run {rep.identity} {run.id} of {run.key} was cancelled ({run.cause.value}) inside a shielded "
                                f"write at {since - checks.verdict.trace.origin:.3f}s, but no write of it reached the server before it "
                                f"ended at {run.finished_at - checks.verdict.trace.origin:.3f}s, and it did not report a cut write")

    def on_ready(self, ref: ObjectRef, revision: str | None) -> None:
        rep, checks = self.replica, self.checks
        checks.verdict.trace.add(rep.identity, "ready", str(ref))
        now = trio.current_time()
        for key, dependencies in rep.waiting.items():
            if ref in dependencies and key not in rep.pending:
                rep.pending[key] = (now, ref)

