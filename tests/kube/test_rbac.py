"""RBAC rules declared by what plugins do: rules_for, merging, resolution, derivation from setup."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial

import pytest
import trio

from engine import Manager
from engine.apiserver import ApiServer
from engine.kube import (
    EVENT_RULES,
    Client,
    Cluster,
    Config,
    KubernetesEventSink,
    LeaderElector,
    Permissions,
    Plugin,
    PluginContext,
    PluginError,
    PluginHost,
    PolicyRule,
    Resource,
    crd_rules,
    install_crds,
    leader_election_rules,
    load_plugin,
    merge_rules,
    plugin_rules,
    rules_for,
    run_plugins,
)

BUNDLES = Resource("bundles.engine.dev", "v1alpha1", "Bundle", "bundles", True, ("status",))
NAMESPACES = Resource("", "v1", "Namespace", "namespaces", False)
CONFIGMAPS = Resource("", "v1", "ConfigMap", "configmaps", True)


def R(group: str, resource: str, verbs: str, namespace: str | None = None, *, wide: bool = False,
      names: tuple[str, ...] = ()) -> PolicyRule:
    return PolicyRule(group, resource, tuple(verbs.split()), namespace=namespace, cluster_wide=wide,
                      resource_names=names)


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with ApiServer(listen=False, controllers=False) as api:
        async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
            yield client


def test_a_rule_sorts_its_verbs_and_names_and_renders_as_a_role_rule() -> None:
    rule = PolicyRule("apps", "deployments", ("watch", "get", "list", "get"), resource_names=("b", "a"))
    assert rule == R("apps", "deployments", "get list watch", names=("a", "b"))
    assert rule.to_dict() == {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["a", "b"],
                              "verbs": ["get", "list", "watch"]}
    assert R("", "configmaps", "get").to_dict() == {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}


def test_a_rule_rejects_what_rbac_cannot_grant() -> None:
    with pytest.raises(ValueError, match=r"^unknown verb 'escalate' \(choose from create, delete, deletecollection, "
                                         r"get, list, patch, update, watch\)$"):
        PolicyRule("", "configmaps", ("get", "escalate"))
    with pytest.raises(ValueError, match=r"^a rule needs at least one verb$"):
        PolicyRule("", "configmaps", ())
    with pytest.raises(ValueError, match=r"^resource must be '<plural>' or '<plural>/<subresource>', got 'a/b/c'$"):
        PolicyRule("", "a/b/c", ("get",))
    with pytest.raises(ValueError, match=r"^rule on 'configmaps': cluster_wide and namespace 'x' are exclusive$"):
        PolicyRule("", "configmaps", ("get",), namespace="x", cluster_wide=True)


def test_rules_for_maps_the_engine_operations_to_verbs_and_subresources() -> None:
    assert rules_for(BUNDLES, "patch_status", "set_finalizer", "hold_finalizer", "apply", "delete") == (
        R("bundles.engine.dev", "bundles", "create delete get patch"),
        R("bundles.engine.dev", "bundles/status", "patch"),
    )
    assert rules_for(BUNDLES, "informer", namespace="a") == (R("bundles.engine.dev", "bundles", "get list watch", "a"),)
    assert rules_for(CONFIGMAPS, "update_status", "get_status", cluster_wide=True) == (
        R("", "configmaps/status", "get update", wide=True),)
    assert rules_for(NAMESPACES, "list", namespace="ignored") == (R("", "namespaces", "list", wide=True),)
    with pytest.raises(ValueError, match=r"^unknown operation 'frobnicate' \(choose from apply, create, delete, "
                                         r"get, get_status, hold_finalizer, informer, list, list_all, patch, "
                                         r"patch_status, set_finalizer, update, update_status, watch\)$"):
        rules_for(BUNDLES, "get", "frobnicate")
    with pytest.raises(ValueError, match=r"^rules_for needs at least one operation$"):
        rules_for(BUNDLES)


def test_the_runner_pieces_declare_leases_events_and_crds() -> None:
    assert leader_election_rules("ops") == (R("coordination.k8s.io", "leases", "create get update watch", "ops"),)
    assert EVENT_RULES == (R("events.k8s.io", "events", "create get patch"),)
    crds = load_plugin("bundles").crds
    assert crd_rules(crds, install=False) == (
        R("apiextensions.k8s.io", "customresourcedefinitions", "get", wide=True,
          names=("bundles.bundles.engine.dev", "sources.bundles.engine.dev")),)
    assert crd_rules(crds, install=True) == (
        R("apiextensions.k8s.io", "customresourcedefinitions", "create get patch", wide=True),)
    assert crd_rules((), install=True) == ()


def test_merging_unites_verbs_per_resource_and_scope_and_sorts() -> None:
    assert merge_rules([
        R("b", "things", "get", "y"),
        R("b", "things", "list", "x"),
        R("", "configmaps", "watch"),
        R("b", "things", "watch", "x"),
        R("", "namespaces", "list", wide=True),
        R("", "configmaps", "get"),
        R("", "configmaps", "get", names=("one",)),
    ]) == (
        R("", "namespaces", "list", wide=True),
        R("", "configmaps", "get watch"),
        R("", "configmaps", "get", names=("one",)),
        R("b", "things", "list watch", "x"),
        R("b", "things", "get", "y"),
    )


def test_resolving_for_a_namespace_gives_roles_and_leaves_out_what_the_cluster_role_grants() -> None:
    rules = [
        R("", "configmaps", "get list watch"),
        R("", "configmaps", "create get", wide=True),
        R("", "namespaces", "list", wide=True),
        R("coordination.k8s.io", "leases", "get", "ops"),
        R("", "secrets", "get", wide=True),
        R("", "secrets", "get"),
    ]
    assert Permissions.resolve(rules, namespace="team") == Permissions(
        cluster=(R("", "configmaps", "create get", wide=True), R("", "namespaces", "list", wide=True),
                 R("", "secrets", "get", wide=True)),
        namespaces={"ops": (R("coordination.k8s.io", "leases", "get", "ops"),),
                    "team": (R("", "configmaps", "list watch", "team"),)},
    )
    assert Permissions.resolve(rules, namespace=None) == Permissions(
        cluster=(R("", "configmaps", "create get list watch", wide=True), R("", "namespaces", "list", wide=True),
                 R("", "secrets", "get", wide=True)),
        namespaces={"ops": (R("coordination.k8s.io", "leases", "get", "ops"),)},
    )


async def test_the_cluster_records_each_informer_where_it_watches(client: Client) -> None:
    for namespace, expected in (
        ("team", [R("", "configmaps", "get list watch"), R("", "configmaps", "get list watch", wide=True),
                  R("", "configmaps", "get list watch", "other"), R("", "namespaces", "get list watch", wide=True)]),
        (None, [R("", "configmaps", "get list watch"), R("", "configmaps", "get list watch"),
                R("", "configmaps", "get list watch", "other"), R("", "namespaces", "get list watch", wide=True)]),
    ):
        cluster = Cluster(client, Manager(handle_signals=False), namespace=namespace)
        await cluster.informer("v1", "ConfigMap")
        await cluster.informer("v1", "ConfigMap", namespace=None)
        await cluster.informer("v1", "ConfigMap", namespace="other")
        await cluster.informer("v1", "Namespace", namespace="ignored")
        assert cluster.rules == expected


BUNDLES_RULES = (
    R("apiextensions.k8s.io", "customresourcedefinitions", "get", wide=True,
      names=("bundles.bundles.engine.dev", "sources.bundles.engine.dev")),
    R("", "configmaps", "create delete get list patch"),
    R("bundles.engine.dev", "bundles", "get list patch watch"),
    R("bundles.engine.dev", "bundles/status", "patch"),
    R("bundles.engine.dev", "sources", "get list watch"),
    R("bundles.engine.dev", "sources/status", "patch"),
)

MIRROR_RULES = {
    "team": (
        R("", "configmaps", "create delete get list patch watch", wide=True),
        R("", "namespaces", "get list watch", wide=True),
        R("", "configmaps", "get list patch watch"),
    ),
    None: (
        R("", "configmaps", "create delete get list patch", wide=True),
        R("", "namespaces", "get list watch", wide=True),
        R("", "configmaps", "get list patch watch"),
    ),
}
"""Copies are read (an informer on every namespace) and written in every namespace; sources are
read, and hold a finalizer, in the namespace it runs for. Run for all namespaces, the copies'
informer is the one of the namespace it runs for (every namespace)."""


@pytest.mark.parametrize("namespace", [None, "team"])
async def test_the_bundled_plugins_derive_their_rules_from_their_setup(client: Client, namespace: str | None) -> None:
    bundles, mirror = load_plugin("bundles"), load_plugin("mirror")
    await install_crds(client, bundles.crds)
    assert await plugin_rules(client, [bundles], namespace=namespace) == BUNDLES_RULES
    mirror_rules = MIRROR_RULES[namespace]
    assert await plugin_rules(client, [mirror], namespace=namespace) == mirror_rules
    assert await plugin_rules(client, [bundles, mirror], namespace=namespace) == merge_rules(
        [*BUNDLES_RULES, *mirror_rules])


async def test_the_bundled_plugins_resolved_for_a_namespace(client: Client) -> None:
    bundles, mirror = load_plugin("bundles"), load_plugin("mirror")
    await install_crds(client, bundles.crds)
    rules = await plugin_rules(client, [bundles, mirror], namespace="team")
    assert Permissions.resolve([*rules, *EVENT_RULES], namespace="team") == Permissions(
        cluster=(
            R("", "configmaps", "create delete get list patch watch", wide=True),
            R("", "namespaces", "get list watch", wide=True),
            R("apiextensions.k8s.io", "customresourcedefinitions", "get", wide=True,
              names=("bundles.bundles.engine.dev", "sources.bundles.engine.dev")),
        ),
        namespaces={"team": (
            R("bundles.engine.dev", "bundles", "get list patch watch", "team"),
            R("bundles.engine.dev", "bundles/status", "patch", "team"),
            R("bundles.engine.dev", "sources", "get list watch", "team"),
            R("bundles.engine.dev", "sources/status", "patch", "team"),
            R("events.k8s.io", "events", "create get patch", "team"),
        )},
    )


def _declaring_plugin() -> Plugin:
    async def setup(ctx: PluginContext) -> None:
        configmaps = await ctx.cluster.resource("v1", "ConfigMap")
        ctx.uses(configmaps, "get", "patch_status", namespace="audit")
        ctx.require(R("apps", "deployments", "get"))

    return Plugin(name="declaring", setup=setup, rules=[R("", "secrets", "get", names=("token",))])


async def test_a_plugin_declares_rules_explicitly(client: Client) -> None:
    assert await plugin_rules(client, [_declaring_plugin()]) == (
        R("", "secrets", "get", names=("token",)),
        R("apps", "deployments", "get"),
        R("", "configmaps", "get", "audit"),
        R("", "configmaps/status", "patch", "audit"),
    )


def test_a_plugin_rejects_rules_that_are_not_rules() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'p': rules must be PolicyRule values, got dict$"):
        Plugin(name="p", setup=_declaring_plugin().setup, rules=[{"apiGroups": [""]}])  # type: ignore[list-item]


async def test_plugin_rules_reports_a_failing_setup(client: Client) -> None:
    async def setup(ctx: PluginContext) -> None:
        await ctx.cluster.informer("example.com/v1", "Gadget")

    with pytest.raises(PluginError, match=r"^plugin 'gadgets' failed to set up: ResourceNotFoundError: .*$"):
        await plugin_rules(client, [Plugin(name="gadgets", setup=setup)])


async def test_the_host_knows_the_rules_of_the_whole_run_with_leases_and_events() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        leader = LeaderElector(client, name="engine-test", namespace="default", identity="a")
        manager = Manager(handle_signals=False, grace_period=1, leader_election=leader)
        manager.add_sink(KubernetesEventSink(client, reporting_controller="engine"))
        async with trio.open_nursery() as nursery:
            with trio.fail_after(20):
                host: PluginHost = await nursery.start(partial(
                    run_plugins, client, ["bundles", _declaring_plugin()], manager=manager, namespace="default",
                ))
            manager.stop("test over")
    assert host.rules == (
        R("apiextensions.k8s.io", "customresourcedefinitions", "create get patch", wide=True),
        R("", "configmaps", "create delete get list patch"),
        R("", "secrets", "get", names=("token",)),
        R("apps", "deployments", "get"),
        R("bundles.engine.dev", "bundles", "get list patch watch"),
        R("bundles.engine.dev", "bundles/status", "patch"),
        R("bundles.engine.dev", "sources", "get list watch"),
        R("bundles.engine.dev", "sources/status", "patch"),
        R("events.k8s.io", "events", "create get patch"),
        R("", "configmaps", "get", "audit"),
        R("", "configmaps/status", "patch", "audit"),
        R("coordination.k8s.io", "leases", "create get update watch", "default"),
    )
