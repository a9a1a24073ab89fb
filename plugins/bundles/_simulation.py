"""How ``python -m engine simulate --plugin bundles`` exercises this plugin.

The workload: two to four Sources, each with one Bundle (a Source shared by two Bundles would
make them fight over the same objects), the Bundles depending on lower-numbered ones; then
new revisions (sometimes several in quick succession), changed health-check waits and
dependencies, and Bundles and Sources deleted and created again. Converged means: every
Source is Ready for its generation, its message naming its revision; a Bundle
whose dependencies can all be Ready and whose Source exists is Ready at the Source's
revision and every object of the artifact is there with its data; any other Bundle has
observed its generation; nothing a Bundle applied outlives it. At every step: nothing outlives its Bundle, the
status a Bundle shows is the one last written to it (from the server's request log), and
(while the mutating webhook is registered) every Bundle has an ``interval``.

Now and then the workload also sends what the webhooks handle: a Bundle without ``interval``,
one that depends on itself, one that closes a cycle through other Bundles. The simulator
checks that no Bundle the validating webhook must refuse is stored while it is registered;
what must be refused is :func:`no_dependency_cycle`'s verdict, found independently of the
webhook's handler.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any

from engine.apiserver import RequestRecord
from engine.kube import get_condition, is_ready
from engine.testing import AdmissionOracle, ClusterState, Inadmissible, Simulation, Step

from ._controller import OWNER_LABEL, STATUS_WRITE_TIMEOUT, plugin
from ._crds import API_VERSION, GROUP

__all__ = ["simulation"]

_WAITS = ("0s", "0s", "1s", "2s", "5s", "15s")


def _source(index: int, revision: int, rng: random.Random) -> dict[str, Any]:
    names = sorted(rng.sample(range(3), rng.randint(1, 3)))
    artifact = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"s{index}-cm{j}"},
         "data": {"revision": f"r{revision}", "value": str(rng.randint(0, 99))}}
        for j in names
    ]
    return {"apiVersion": API_VERSION, "kind": "Source", "metadata": {"name": f"s{index}"},
            "spec": {"revision": f"r{revision}", "artifact": artifact}}


def _bundle(index: int, depends: list[int], wait: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "Bundle", "metadata": {"name": f"b{index}"},
            "spec": {"sourceRef": {"name": f"s{index}"}, "dependsOn": [{"name": f"b{d}"} for d in depends],
                     "interval": "10m", "timeout": "1m", "healthCheckWait": wait}}


def _depends(index: int, rng: random.Random) -> list[int]:
    return sorted(d for d in range(index) if rng.random() < 0.5)


def workload(rng: random.Random, duration: float) -> list[Step]:
    steps = _workload(rng, duration)
    return steps + _admission_attempts(random.Random(rng.getrandbits(64)), steps, duration)


def _workload(rng: random.Random, duration: float) -> list[Step]:
    count = rng.randint(2, 4)
    revisions = dict.fromkeys(range(count), 1)
    bundles = {i: _bundle(i, _depends(i, rng), rng.choice(_WAITS)) for i in range(count)}
    steps = [Step.apply(0.0, _source(i, 1, rng), "r1") for i in range(count)]
    steps += [Step.apply(0.0, bundles[i], "created") for i in range(count)]
    t = 0.0
    while True:
        t += rng.uniform(0.5, 5.0)
        if t >= duration:
            return steps
        i = rng.randrange(count)
        roll = rng.random()
        if roll < 0.5:
            burst = rng.choice((1, 1, 2, 3, 4))
            for k in range(burst):
                revisions[i] += 1
                at = t + k * rng.uniform(0.05, 0.5)
                steps.append(Step.apply(at, _source(i, revisions[i], rng), f"revision r{revisions[i]}"))
        elif roll < 0.7:
            bundles[i] = _bundle(i, _depends(i, rng), rng.choice(_WAITS))
            steps.append(Step.apply(t, bundles[i], "spec changed"))
        elif roll < 0.85:
            steps.append(Step.delete(t, bundles[i], "deleted"))
            steps.append(Step.apply(t + rng.uniform(2.0, 15.0), bundles[i], "created again"))
        else:
            revisions[i] += 1
            steps.append(Step.delete(t, _source(i, revisions[i], rng), "deleted"))
            steps.append(Step.apply(t + rng.uniform(2.0, 15.0), _source(i, revisions[i], rng), f"created again at r{revisions[i]}"))


def _dependencies(bundle: Mapping[str, Any]) -> list[str]:
    items = (bundle.get("spec") or {}).get("dependsOn") or []
    return [d["name"] for d in items if isinstance(d, Mapping) and isinstance(d.get("name"), str)]


def _bundles_at(steps: list[Step], t: float) -> dict[str, dict[str, Any]]:
    """The Bundles the workload has applied and not deleted by ``t`` (as it meant them)."""
    bundles: dict[str, dict[str, Any]] = {}
    for step in sorted(steps, key=lambda s: s.at):
        if step.at > t:
            break
        if step.manifest.get("kind") != "Bundle":
            continue
        name = step.manifest["metadata"]["name"]
        if step.action == "delete":
            bundles.pop(name, None)
        else:
            bundles[name] = copy.deepcopy(dict(step.manifest))
    return bundles


def _reaches(bundles: Mapping[str, Mapping[str, Any]], start: str) -> dict[str, int]:
    """The Bundles ``start`` depends on, directly or not, with the length of the shortest path."""
    found: dict[str, int] = {}
    frontier = [(d, 1) for d in _dependencies(bundles[start])]
    while frontier:
        name, length = frontier.pop(0)
        if name in found or name not in bundles:
            continue
        found[name] = length
        frontier.extend((d, length + 1) for d in _dependencies(bundles[name]))
    return found


def _admission_attempts(rng: random.Random, steps: list[Step], duration: float) -> list[Step]:
    """Writes the plugin's webhooks handle, now and then: a Bundle applied without
    ``interval`` (the mutating webhook defaults it), one that depends on itself, and one whose
    new dependency closes a cycle through other Bundles (the validating webhook refuses both;
    the workload goes on as if they were never sent). Drawn from a generator of their own, so
    the rest of the workload is what it was without them."""
    attempts: list[Step] = []
    t = 0.0
    while True:
        t += rng.uniform(2.0, 10.0)
        if t >= duration:
            return attempts
        bundles = _bundles_at(steps, t)
        if not bundles:
            continue
        names = sorted(bundles)
        roll = rng.random()
        if roll < 0.3:
            name = rng.choice(names)
            manifest = copy.deepcopy(bundles[name])
            del manifest["spec"]["interval"]
            attempts.append(Step.apply(t, manifest, "no interval"))
        elif roll < 0.45:
            name = rng.choice(names)
            manifest = copy.deepcopy(bundles[name])
            manifest["spec"]["dependsOn"].append({"name": name})
            attempts.append(Step.apply(t, manifest, "depends on itself"))
        else:
            closing = [(length, first, last) for first in names for last, length in _reaches(bundles, first).items()]
            longer = [c for c in closing if c[0] > 1]
            if not closing:
                continue
            _, first, last = rng.choice(longer if longer and rng.random() < 0.7 else closing)
            manifest = copy.deepcopy(bundles[last])
            manifest["spec"]["dependsOn"].append({"name": first})
            attempts.append(Step.apply(t, manifest, f"closes a cycle through {first}"))


def no_dependency_cycle(
    bundle: Mapping[str, Any], old: Mapping[str, Any] | None, others: Mapping[str, Mapping[str, Any]]
) -> Inadmissible | None:
    """What the validating webhook must refuse, found independently of it: a Bundle that is
    not being deleted and whose ``dependsOn``, new on this write, names itself or closes a
    cycle through the other Bundles (the shortest one is named)."""
    meta = bundle.get("metadata") or {}
    name, dependencies = str(meta.get("name")), _dependencies(bundle)
    if meta.get("deletionTimestamp") or (old is not None and _dependencies(old) == dependencies):
        return None
    if name in dependencies:
        return Inadmissible(f"{name} depends on itself")
    came_from = dict.fromkeys(dependencies, name)
    frontier = list(dict.fromkeys(dependencies))
    while frontier:
        current = frontier.pop(0)
        for following in _dependencies(others[current]) if current in others else ():
            if following == name:
                path = [current]
                while path[-1] != name:
                    path.append(came_from[path[-1]])
                cycle = [name, *reversed(path[:-1]), name]
                return Inadmissible("dependency cycle: " + " -> ".join(cycle), through=tuple(cycle[1:-1]))
            if following not in came_from:
                came_from[following] = current
                frontier.append(following)
    return None


def converged(state: ClusterState) -> list[str]:
    ns = state.namespace
    bundles = {b["metadata"]["name"]: b for b in state.objects("Bundle", namespace=ns, group=GROUP)}
    problems: list[str] = []

    def can_be_ready(name: str, seen: frozenset[str] = frozenset()) -> bool:
        bundle = bundles.get(name)
        if bundle is None or name in seen or bundle["metadata"].get("deletionTimestamp"):
            return False
        spec = bundle.get("spec") or {}
        if not all(can_be_ready(d["name"], seen | {name}) for d in spec.get("dependsOn") or ()):
            return False
        return state.get("Source", spec["sourceRef"]["name"], ns, group=GROUP) is not None

    for source in state.objects("Source", namespace=ns, group=GROUP):
        revision = (source.get("spec") or {}).get("revision")
        ready = get_condition(source, "Ready") or {}
        if not is_ready(source) or not str(ready.get("message", "")).startswith(f"revision {revision} with "):
            problems.append(f"Source {source['metadata']['name']}: wants Ready at {revision}, has "
                            f"{ready.get('status')} ({ready.get('message')}) for generation "
                            f"{ready.get('observedGeneration')} of {source['metadata'].get('generation')}")
    for name, bundle in sorted(bundles.items()):
        meta, status = bundle["metadata"], bundle.get("status") or {}
        if meta.get("deletionTimestamp"):
            problems.append(f"Bundle {name} is still being deleted")
            continue
        ready = get_condition(bundle, "Ready") or {}
        if not can_be_ready(name):
            if ready.get("observedGeneration") != meta.get("generation"):
                problems.append(f"Bundle {name}: generation {meta.get('generation')} not observed")
            continue
        source = state.get("Source", bundle["spec"]["sourceRef"]["name"], ns, group=GROUP) or {}
        revision = (source.get("spec") or {}).get("revision")
        if not is_ready(bundle) or status.get("lastAppliedRevision") != revision:
            problems.append(f"Bundle {name}: wants Ready at {revision}, has {ready.get('status')} "
                            f"({ready.get('reason')}) at {status.get('lastAppliedRevision')}")
            continue
        for item in (source.get("spec") or {}).get("artifact") or ():
            found = state.get("ConfigMap", item["metadata"]["name"], ns)
            if found is None or found.get("data") != item.get("data"):
                problems.append(f"Bundle {name}: ConfigMap {item['metadata']['name']} is "
                                + ("missing" if found is None else f"{found.get('data')}, not {item.get('data')}"))
    problems.extend(_orphans(state))
    return problems


def _orphans(state: ClusterState) -> list[str]:
    owners = {b["metadata"]["name"] for b in state.objects("Bundle", namespace=state.namespace, group=GROUP)}
    return [
        f"ConfigMap {cm['metadata']['name']} is labelled for Bundle {owner}, which no longer exists"
        for cm in state.objects("ConfigMap", namespace=state.namespace)
        if (owner := (cm["metadata"].get("labels") or {}).get(OWNER_LABEL)) and owner not in owners
    ]


def every_bundle_has_an_interval(state: ClusterState) -> str | None:
    """While the mutating webhook is registered, no Bundle is stored without ``interval``."""
    if not state.objects("MutatingWebhookConfiguration", group="admissionregistration.k8s.io"):
        return None
    missing = sorted(b["metadata"]["name"] for b in state.objects("Bundle", group=GROUP)
                     if (b.get("spec") or {}).get("interval") is None)
    return f"Bundles stored without interval: {', '.join(missing)}" if missing else None


def nothing_outlives_its_bundle(state: ClusterState) -> str | None:
    """A Bundle's finalizer prunes what it applied before the Bundle goes away."""
    orphans = _orphans(state)
    return "; ".join(orphans) if orphans else None


def _shown(status: Mapping[str, Any]) -> tuple[Any, ...]:
    ready = get_condition({"status": status}, "Ready") or {}
    return status.get("lastAppliedRevision"), ready.get("status"), ready.get("reason"), ready.get("message")


def status_is_the_last_written(state: ClusterState) -> str | None:
    """The status a Bundle or Source shows is the one the last status write to it (by a replica, since
    the last history rewind, to this very object) put there, as the server's request log has
    it: the last one sent, not merely the last one to land (a write of a run cut while in
    flight must not overtake the next run's). May land last out of turn: a write that took
    longer than the shield gives it (:data:`STATUS_WRITE_TIMEOUT`: its run reported it cut), or
    that retried a refused attempt from within that time (its run may have timed out on it), or
    one of another replica (in flight when it lost its lease: the fencing check bounds that)."""
    log = state.requests
    if log is None:
        return None
    objects = {(kind, o["metadata"]["name"]): o for kind in ("Bundle", "Source")
               for o in state.objects(kind, namespace=state.namespace, group=GROUP)}
    landed: dict[tuple[str, str], RequestRecord] = {}
    sent: dict[tuple[str, str], RequestRecord] = {}
    refused: dict[tuple[str, str, str], list[float]] = {}
    for record in log.since_last_restore():
        served = record.served
        key = (served.kind, record.name or "")
        if served.subresource != "status" or key not in objects:
            continue
        if not record.ok:
            refused.setdefault((record.actor, *key), []).append(record.answered_at)
            continue
        landed[key] = record
        if key not in sent or record.received_at >= sent[key].received_at:
            sent[key] = record
    wrong: list[str] = []
    for (kind, name), last in sorted(landed.items()):
        retried = any(last.received_at - STATUS_WRITE_TIMEOUT <= t <= last.received_at
                      for t in refused.get((last.actor, kind, name), ()))
        if sent[kind, name] is not last and (last.actor != sent[kind, name].actor or retried
                                             or last.answered_at - last.received_at > STATUS_WRITE_TIMEOUT):
            continue
        record, bundle = sent[kind, name], objects[kind, name]
        body = record.body()
        written = body.get("status") if isinstance(body, Mapping) else None
        if record.uid != bundle["metadata"].get("uid") or not isinstance(written, Mapping):
            continue
        shown = _shown(bundle.get("status") or {})
        if _shown(written)[1:] != shown[1:] or ("lastAppliedRevision" in written and _shown(written)[0] != shown[0]):
            how = "" if record is last else f", sent at {record.received_at:.3f}; one sent earlier landed after it"
            wrong.append(f"{kind} {name} shows {shown}, but the last status "
                         f"written ({record.actor} at {record.answered_at:.3f}{how}) was {_shown(written)}")
    return "; ".join(wrong) if wrong else None


def _failed(status: Mapping[str, Any]) -> bool:
    condition = get_condition({"status": status}, "Ready") or {}
    return condition.get("status") == "False" and condition.get("reason") == "ReconciliationFailed"


simulation = Simulation(
    plugin=plugin,
    workload=workload,
    converged=converged,
    invariants=[nothing_outlives_its_bundle, status_is_the_last_written, every_bundle_has_an_interval],
    admission=[AdmissionOracle("Bundle", GROUP, no_dependency_cycle)],
    failure_status=_failed,
    config={"healthPollInterval": 0.5, "dependencyRetry": 30.0},
)
