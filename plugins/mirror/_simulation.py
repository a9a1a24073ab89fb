"""How ``python -m engine simulate --plugin mirror`` exercises this plugin.

The workload: three or four namespaces labelled ``team=a`` or ``team=b``, and two or three
source ConfigMaps in the simulation's namespace, each selecting one team; then namespaces
change team, sources change data or selector, are disabled and enabled again, deleted and
created again. Converged means: an enabled source has a copy with its data in exactly the
namespaces its selector matches (its own excepted), and nothing else has copies; every copy
belongs to a source that exists (the finalizer removes copies first), at every step, and no
copy is written after its source was cleaned up and deleted, nor with older data than it was
already given (from the server's request log).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import attrs

from engine.apiserver import RequestRecord
from engine.testing import ClusterState, Simulation, Step

from ._controller import ENABLED_LABEL, FINALIZER, SELECTOR_ANNOTATION, SOURCE_LABEL, parse_selector, plugin

__all__ = ["simulation"]


def _namespace(index: int, team: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-ns{index}", "labels": {"team": team}}}


@attrs.define
class _Source:
    index: int
    team: str
    value: int = 0
    enabled: bool = True

    def manifest(self, at: float) -> dict[str, Any]:
        """The source as applied at ``at``: its value is the latest it was given by then, so
        values only grow in the order the steps happen (a source created again later does not
        bring back an older one)."""
        self.value = max(self.value, int(at * 1000))
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"src{self.index}",
                             "labels": {ENABLED_LABEL: "true" if self.enabled else "false"},
                             "annotations": {SELECTOR_ANNOTATION: f"team={self.team}"}},
                "data": {"value": str(self.value)}}


def workload(rng: random.Random, duration: float) -> list[Step]:
    teams = {i: rng.choice("ab") for i in range(rng.randint(3, 4))}
    sources = [_Source(i, rng.choice("ab")) for i in range(rng.randint(2, 3))]
    steps = [Step.apply(0.0, _namespace(i, t), f"team {t}") for i, t in teams.items()]
    steps += [Step.apply(0.0, s.manifest(0.0), "created") for s in sources]
    t = 0.0
    while True:
        t += rng.uniform(0.5, 5.0)
        if t >= duration:
            return steps
        roll = rng.random()
        if roll < 0.25:
            i = rng.choice(sorted(teams))
            teams[i] = "b" if teams[i] == "a" else "a"
            steps.append(Step.apply(t, _namespace(i, teams[i]), f"team {teams[i]}"))
            continue
        source = rng.choice(sources)
        if roll < 0.55:
            at = t
            for k in range(rng.choice((1, 1, 2, 3))):
                at += k * rng.uniform(0.05, 0.5)
                manifest = source.manifest(at)
                steps.append(Step.apply(at, manifest, f"value {source.value}"))
        elif roll < 0.7:
            source.team = "b" if source.team == "a" else "a"
            steps.append(Step.apply(t, source.manifest(t), f"selects team {source.team}"))
        elif roll < 0.85:
            source.enabled = not source.enabled
            steps.append(Step.apply(t, source.manifest(t), "enabled" if source.enabled else "disabled"))
        else:
            steps.append(Step.delete(t, source.manifest(t), "deleted"))
            again = t + rng.uniform(1.0, 10.0)
            steps.append(Step.apply(again, source.manifest(again), "created again"))


def _copies(state: ClusterState) -> list[dict[str, Any]]:
    return [cm for cm in state.objects("ConfigMap") if (cm["metadata"].get("labels") or {}).get(SOURCE_LABEL)]


def converged(state: ClusterState) -> list[str]:
    ns = state.namespace
    namespaces = state.objects("Namespace")
    copies = _copies(state)
    problems: list[str] = []
    for cm in state.objects("ConfigMap", namespace=ns):
        meta = cm["metadata"]
        if (meta.get("labels") or {}).get(SOURCE_LABEL):
            continue
        mine = f"{ns}.{meta['name']}"
        have = {c["metadata"]["namespace"]: c.get("data") for c in copies if c["metadata"]["labels"][SOURCE_LABEL] == mine}
        enabled = (meta.get("labels") or {}).get(ENABLED_LABEL) == "true" and not meta.get("deletionTimestamp")
        wanted: set[str] = set()
        if enabled:
            selector = parse_selector((meta.get("annotations") or {}).get(SELECTOR_ANNOTATION, ""))
            wanted = {n["metadata"]["name"] for n in namespaces
                      if selector and n["metadata"]["name"] != ns and not n["metadata"].get("deletionTimestamp")
                      and all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())}
        if set(have) != wanted:
            problems.append(f"ConfigMap {meta['name']}: copies in {sorted(have)}, wanted in {sorted(wanted)}")
        stale = sorted(n for n, data in have.items() if data != cm.get("data"))
        if stale:
            problems.append(f"ConfigMap {meta['name']}: stale copies in {stale}")
        if meta.get("deletionTimestamp"):
            problems.append(f"ConfigMap {meta['name']} is still being deleted")
        elif not enabled and FINALIZER in (meta.get("finalizers") or []):
            problems.append(f"ConfigMap {meta['name']} is disabled but keeps the finalizer")
    return problems + [p for p in [every_copy_has_its_source(state)] if p]


def every_copy_has_its_source(state: ClusterState) -> str | None:
    """The finalizer deletes a source's copies before the source goes away."""
    orphans = []
    for copy in _copies(state):
        ns, _, name = copy["metadata"]["labels"][SOURCE_LABEL].partition(".")
        if state.get("ConfigMap", name, ns) is None:
            orphans.append(f"{copy['metadata']['namespace']}/{copy['metadata']['name']}")
    return f"copies whose source is gone: {', '.join(orphans)}" if orphans else None


Seen = dict[tuple[Any, ...], Any]
"""What a scan of the request log remembers, by copy; forgotten at each restore."""


class _LogScan:
    """An invariant that reads the server's request log once, record by record, across the
    steps it is checked at: ``step(seen, record)`` returns what is wrong, or ``None``. What it
    remembers is forgotten at each restore of the server's storage, and when the log is
    another one (the next seed's)."""

    def __init__(self, step: Callable[[Seen, RequestRecord], str | None], doc: str | None) -> None:
        self._step = step
        self.__name__ = step.__name__.lstrip("_")
        self.__doc__ = doc
        self._log: object = None
        self._at = 0
        self._restores = 0
        self._seen: Seen = {}

    def __call__(self, state: ClusterState) -> str | None:
        log = state.requests
        if log is None:
            return None
        if log is not self._log:
            self._log, self._at, self._restores, self._seen = log, 0, 0, {}
        marks, records = log.restored_after, log.records
        while self._at < len(records):
            while self._restores < len(marks) and self._at >= marks[self._restores]:
                self._seen.clear()
                self._restores += 1
            problem = self._step(self._seen, records[self._at])
            if problem is not None:
                return problem
            self._at += 1
        return None


def _copy_source(record: RequestRecord) -> tuple[dict[str, Any] | None, str | None]:
    """The body of a ConfigMap write, and the source it names when it is a copy."""
    body = record.body()
    if not isinstance(body, dict):
        return None, None
    labels = (body.get("metadata") or {}).get("labels") or {}
    source = labels.get(SOURCE_LABEL) if isinstance(labels, dict) else None
    return body, None if source is None else str(source)


def _no_copy_written_after_its_source_was_cleaned_up(gone: Seen, record: RequestRecord) -> str | None:
    served = record.served
    if served.kind != "ConfigMap" or not record.ok:
        return None
    _, source = _copy_source(record)
    if source is not None and served.verb in ("create", "patch", "update") and record.actor != "engine-test-driver":
        ns, _, name = source.partition(".")
        at = gone.get((ns, name))
        if at is not None:
            return (f"copy {served.namespace}/{record.name} of {source} written by {record.actor} at "
                    f"{record.answered_at:.3f}, after its source was cleaned up and deleted at {at:.3f}")
    elif source is None:
        if record.uid is None and served.verb in ("delete", "patch", "update"):
            gone[(served.namespace, record.name)] = record.answered_at
        elif record.uid is not None:
            gone.pop((served.namespace, record.name), None)
    return None


no_copy_written_after_its_source_was_cleaned_up = _LogScan(_no_copy_written_after_its_source_was_cleaned_up, """No copy of a source is written after the source went away (its finalizer removed the copies,
then the source was deleted) and before it is created again, as the server's request log has
it: a copy written then would outlive its source's cleanup.""")


def _no_copy_goes_back_to_older_data(newest: Seen, record: RequestRecord) -> str | None:
    served = record.served
    if served.kind != "ConfigMap" or not record.ok or served.verb not in ("create", "patch", "update"):
        return None
    body, source = _copy_source(record)
    if body is None or source is None:
        return None
    try:
        value = int((body.get("data") or {}).get("value", ""))
    except ValueError:
        return None
    key = (served.namespace, record.name, record.actor)
    seen = newest.get(key)
    if seen is not None and seen[0] > record.received_at and value < seen[1]:
        return (f"copy {served.namespace}/{record.name} written with value {value} by {record.actor} at "
                f"{record.answered_at:.3f} (sent at {record.received_at:.3f}), after value {seen[1]} sent later "
                f"(at {seen[0]:.3f}) was written at {seen[2]:.3f}")
    if seen is None or record.received_at >= seen[0]:
        newest[key] = (record.received_at, value, record.answered_at)
    return None


no_copy_goes_back_to_older_data = _LogScan(_no_copy_goes_back_to_older_data, """No copy write of a replica lands after one of newer data (the workload's values grow) that
the same replica sent later, as the server's request log has it: a write of a run that was cut
while in flight must not overtake the next run's. (A copy may go back to older data otherwise:
its source was restored, or the replica's cache lags.)""")


simulation = Simulation(
    plugin=plugin,
    workload=workload,
    converged=converged,
    invariants=[every_copy_has_its_source, no_copy_written_after_its_source_was_cleaned_up,
                no_copy_goes_back_to_older_data],
)
