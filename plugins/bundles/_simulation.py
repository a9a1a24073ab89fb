"""How ``python -m engine simulate --plugin bundles`` exercises this plugin.

The workload: two to four Sources, each with one Bundle (a Source shared by two Bundles would
make them fight over the same objects), the Bundles depending on lower-numbered ones; then
new revisions (sometimes several in quick succession), changed health-check waits and
dependencies, and Bundles and Sources deleted and created again. Converged means: every
Source is Ready for its generation, its message naming its revision; a Bundle
whose dependencies can all be Ready and whose Source exists is Ready at the Source's
revision and every object of the artifact is there with its data; any other Bundle has
observed its generation; nothing a Bundle applied outlives it. At every step: nothing outlives its Bundle, and the
status a Bundle shows is the one last written to it (from the server's request log).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from engine.apiserver import RequestRecord
from engine.kube import get_condition, is_ready
from engine.testing import ClusterState, Simulation, Step

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
    invariants=[nothing_outlives_its_bundle, status_is_the_last_written],
    failure_status=_failed,
    config={"healthPollInterval": 0.5, "dependencyRetry": 30.0},
)
