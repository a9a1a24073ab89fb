"""The simulator's admission check: nothing a validating webhook must refuse is stored while it is registered.

What must be refused is the simulation's own judgement (:class:`~engine.testing.AdmissionOracle`,
never the plugin's handler), made from outside the engine with three views of the server:

* its storage's change feed: each committed write of an oracle's kind;
* the calls on the wire to the webhooks (:class:`~engine.testing._webhook_service.WebhookCall`):
  which replica was asked about which object, when, and what it answered; at each call the
  objects of the kind that the server held then are noted (the truth when asked);
* what the server sent each replica of the kind: every watch event (a watch observer) and
  every full list it answered (not a page of a list cut by ``limit``), with when: what that
  replica's caches may hold.

A committed write (a create, or an update that changes more than status and server-set
metadata) that the oracle finds inadmissible is judged against the webhook call that allowed
it (the latest allowed call about that object with the same content):

* no such call: a violation (the server stored it without the webhook's consent), unless
  a call about it failed and the webhook's ``failurePolicy`` is ``Ignore``;
* admissible among the objects the server held when the webhook was asked: a concurrent
  write closed the gap after the call (two writes each admitted before the other was stored,
  which no webhook can see): traced;
* admissible among what the answering replica's caches may have held: each other object as
  the server had sent it at least :data:`SETTLE` seconds before the call, or as sent since
  (in flight: either may be in the cache), or as listed for it during the call; its caches
  could not know (a stale watch, a replica still syncing, a history rewind): traced;
* the webhook allowed it with a warning while that replica's reads were refused or held up
  (it said it could not check): traced;
* otherwise a violation: the replica had been told everything the verdict rests on and its
  webhook let the object through.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from ..apiserver import Change, ObjectStorage, RequestInfo, ServedRequest
from ._simulation._spec import AdmissionOracle, Inadmissible
from ._webhook_service import WebhookCall

__all__ = ["AdmissionCheck", "SETTLE"]

SETTLE = 0.5
"""Seconds an object sent to a replica may take to reach its cache (the event in flight
between the server's watch and the informer's store)."""
_KEEP = 120.0
"""Seconds of history kept (calls, what was sent), beyond the latest of each object."""
_READS = frozenset({"get", "list", "watch"})
"""The verbs whose refusal or delay may leave a replica's caches behind."""
_COMBINATIONS = 64
"""The most cache contents :meth:`AdmissionCheck._known` enumerates; past it a write is let off."""
_SERVER_SET = ("resourceVersion", "managedFields", "generation", "uid", "creationTimestamp", "selfLink",
               "deletionTimestamp", "deletionGracePeriodSeconds")

Obj = Mapping[str, Any]
_Where = tuple[str, str, str]
"""(group, kind, namespace)"""


def _view(obj: Obj | None) -> Any:
    """What of an object a write through the main resource may change (not its status, not
    the metadata the server sets)."""
    if obj is None:
        return None
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _SERVER_SET}
    return {**{k: v for k, v in obj.items() if k not in ("status", "metadata", "apiVersion", "kind")}, "metadata": meta}


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "")


@attrs.define(eq=False)
class _Ask:
    call: WebhookCall
    where: _Where
    name: str
    view: Any
    truth: dict[str, Obj]
    """The other objects of the kind in the namespace, as stored when the webhook was asked."""


@attrs.define(eq=False)
class AdmissionCheck:
    """Judges every committed write of the oracles' kinds (see the module's docstring).
    Its methods are observers: none raises or checkpoints."""

    store: ObjectStorage
    oracles: Sequence[AdmissionOracle]
    policies: Mapping[str, str]
    """Validating webhook path -> its ``failurePolicy``."""
    asks: dict[tuple[_Where, str], list[_Ask]] = attrs.field(factory=dict)
    sent: dict[tuple[str, _Where, str], list[tuple[float, bool, Obj | None]]] = attrs.field(factory=dict)
    """``(replica, where, name)`` -> ``(when, by a list, object or None when deleted)``."""
    troubled: dict[str, list[float]] = attrs.field(factory=dict)
    """Replica -> when a read (get, list, watch) of it was refused or held up."""
    origin: float = 0.0
    """The trio time messages count from (the trace's origin)."""
    verdicts: int = 0
    """Writes judged inadmissible (violations and excused ones)."""

    def _oracle(self, group: str, kind: str) -> AdmissionOracle | None:
        return next((o for o in self.oracles if o.kind == kind and o.group == group), None)

    def _peers(self, group: str, kind: str, namespace: str, name: str) -> dict[str, Obj]:
        for rt in self.store.types():
            if rt.kind == kind and rt.group == group:
                return {_name(obj): obj for obj in self.store.objects_in_namespace(rt.storage_key, namespace)
                        if _name(obj) != name}
        return {}

    # ----- what the server sent each replica -----

    def delivered(self, info: RequestInfo, type_: str, obj: Mapping[str, Any]) -> None:
        """A watch observer."""
        kind = obj.get("kind")
        if info.group is None or not isinstance(kind, str) or self._oracle(info.group, kind) is None:
            return
        actor = info.user_agent.split("/", 1)[0]
        where = (info.group, kind, _namespace(obj))
        self._send(actor, where, _name(obj), False, None if type_ == "DELETED" else obj)

    def _send(self, actor: str, where: _Where, name: str, listed: bool, obj: Obj | None) -> None:
        now = trio.current_time()
        history = self.sent.setdefault((actor, where, name), [])
        history.append((now, listed, obj))
        while len(history) > 1 and history[1][0] < now - _KEEP:
            del history[0]

    def served(self, served: ServedRequest) -> None:
        """A request observer: full lists of an oracle's kind, and watch-list streams (their
        initial state), are what was sent (not one page of several, such as the one-item list
        a watcher asks whether the server still knows its resourceVersion with: which objects
        it held is not known here); a refused or held-up read troubles its replica (its
        caches, which its webhooks read, may lag)."""
        actor = served.user_agent.split("/", 1)[0]
        now = trio.current_time()
        if served.verb in _READS and (served.status >= 300 or now > served.received_at):
            times = self.troubled.setdefault(actor, [])
            times.append(now)
            if len(times) > 1 and times[0] < now - _KEEP:
                del times[0]
        oracle = self._oracle(served.group, served.kind)
        if not served.reads_state or served.status >= 300 or oracle is None or any(served.selectors):
            return
        for rt in self.store.types():
            if rt.kind != oracle.kind or rt.group != oracle.group:
                continue
            listed = {(_namespace(o), _name(o)): o for _, o in self.store.objects_of(rt.storage_key)
                      if served.namespace is None or _namespace(o) == served.namespace}
            if served.continued or (served.limit is not None and served.limit < len(listed)):
                return
            known = {(w[2], n) for (a, w, n) in self.sent if a == actor and w[:2] == (rt.group, rt.kind)
                     and (served.namespace is None or w[2] == served.namespace)}
            for ns, name in sorted(known | set(listed)):
                self._send(actor, (rt.group, rt.kind, ns), name, True, listed.get((ns, name)))
            return

    def _known(self, ask: _Ask) -> list[dict[str, Obj]] | None:
        """What the answering replica's caches may have held of the namespace's other objects
        when its webhook read them: each object as sent to it :data:`SETTLE` seconds before
        the call, or as sent since, up to the answer (an event still on its way may or may not
        have reached the cache: a newer one may even carry an older version, after a history
        rewind), or listed for it during the call. Every combination, or ``None`` when there
        are more than :data:`_COMBINATIONS`."""
        call = ask.call
        end = call.answered_at if call.answered_at is not None else call.asked_at
        choices: list[tuple[str, list[Obj | None]]] = []
        for (actor, where, name), history in self.sent.items():
            if actor != call.replica or where != ask.where or name == ask.name:
                continue
            listed = [obj for at, by_list, obj in history if by_list and call.asked_at <= at <= end]
            if listed:
                choices.append((name, [listed[-1]]))
                continue
            before = [obj for at, _, obj in history if at <= call.asked_at - SETTLE]
            versions = ([before[-1]] if before else [None]) + [
                obj for at, _, obj in history if call.asked_at - SETTLE < at <= end]
            unique = list({json.dumps(v, sort_keys=True): v for v in versions}.values())
            choices.append((name, unique))
        if math.prod(len(versions) for _, versions in choices) > _COMBINATIONS:
            return None
        return [{name: obj for (name, _), obj in zip(choices, picked, strict=True) if obj is not None}
                for picked in itertools.product(*(versions for _, versions in choices))]

    # ----- the calls -----

    def asked(self, call: WebhookCall) -> None:
        """A :class:`~engine.testing._webhook_service.WebhookService` observer."""
        if call.path not in self.policies:
            return
        request = call.request
        obj = request.get("object")
        kind = (request.get("kind") or {}) if isinstance(request.get("kind"), Mapping) else {}
        group, name = str(kind.get("group") or ""), str(request.get("name") or "")
        if not isinstance(obj, Mapping) or self._oracle(group, str(kind.get("kind"))) is None:
            return
        name = name or _name(obj)
        namespace = str(request.get("namespace") or _namespace(obj))
        where = (group, str(kind.get("kind")), namespace)
        asks = self.asks.setdefault((where, name), [])
        asks.append(_Ask(call, where, name, _view(obj), self._peers(group, where[1], namespace, name)))
        while len(asks) > 1 and asks[0].call.asked_at < call.asked_at - _KEEP:
            del asks[0]

    # ----- the writes -----

    def committed(self, change: Change) -> tuple[str | None, str | None]:
        """A store listener's verdict on ``change``: ``(violation, note)``, either ``None``."""
        obj = change.obj
        kind = obj.get("kind")
        if change.type == "DELETED" or not isinstance(kind, str):
            return None, None
        oracle = self._oracle(change.key[0], kind)
        if oracle is None or (change.old is not None and _view(change.old) == _view(obj)):
            return None, None
        name, namespace = _name(obj), _namespace(obj)
        where = (change.key[0], kind, namespace)
        what = f"{kind} {namespace}/{name}".replace(" /", " ")
        now_peers = self._peers(where[0], kind, namespace, name)
        verdict = oracle.judge(obj, change.old, now_peers)
        if verdict is None:
            return None, None
        self.verdicts += 1
        view = _view(obj)
        asks = [a for a in self.asks.get((where, name), ()) if a.view == view]
        allowed = [a for a in asks if a.call.allowed]
        if not allowed:
            ignored = [a for a in asks if a.call.response is None and self.policies.get(a.call.path) == "Ignore"]
            if ignored:
                return None, (f"{what} stored while its validating webhook could not be called "
                              f"({ignored[-1].call.failure}; failurePolicy Ignore), though {verdict.reason}")
            return (f"{what} was stored though {verdict.reason}, with no validating webhook call allowing it "
                    "while the webhooks were registered (the server skipped the webhook)"), None
        ask = allowed[-1]
        asks_left = self.asks[(where, name)]
        asks_left.remove(ask)
        call = ask.call
        at = f"at {call.asked_at - self.origin:.3f}s"
        if oracle.judge(obj, change.old, ask.truth) is None:
            return None, (f"{what} stored though {verdict.reason}: a write stored after its webhook was asked "
                          f"({at}) closed it (concurrent writes, each admitted before the other was stored)")
        options = self._known(ask)
        verdicts = [oracle.judge(obj, change.old, peers) for peers in options or ()]
        known = verdicts[0] if verdicts and None not in verdicts else None
        if known is None:
            return None, (f"{what} stored though {verdict.reason}: {call.replica}, whose webhook allowed it {at}, "
                          f"may not have held {', '.join(verdict.through)} as stored then (a stale cache)")
        warnings = [str(w) for w in (call.response or {}).get("warnings") or ()]
        end = call.answered_at if call.answered_at is not None else call.asked_at
        troubled = [t for t in self.troubled.get(call.replica or "", ()) if call.asked_at <= t <= end]
        if warnings and troubled:
            return None, (f"{what} stored though {verdict.reason}: {call.replica}'s webhook allowed it {at} with a "
                          f"warning while its reads were refused or held up ({warnings[0]})")
        return _violation(what, known, call, at), None


def _violation(what: str, verdict: Inadmissible, call: WebhookCall, at: str) -> str:
    through = f"; the server had sent it {', '.join(verdict.through)} as stored" if verdict.through else ""
    return (f"{what} was stored though {verdict.reason}: {call.replica}'s validating webhook allowed it "
            f"{at}{through} (a webhook that accepts what it must refuse)")
