"""The request audit: every request the embedded server answered, judged from outside the engine (fencing, ownership, writes within runs, least privilege, webhook calls)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import ClassVar

import attrs

from engine import ObjectRef
from engine._keyspace import fnv1a64

from ...apiserver import Change, RequestLog, RequestRecord, ServedRequest
from .._admission_check import AdmissionCheck
from .._target import KubeTarget
from .._webhook_service import WebhookCall
from ._checks import Checks
from ._notifications import Notifications
from ._replica import REPLICA, ROUTINE, Roster
from ._spec import Simulation
from ._verdict import Verdict

__all__ = ["RequestAudit", "LATE_WRITE_BOUND"]

LATE_WRITE_BOUND = 5.0
"""Seconds a write that arrived before its replica lost its lease may land after the loss
(it was in flight, held up by latency); a later landing is a violation."""
CALLS_KEPT = 120.0
"""Seconds of webhook calls kept to tell a webhook's denial from a missing permission."""


@attrs.define(eq=False)
class RequestAudit:
    """Judges each request the server answered (a request observer: :meth:`on_request`), and
    each webhook call (:meth:`webhook_called`) and admitted write (:meth:`admitted`)."""

    simulation: Simulation
    verdict: Verdict
    roster: Roster
    checks: Checks
    notifications: Notifications
    target: KubeTarget | None = None
    webhook_calls: list[WebhookCall] = attrs.field(factory=list)
    """The webhook calls of the last :data:`CALLS_KEPT` seconds."""
    admission: AdmissionCheck | None = None
    """The admission check, while the plugin's validating webhooks are registered and the
    simulation has oracles for them."""
    check_cut: ClassVar[bool] = True
    """Whether a status write landing after its run was cancelled outside any shield is a
    violation; tests turn it off to show that a plugin's invariant catches the bug alone."""

    @property
    def log(self) -> RequestLog:
        return self.notifications.log

    def on_request(self, served: ServedRequest) -> None:
        actor = served.user_agent.split("/", 1)[0] or "?"
        self.notifications.on_read(actor, served)
        if served.status == 403 and actor.startswith(REPLICA) and not self._denied_by_webhook(served):
            self._forbidden(actor, served)
        if served.verb in ("get", "list", "watch"):
            return
        name = served.name if served.kind != "Event" else None  # Event names carry a wall-clock suffix
        where = f"{served.namespace}/{name or ''}" if served.namespace else str(name or "")
        sub = f"/{served.subresource}" if served.subresource else ""
        failure = False
        if served.subresource == "status" and served.verb in ("patch", "update") and actor.startswith(REPLICA):
            try:
                body = json.loads(served.body or b"null")
            except ValueError:
                body = None
            status = body.get("status") if isinstance(body, Mapping) else None
            failure = isinstance(status, Mapping) and self.simulation.failure_status(status)
            rep = next((r for r in self.roster.replicas if r.identity == actor), None)
            run = rep.object_run(served.kind, served.namespace, served.name) if rep is not None else None
            if failure and run is not None and rep is not None:
                if run.cause is None or run.shields & run.shields_at_cancel:
                    # Written from a shield the run entered before the engine cancelled it: it
                    # failed, and began reporting so, before the cancellation.
                    rep.failed_before_cancel.add(run.id)
                if served.status < 300:
                    rep.failure_status.add(run.id)
        record = self.log.records[-1] if self.log.records and self.log.records[-1].served is served else None
        if record is not None and record.ok:
            if actor.startswith(REPLICA) and served.kind not in ROUTINE:
                self._check_fenced(record)
                self._check_within_run(record)
                self._check_cut(record)
                self._check_released(record)
        routine = served.kind in ("Lease", "Event") and served.status < 300
        if not routine:
            self.verdict.trace.add("api", "write", f"{actor} {served.verb} {served.kind} {where}{sub} -> {served.status}"
                                   + (" (failure status)" if failure else ""))

    def _forbidden(self, actor: str, served: ServedRequest) -> None:
        """A replica was refused a request (no fault answers 403): its plugin's generated Role
        lacks a rule the plugin needs."""
        assert self.target is not None and self.target.api is not None
        plural = next((rt.plural for rt in self.target.api.store.types()
                       if rt.kind == served.kind and rt.group == served.group), served.kind.lower())
        resource = f"{plural}.{served.group}" if served.group else plural
        sub = f"/{served.subresource}" if served.subresource else ""
        where = f' in namespace "{served.namespace}"' if served.namespace else ""
        name = f" {served.name}" if served.name else ""
        self.verdict.fail(f"{actor} was refused {served.verb} {resource}{sub}{name}{where} (403 Forbidden): the Role "
                          f"`python -m engine manifests` generates for {self.simulation.plugin.name} does not grant it")

    def _describe(self, record: RequestRecord) -> str:
        served = record.served
        where = f"{served.namespace}/{served.name or ''}" if served.namespace else str(served.name or "")
        return f"{served.verb} {served.kind} {where}" + (f"/{served.subresource}" if served.subresource else "")

    def _check_fenced(self, record: RequestRecord) -> None:
        """No write by a replica after it lost its lease: by its own report (``on_lost``), or
        as the server saw the Lease (it no longer held it). A write that arrived before the
        loss and landed after it was in flight: traced, and allowed for :data:`LATE_WRITE_BOUND`."""
        rep = self.roster.named(record.actor)
        if rep is None or rep.harness is None or rep.harness.manager.leader_election is None:
            return
        what = self._describe(record)
        if rep.lost_at is not None and record.answered_at > rep.lost_at:
            late = record.answered_at - rep.lost_at
            if record.received_at > rep.lost_at:
                self.verdict.fail(f"{rep.identity} wrote ({what}) {record.received_at - rep.lost_at:.3f}s after it lost its "
                                  "lease (no fencing)")
            elif late > LATE_WRITE_BOUND:
                self.verdict.fail(f"{rep.identity}'s write ({what}) landed {late:.3f}s after it lost its lease, beyond the "
                                  f"{LATE_WRITE_BOUND:g}s a write in flight may take")
            else:
                self.verdict.trace.add(rep.identity, "late",
                                       f"{what} was in flight when the lease was lost; landed {late:.3f}s later")
            return
        if record.lease is None and self.checks.restored_lease_window(record.received_at) is None:
            self.verdict.fail(f"{rep.identity} wrote ({what}) at {record.received_at - self.verdict.trace.origin:.3f}s "
                              "without holding the Lease, as the server saw it (no fencing)")

    def _check_released(self, record: RequestRecord) -> None:
        """Scale-out mode: a write of a key's object by a ring replica arrives while that
        replica's gate owns the key's range or is still handing it over (as the ring announced
        it), not after the handover returned or a fence revoked it; one that arrived before and
        landed after was in flight: traced, and allowed for :data:`LATE_WRITE_BOUND`."""
        served = record.served
        rep = self.roster.named(record.actor)
        if rep is None or rep.ring is None or record.name is None:
            return
        ident = (served.kind, served.group, served.namespace or None, record.name)
        if ident not in self.checks.run_keys:
            return
        uid = record.uid or self.notifications.uids.get(ident)
        if uid is None:
            return
        key = fnv1a64(uid)
        what = self._describe(record)
        ref = ObjectRef(served.kind, record.name, served.namespace or None, served.group)
        # The keys the replica knows the name by: now, and when each run of it in progress
        # started (the gate may have learnt a new uid since, while the run writes on).
        known = {rep.ring.gate.key_of(ref)} | {rep.started_under.get(k) for k in rep.running if k[1] == ref}
        received = rep.may_run_at(record.received_at)
        own = next((k for k in sorted(k for k in known if k is not None) if k != key and k in received), None)
        if own is not None:
            # docs/scale-out.md, known limits: the replica knows the name by an older uid (an
            # object deleted and re-created under its name); a run of the old object writes
            # the new one by name.
            self.verdict.trace.add(rep.identity, "recreated", f"{what}: written under the key of an older uid of that name, "
                                   "which it owned (an object re-created under its name: a known limit)")
            key = own
        given_up = rep.given_up_at(key, record.received_at)
        # Given up at the very instant the write arrived, with no run of the key started there
        # since: the write is one of a run that ended then (sent before the run's cancellation
        # took effect), in flight as any other.
        in_flight = given_up is not None and max(
            (n for (_, r), n in rep.last_start.items() if r == ref), default=-1) <= given_up
        if in_flight or key in rep.may_run_at(record.received_at):
            gone = record.received_at if in_flight else next(
                (when for when, held, _ in rep.may_run if when > record.received_at and key not in held), None)
            if gone is not None and record.answered_at > gone:
                late = record.answered_at - gone
                if late > LATE_WRITE_BOUND:
                    self.verdict.fail(f"{rep.identity}'s write ({what}) landed {late:.3f}s after it gave up the range of its "
                                      f"key, beyond the {LATE_WRITE_BOUND:g}s a write in flight may take")
                else:
                    self.verdict.trace.add(rep.identity, "late", f"{what} was in flight when the range of its key was given "
                                           f"up; landed {late:.3f}s later")
            return
        held_before = [when for when, held, _ in rep.may_run if when <= record.received_at and key in held]
        if not held_before:
            self.verdict.fail(f"{rep.identity} wrote ({what}) at {record.received_at - self.verdict.trace.origin:.3f}s, "
                              "an object whose key it never owned")
            return
        gone = next(when for when, held, _ in rep.may_run if when > held_before[-1] and key not in held)
        self.verdict.fail(f"{rep.identity} wrote ({what}) {record.received_at - gone:.3f}s after it gave up (released or "
                          "was fenced from) the range of its key")

    def _check_within_run(self, record: RequestRecord) -> None:
        """A status write of a key's object comes from a run of that key in progress: none
        arrives after the run ended. One that arrived before its run ended and landed after
        it was in flight (a cancelled request cannot be called back): traced, and allowed for
        :data:`LATE_WRITE_BOUND`."""
        served = record.served
        if served.subresource != "status":
            return
        rep = self.roster.named(record.actor)
        if rep is None or rep.object_run(served.kind, served.namespace, served.name) is not None:
            return
        ended = [run for (_, ref), run in rep.ended.items() if ref.kind == served.kind and ref.name == served.name
                 and (ref.namespace or None) == (served.namespace or None) and run.finished_at is not None]
        last = max(ended, key=lambda run: run.finished_at or 0.0, default=None)
        what = self._describe(record)
        if last is not None and last.finished_at is not None and record.received_at <= last.finished_at:
            late = record.answered_at - last.finished_at
            if late <= LATE_WRITE_BOUND:
                self.verdict.trace.add(rep.identity, "late",
                                       f"{what} was in flight when run {last.id} ended; landed {late:.3f}s later")
                return
            self.verdict.fail(f"{rep.identity}'s status write ({what}) landed {late:.3f}s after run {last.id} of its key "
                              f"ended, beyond the {LATE_WRITE_BOUND:g}s a write in flight may take")
            return
        origin = self.verdict.trace.origin
        ended_text = f"run {last.id} ended at {(last.finished_at or 0) - origin:.3f}s" if last else "no run of it"
        self.verdict.fail(f"{rep.identity}'s status write ({what}) arrived at {record.received_at - origin:.3f}s "
                          f"with no run of its key in progress ({ended_text}): a write of a run after the run ended")

    def _check_cut(self, record: RequestRecord) -> None:
        """A status write is a final write: it is made in a shield, which holds its run until
        the write lands. So none lands after its run ended if the engine cancelled that run
        while no shield of it was open (and the run was not forced to stop): the write was in
        flight unshielded, and was cut (it could as well have been lost)."""
        served = record.served
        rep = self.roster.named(record.actor)
        if not self.check_cut or served.subresource != "status" or rep is None or not rep.cut_unshielded:
            return
        ident = (served.kind, served.namespace or None, served.name)
        for run in rep.cut_unshielded:
            if (run.key.kind, run.key.namespace or None, run.key.name) != ident or run.finished_at is None:
                continue
            if not run.started_at <= record.received_at <= run.finished_at:
                continue
            if record.received_at == run.finished_at and rep.object_run(*ident) is not None:
                continue  # as likely the write of the run that started at that instant
            assert run.cause is not None
            origin = self.verdict.trace.origin
            self.verdict.fail(f"{rep.identity}'s status write ({self._describe(record)}) sent at "
                              f"{record.received_at - origin:.3f}s was in flight when the engine cancelled run {run.id} "
                              f"of its key ({run.cause.value}) outside any shield, and landed "
                              f"{record.answered_at - run.finished_at:.3f}s after the run ended (a final write left "
                              "unshielded)")
            return

    def webhook_called(self, call: WebhookCall) -> None:
        self.webhook_calls.append(call)
        while self.webhook_calls[0].asked_at < call.asked_at - CALLS_KEPT:
            del self.webhook_calls[0]

    def _denied_by_webhook(self, served: ServedRequest) -> bool:
        """Whether an admission webhook denied the write ``served`` (its 403 is then no
        missing permission): the answered Status says so, and a call of a webhook served by a
        replica denied that object while the write was being answered."""
        try:
            message = json.loads(served.reply or b"null").get("message", "")
        except (ValueError, AttributeError):
            return False
        if not (isinstance(message, str) and message.startswith("admission webhook ")
                and " denied the request" in message):
            return False
        return any(
            call.response is not None and not call.allowed and call.asked_at >= served.received_at
            and (call.request.get("kind") or {}).get("kind") == served.kind
            and call.request.get("name") == served.name and call.request.get("namespace") == served.namespace
            for call in self.webhook_calls
        )

    def admitted(self, change: Change) -> None:
        assert self.admission is not None
        violation, note = self.admission.committed(change)
        if violation is not None:
            self.verdict.fail(violation)
        elif note is not None:
            self.verdict.trace.add("sim", "admitted", note)
