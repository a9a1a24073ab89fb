"""The bundles plugin in-process (the kube_* fixtures and open_plugin_test): prune and inventory,
finalizers, and the three failures of DESIGN.md that do not need a separate process.

On the embedded API server under virtual time by default; with ``--kube-target=real`` against a
real one, each test in a namespace of its own (objects name none: the harness puts them in the
test's), which the plugin alone watches: a real server keeps earlier tests' objects (envtest has
no namespace controller to empty a deleted namespace). Tests that need the embedded server's
fault injection say so."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import pytest
import trio

from engine import Event, EventType, OutcomeKind
from engine.apiserver import ApiServer
from engine.kube import InvalidError, Plugin, PolicyRule, get_condition
from engine.plugins.bundles import plugin
from engine.plugins.bundles._controller import OWNER_LABEL, _identity, parse_duration
from engine.testing import KubeTarget, PluginHarness, open_plugin_test

from .. import _e2e
from .._e2e import API, configmap, ready_at

GADGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.test.dev"},
    "spec": {
        "group": "test.dev",
        "scope": "Namespaced",
        "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}

GADGET_RULE = PolicyRule("test.dev", "gadgets", ("create", "delete", "get", "list", "patch"))
"""What applying, health-checking and pruning Gadgets needs, beside the bundled plugin's rules."""


def gadget(name: str, ready: bool) -> dict[str, Any]:
    return {"apiVersion": "test.dev/v1", "kind": "Gadget", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False", "reason": "Test"}]}}


def open_bundles(subject: Plugin, target: KubeTarget, **kwargs: Any) -> AbstractAsyncContextManager[PluginHarness]:
    """:func:`open_plugin_test` with the plugin watching the test's namespace only, as its own
    ServiceAccount under the Role ``manifests`` generates (unless ``rbac=False``)."""
    kwargs.setdefault("rbac", True)
    return open_plugin_test(subject, target, watch_namespace=target.namespace, **kwargs)


def source(name: str, revision: str, manifests: list[Mapping[str, Any]]) -> dict[str, Any]:
    return _e2e.source(name, revision, manifests, namespace=None)


def bundle(name: str, source_name: str, **kwargs: Any) -> dict[str, Any]:
    return _e2e.bundle(name, source_name, namespace=None, **kwargs)


def test_parse_duration() -> None:
    assert parse_duration("1m30s", 0) == 90
    assert parse_duration("500ms", 0) == 0.5
    assert parse_duration(None, 7) == 7
    with pytest.raises(ValueError, match=r"^invalid duration '5 minutes' \(use e.g. 30s, 5m, 1h30m, 500ms\)$"):
        parse_duration("5 minutes", 0)


def test_inventory_identity_ignores_the_version() -> None:
    a = {"apiVersion": "test.dev/v1beta1", "kind": "Widget", "namespace": "n", "name": "w"}
    b = {**a, "apiVersion": "test.dev/v1"}
    assert _identity(a) == _identity(b)


async def test_superseded_health_check_still_prunes_what_the_revision_applied(kube_target: KubeTarget) -> None:
    """r2 adds b and an unhealthy gadget; r3 (pushed during r2's health check) drops them:
    both are pruned, though r2 never finished."""
    with_gadgets = attrs.evolve(plugin, rules=(*plugin.rules, GADGET_RULE))
    async with open_bundles(with_gadgets, kube_target, config={"healthPollInterval": 0.05},
                                manifests=[GADGET_CRD, source("repo", "r1", [configmap("a")]),
                                           bundle("app", "repo", timeout="1h")]) as h:
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r2", "artifact": [
            configmap("a"), configmap("b"), gadget("x", ready=False)]}})
        await h.wait_for(API + "/Bundle", "app", timeout=20,
                         condition=lambda o: "checking health" in str((o or {}).get("status")))
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r3", "artifact": [configmap("a")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r3"), timeout=20)
        assert {o["metadata"]["name"] for o in await h.list("configmaps")} >= {"a"}
        assert await h.get("ConfigMap", "b") is None
        assert await h.list("gadgets") == []
        assert OutcomeKind.SUPERSEDED in h.outcomes(name="app")

        # An object another bundle took over is not pruned.
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r4", "artifact": [configmap("a"), configmap("c")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r4"), timeout=20)
        await h.patch("ConfigMap", "c", {"metadata": {"labels": {OWNER_LABEL: "someone-else"}}})
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r5", "artifact": [configmap("a")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r5"), timeout=20)
        assert await h.get("ConfigMap", "c")
        assert [e for e in h.events if e.type is EventType.WARNING] == [], "a superseded run emits no failure"


async def test_deleting_a_bundle_garbage_collects_what_it_applied(kube_target: KubeTarget) -> None:
    async with open_bundles(plugin, kube_target, manifests=[
            source("repo", "r1", [configmap("a"), configmap("b")]), bundle("app", "repo")]) as h:
        app = await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        assert app is not None and "bundles.engine.dev/finalizer" in app["metadata"]["finalizers"]
        await h.delete(API + "/Bundle", "app")
        await h.wait_deleted(API + "/Bundle", "app", timeout=20)
        assert {o["metadata"]["name"] for o in await h.list("ConfigMap")} & {"a", "b"} == set()


async def test_deleting_a_bundle_also_deletes_what_carries_its_label_but_missed_its_inventory(
    kube_target: KubeTarget,
) -> None:
    """An object applied just before a status write that never happened (a crash, or a restore
    of the server's storage that undid the write) is in no inventory: the deletion finds it by
    its label, among the types and in the namespace the inventory holds. An object labelled for
    another bundle is left alone. (Found by the simulation, bundles seed 147.)"""
    def labelled(name: str, owner: str) -> dict[str, Any]:
        cm = configmap(name)
        cm["metadata"]["labels"] = {OWNER_LABEL: owner}
        return cm

    async with open_bundles(plugin, kube_target, manifests=[
            source("repo", "r1", [configmap("a")]), bundle("app", "repo")]) as h:
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        await h.apply([labelled("lost", "app"), labelled("theirs", "other")])
        await h.delete(API + "/Bundle", "app")
        await h.wait_deleted(API + "/Bundle", "app", timeout=20)
        assert {o["metadata"]["name"] for o in await h.list("ConfigMap")} & {"a", "lost", "theirs"} == {"theirs"}


async def test_a_deleted_bundle_with_no_inventory_finds_its_objects_among_its_sources_types(
    kube_target: KubeTarget,
) -> None:
    """A bundle that never recorded an inventory, and an object carrying its label (a write
    still in flight when its run was cancelled, landing later): the deletion looks for it among
    the types its Source's manifests have. (Found by the simulation, bundles seed 1096.)"""
    async with open_bundles(plugin, kube_target, manifests=[
            source("repo", "r1", [configmap("a")]), bundle("app", "repo", depends_on=("missing",))]) as h:
        await h.wait_for(API + "/Bundle", "app", timeout=20, condition=lambda o: "bundles.engine.dev/finalizer" in
                         ((o or {}).get("metadata") or {}).get("finalizers", ()))
        late = configmap("a")
        late["metadata"]["labels"] = {OWNER_LABEL: "app"}
        await h.apply(late)
        await h.delete(API + "/Bundle", "app")
        await h.wait_deleted(API + "/Bundle", "app", timeout=20)
        assert await h.get("ConfigMap", "a") is None


async def test_a_bundle_deleted_while_its_finalizer_was_being_added_gets_nothing_applied(
    kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    """The finalizer patch is slow and the bundle, deleted meanwhile (it had no finalizer yet),
    is gone when the patch arrives: nothing is applied, so nothing is left behind without an
    owner. (Found by the simulation, bundles seeds 336 and 360.)"""
    async with open_bundles(plugin, kube_target,
                                manifests=[source("repo", "r1", [configmap("a")])]) as h:
        await h.apply(bundle("app", "repo"))
        kube_api.faults.add_latency(3, count=1, resource="bundles", verbs={"patch"})
        await trio.sleep(1)
        await h.delete(API + "/Bundle", "app")
        assert await h.get(API + "/Bundle", "app") is None
        await trio.sleep(10)
        assert {o["metadata"]["name"] for o in await h.list("ConfigMap")} & {"a"} == set()


@pytest.mark.kube_embedded(reason="delays the replica's watch and restores the server's storage")
async def test_a_deletion_a_storage_restore_undid_before_the_cache_saw_it_leaves_the_bundle_reconciled(
    kube_target: KubeTarget, kube_api: ApiServer
) -> None:
    """A new revision's run finds its Bundle being deleted on the server while the cache (its
    watch late) does not show it yet, and leaves the deletion to the run its watch event will
    trigger. A restore of the server's storage to before the deletion cuts the watch first: the
    event never comes, and the relist shows the Bundle as the cache had it. The run requeued
    after the interval, so the Bundle still ends Ready at the new revision. (Found by the
    simulation, bundles seed 20014.)"""
    async with open_bundles(plugin, kube_target, manifests=[
            source("repo", "r1", [configmap("a", revision="r1")]), bundle("app", "repo")]) as h:
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        before = len(h.runs_for(name="app", controller="bundles"))
        late = h.faults.delay_watch(5, client=h.user_agent)
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r2", "artifact": [configmap("a", revision="r2")]}})
        snapshot = kube_api.snapshot()
        await trio.sleep(1)
        await h.delete(API + "/Bundle", "app")
        deleted_at = trio.current_time()
        await h.wait_runs(before + 1, name="app", controller="bundles", timeout=10)
        assert trio.current_time() < deleted_at + 5, "the run came before the cache saw the deletion"
        kube_api.restore(snapshot)
        h.faults.remove(late)
        app = await h.get(API + "/Bundle", "app")
        assert app is not None and not app["metadata"].get("deletionTimestamp")
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r2"), timeout=700)
        assert (await h.get("ConfigMap", "a") or {}).get("data") == {"revision": "r2"}


@pytest.mark.kube_embedded(reason="delays the replica's watch with fault injection")
async def test_seed1_rapid_revisions_with_a_stale_cache_end_ready_at_the_final_revision(kube_target: KubeTarget) -> None:
    """50 Source revisions 10 ms apart while health checks run and watch delivery to the
    replica is delayed (a stale cache): every Bundle ends Ready at the final revision."""
    async with open_bundles(plugin, kube_target, cluster_events=False, manifests=[
            source("repo", "r0", [configmap("app", revision="r0")]),
            *(bundle(name, "repo", wait="300ms") for name in "abc")]) as h:
        for name in "abc":
            await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r0"), timeout=30)
        h.faults.delay_watch(0.3, client=h.user_agent)
        for i in range(1, 51):
            await h.patch(API + "/Source", "repo", {"spec": {"revision": f"r{i}", "artifact": [
                configmap("app", revision=f"r{i}")]}})
            await trio.sleep(0.010)
        for name in "abc":
            await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r50"), timeout=30)
        cm = await h.get("ConfigMap", "app")
        assert cm is not None and cm["data"]["revision"] == "r50"
        assert h.outcomes(name="a").count(OutcomeKind.SUPERSEDED) >= 1, "the revisions did supersede health checks"
        assert OutcomeKind.FAILED not in h.outcomes()


class BlackHole:
    """An event sink whose deliveries never return (an unreachable webhook)."""

    name = "black-hole"

    def __init__(self) -> None:
        self.attempts = 0

    async def deliver(self, event: Event) -> None:
        self.attempts += 1
        await trio.sleep_forever()


async def test_seed3_a_blackholed_event_sink_does_not_delay_a_dependent(kube_target: KubeTarget) -> None:
    hole = BlackHole()
    async with open_bundles(plugin, kube_target, sinks=[hole], manifests=[
            source("infra", "i1", [configmap("infra-settings")]), source("apps", "a1", [configmap("frontend")])]) as h:
        await h.apply(bundle("apps", "apps", depends_on=("infra",)))
        await h.wait_for(API + "/Bundle", "apps", timeout=30,
                         condition=lambda o: "DependencyNotReady" in str((o or {}).get("status")))
        await h.apply(bundle("infra", "infra", wait="500ms"))
        await h.wait_for(API + "/Bundle", "infra", condition=lambda o: ready_at(o, "i1"), timeout=30)
        ready_seen = trio.current_time()
        await h.wait_for("ConfigMap", "frontend", condition=lambda o: o is not None, timeout=30)
        at_once = 0.1 if h.target.virtual_time else 2.0  # in real time, a loaded machine's latency; the fallback is 30 s
        assert trio.current_time() - ready_seen < at_once, "the dependent started at once, from the watch path"
        assert hole.attempts >= 1, "events were being delivered into the black hole"
        await h.wait_for(API + "/Bundle", "apps", condition=lambda o: ready_at(o, "a1"), timeout=30)


# ----- the plugin's own validation (schemas bypassed) -----


def _unchecked(crd: Mapping[str, Any]) -> dict[str, Any]:
    """``crd`` with a schema that accepts anything, as an old CRD or a server that does not
    validate would: what reaches the plugin is then only its own to check."""
    out = copy.deepcopy(dict(crd))
    for version in out["spec"]["versions"]:
        version["schema"] = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return out


UNCHECKED = attrs.evolve(plugin, crds=tuple(_unchecked(crd) for crd in plugin.crds))


def not_ready(reason: str, message: str | None = None) -> Callable[[dict[str, Any] | None], bool]:
    def check(obj: dict[str, Any] | None) -> bool:
        ready = get_condition(obj or {}, "Ready")
        return (ready is not None and ready.get("status") == "False" and ready.get("reason") == reason
                and ready.get("observedGeneration") == (obj or {})["metadata"]["generation"]
                and (message is None or ready.get("message") == message))

    return check


async def schema_in_effect(h: PluginHarness, *, checked: bool) -> None:
    """Wait until the Bundle schema just installed is the one the server validates with (a real
    server serves a CRD's new schema a moment after the update): a Bundle whose ``prune`` is a
    string is refused (``checked``) or accepted, in a dry run."""
    bundles = await h.resource(API + "/Bundle")
    probe = raw_bundle("schema-probe", {"sourceRef": {"name": "p"}, "prune": "yes"})
    with trio.fail_after(30):
        while True:
            try:
                await h.client.create(bundles, probe, namespace=h.namespace, dry_run=True)
                if not checked:
                    return
            except InvalidError:
                if checked:
                    return
            await trio.sleep(0.1)


def raw_bundle(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Bundle", "metadata": {"name": name}, "spec": dict(spec)}


async def assert_terminal(h: PluginHarness, name: str) -> None:
    """The last run of ``name`` was terminal, and an hour later it has been neither retried nor
    requeued (on a real server, in real time: 5 s later, past a dozen retries of the failure
    backoff, which starts at 5 ms; a requeue at the 10 minute interval is only ruled out under
    virtual time). A later run that a change of something else triggered (a relist after a watch
    the server broke off, a dependency's event) is not a retry, and ends terminal too."""
    [first, *_] = await h.wait_runs(name=name, kind=OutcomeKind.TERMINAL, timeout=20)
    await trio.sleep(3600 if h.target.virtual_time else 5)
    runs = h.runs_for(name=name)
    later = runs[runs.index(first) + 1:]
    assert runs[-1].kind is OutcomeKind.TERMINAL, f"ended {runs[-1].kind}"
    retried = [r for r in later if r.attempt > 1 or r.trigger.sequence == first.trigger.sequence
               or r.trigger.reason == "requeue"]
    assert not retried, f"retried: {[(r.attempt, r.trigger.reason, r.kind) for r in runs]}"


async def test_wrong_types_are_a_terminal_invalid_spec_until_the_spec_changes(kube_target: KubeTarget) -> None:
    async with open_bundles(UNCHECKED, kube_target, manifests=[source("repo", "r1", [configmap("a")])]) as h:
        await schema_in_effect(h, checked=False)
        await h.apply(raw_bundle("app", {"sourceRef": {"name": "repo"}, "dependsOn": {"name": "infra"}, "prune": "yes"}))
        message = ("spec.dependsOn must be a list such as [{name: other-bundle}], got object; "
                   "spec.prune must be a boolean, got string 'yes'")
        app = await h.wait_for(API + "/Bundle", "app", condition=not_ready("InvalidSpec", message), timeout=20)
        assert app is not None and "finalizers" not in app["metadata"], "nothing was applied, nothing to clean up"
        await assert_terminal(h, "app")
        [warning] = [e for e in h.events if e.type is EventType.WARNING]
        assert (warning.reason, warning.message) == ("ReconcileTerminalError", f"TerminalError: invalid spec: {message}")
        await h.patch(API + "/Bundle", "app", {"spec": {"dependsOn": [], "prune": True}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)


async def test_a_missing_source_ref_is_an_invalid_spec(kube_target: KubeTarget) -> None:
    async with open_bundles(UNCHECKED, kube_target) as h:
        await schema_in_effect(h, checked=False)
        await h.apply(raw_bundle("app", {"interval": "1m"}))
        await h.wait_for(API + "/Bundle", "app", condition=not_ready("InvalidSpec", "spec.sourceRef is required"),
                         timeout=20)
        await assert_terminal(h, "app")


async def test_a_string_source_ref_is_an_invalid_spec_and_other_bundles_flow_on(kube_target: KubeTarget) -> None:
    async with open_bundles(UNCHECKED, kube_target, manifests=[source("platform", "p1", [configmap("settings")])]) as h:
        await schema_in_effect(h, checked=False)
        await h.apply([raw_bundle("bad", {"sourceRef": "platform"}), bundle("good", "platform")])
        await h.wait_for(API + "/Bundle", "good", condition=lambda o: ready_at(o, "p1"), timeout=20)
        await h.wait_for(API + "/Bundle", "bad", timeout=20, condition=not_ready(
            "InvalidSpec", "spec.sourceRef must be an object such as {name: my-source}, got string 'platform'"))
        await assert_terminal(h, "bad")
        await h.patch(API + "/Source", "platform", {"spec": {"revision": "p2"}})
        await h.wait_for(API + "/Bundle", "good", condition=lambda o: ready_at(o, "p2"), timeout=20)


async def test_a_bundle_that_depends_on_itself_is_a_terminal_dependency_cycle(kube_target: KubeTarget) -> None:
    """The reconciler's own check, for a cycle stored while the webhook that refuses it was not
    registered (tests/plugins/test_bundles_webhooks.py has the refusal)."""
    async with open_bundles(plugin, kube_target, webhooks=False, manifests=[
            source("repo", "r1", [configmap("a")]), bundle("app", "repo", depends_on=("app",))]) as h:
        await h.wait_for(API + "/Bundle", "app", timeout=20,
                         condition=not_ready("DependencyCycle", "dependency cycle: app -> app"))
        await assert_terminal(h, "app")
        await h.patch(API + "/Bundle", "app", {"spec": {"dependsOn": []}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)


async def test_a_dependency_cycle_is_named_and_breaking_it_wakes_both(kube_target: KubeTarget) -> None:
    """As above: a cycle the webhook did not see."""
    async with open_bundles(plugin, kube_target, webhooks=False, manifests=[
            source("repo", "r1", [configmap("a")]),
            bundle("a", "repo", depends_on=("b",)), bundle("b", "repo", depends_on=("a",))]) as h:
        await h.wait_for(API + "/Bundle", "a", timeout=20,
                         condition=not_ready("DependencyCycle", "dependency cycle: a -> b -> a"))
        await h.wait_for(API + "/Bundle", "b", timeout=20,
                         condition=not_ready("DependencyCycle", "dependency cycle: b -> a -> b"))
        assert set(h.outcomes(controller="bundles")) == {OutcomeKind.DEPENDENCY_NOT_READY}, "waiting, not failing"
        await h.patch(API + "/Bundle", "b", {"spec": {"dependsOn": []}})
        started = trio.current_time()
        for name in "ba":
            await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r1"), timeout=20)
        assert trio.current_time() - started < 5, "a was woken by b turning Ready, not by its fallback retry"


async def test_a_253_character_name_is_hashed_into_its_label_value(kube_target: KubeTarget) -> None:
    name = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])
    assert len(name) == 253
    hashed = "a" * 52 + "-5fcf065db5"
    async with open_bundles(plugin, kube_target, manifests=[
            source("repo", "r1", [configmap("x"), configmap("y")]), bundle(name, "repo")]) as h:
        await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r1"), timeout=20)
        with trio.fail_after(20):
            while not (events := await h.cluster_events(name=name)):
                await trio.sleep(0.1)
        assert [e["reason"] for e in events] == ["ReconciliationSucceeded"], "its events are recorded too"
        labelled = await h.list("ConfigMap", label_selector={OWNER_LABEL: hashed})
        assert sorted(o["metadata"]["name"] for o in labelled) == ["x", "y"]
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r2", "artifact": [configmap("x")]}})
        await h.wait_for(API + "/Bundle", name, condition=lambda o: ready_at(o, "r2"), timeout=20)
        assert await h.get("ConfigMap", "y") is None, "pruned: the hashed label is recognised as its own"
        await h.delete(API + "/Bundle", name)
        await h.wait_deleted(API + "/Bundle", name, timeout=20)
        assert await h.get("ConfigMap", "x") is None


async def test_an_invalid_source_is_terminal_until_the_source_changes(kube_target: KubeTarget) -> None:
    async with open_bundles(UNCHECKED, kube_target) as h:
        await schema_in_effect(h, checked=False)
        await h.apply([source("repo", "r1", [configmap("a"), {"kind": "ConfigMap"}]), bundle("app", "repo")])
        await h.wait_for(API + "/Bundle", "app", timeout=20, condition=not_ready(
            "InvalidSource",
            f"Source {h.namespace}/repo is invalid: spec.artifact[1] must be a manifest with apiVersion, kind and "
            "metadata.name"))
        await assert_terminal(h, "app")
        await h.wait_for(API + "/Source", "repo", timeout=20, condition=not_ready(
            "InvalidSpec", "spec.artifact[1] must be a manifest with apiVersion, kind and metadata.name"))
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r2", "artifact": [configmap("a")]}})
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r2"), timeout=20)
        await h.wait_for(API + "/Source", "repo", timeout=20, condition=source_ready("revision r2 with 1 object"))


def source_ready(message: str) -> Callable[[dict[str, Any] | None], bool]:
    def check(obj: dict[str, Any] | None) -> bool:
        ready = get_condition(obj or {}, "Ready")
        return (ready is not None and ready.get("status") == "True" and ready.get("reason") == "ArtifactReady"
                and ready.get("message") == message
                and ready.get("observedGeneration") == (obj or {})["metadata"]["generation"]
                and (obj or {})["status"].get("observedGeneration") == (obj or {})["metadata"]["generation"])

    return check


async def test_a_source_is_ready_with_its_revision_and_object_count(kube_target: KubeTarget) -> None:
    async with open_bundles(plugin, kube_target, manifests=[
            source("repo", "r1", [configmap("a"), configmap("b"), configmap("c")])]) as h:
        await h.wait_for(API + "/Source", "repo", timeout=20, condition=source_ready("revision r1 with 3 objects"))
        await h.patch(API + "/Source", "repo", {"spec": {"revision": "r2", "artifact": []}})
        await h.wait_for(API + "/Source", "repo", timeout=20, condition=source_ready("revision r2 with 0 objects"))


@pytest.mark.parametrize(("spec", "field"), [
    ({"sourceRef": "platform"}, "spec.sourceRef"),
    ({"sourceRef": {"name": "p"}, "prune": "yes"}, "spec.prune"),
    ({"sourceRef": {"name": "p"}, "dependsOn": {"name": "x"}}, "spec.dependsOn"),
    ({"sourceRef": {"name": "p", "kind": "GitRepository"}}, "spec.sourceRef.kind"),
    ({"sourceRef": {"name": "p"}, "interval": "0s"}, "spec.interval"),
    ({"sourceRef": {"name": "p"}, "dependsOn": [{"name": "x"}, {"name": "x"}]}, "spec.dependsOn[1]"),
    ({"dependsOn": []}, "spec.sourceRef"),
])
async def test_the_crd_schema_rejects_what_the_plugin_would(
        kube_target: KubeTarget, spec: dict[str, Any], field: str) -> None:
    """Created, as a server-side apply of a value of the wrong type is refused before validation
    (a 500 naming the type, see tests/apiserver/test_apply_types.py)."""
    async with open_bundles(plugin, kube_target) as h:
        await schema_in_effect(h, checked=True)
        bundles = await h.resource(API + "/Bundle")
        with pytest.raises(InvalidError, match=re.escape(field)):
            await h.client.create(bundles, raw_bundle("bad", spec), namespace=h.namespace)
