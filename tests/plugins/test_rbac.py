"""The bundled plugins run as their own ServiceAccount, under the Role ``manifests`` generates
(``open_plugin_test(..., rbac=True)``), and a plugin that touches what it did not declare fails
its own test with the 403 and the rule to declare."""

from __future__ import annotations

import pytest

from engine import Controller, EventType, OutcomeKind, RunContext
from engine.kube import Plugin, PluginContext, PolicyRule
from engine.plugins.bundles import plugin as bundles_plugin
from engine.plugins.mirror import plugin as mirror_plugin
from engine.testing import HarnessError, KubeTarget, open_plugin_test

from .._e2e import API, bundle, configmap, ready_at, source
from .test_mirror import Names


async def test_bundles_converges_under_its_generated_role(kube_target: KubeTarget) -> None:
    ns = kube_target.namespace
    async with open_plugin_test(bundles_plugin, kube_target, watch_namespace=ns, rbac=True, manifests=[
            source("repo", "r1", [configmap("a"), configmap("b")], namespace=None),
            bundle("app", "repo", namespace=None)]) as h:
        await h.wait_for(API + "/Bundle", "app", condition=lambda o: ready_at(o, "r1"), timeout=20)
        assert {o["metadata"]["name"] for o in await h.list("ConfigMap")} >= {"a", "b"}
        await h.delete(API + "/Bundle", "app")
        await h.wait_deleted(API + "/Bundle", "app", timeout=20)
        assert h.permissions is not None and set(h.permissions.namespaces) == {ns}
        assert h.replica_client.forbidden.counts() == {}
        assert [e for e in h.events if e.type is EventType.WARNING] == []


@pytest.mark.kube_rbac
async def test_mirror_copies_under_its_generated_cluster_role(kube_target: KubeTarget, kube_rbac: bool) -> None:
    assert kube_rbac
    n = Names.of(kube_target)
    async with open_plugin_test(mirror_plugin, kube_target, namespace=n("src"),
                                manifests=[n.namespace("src"), n.namespace("a1", team="a")], rbac=kube_rbac) as h:
        await h.apply(n.source())
        await h.wait_for("ConfigMap", "settings", namespace=n("a1"), condition=lambda o: o is not None)
        assert await n.copies(h) == {"a1"}
        await h.delete("ConfigMap", "settings")
        await h.wait_deleted("ConfigMap", "settings")
        assert h.permissions is not None and h.permissions.cluster and not h.permissions.namespaces


def _sneaky(declared: tuple[PolicyRule, ...]) -> Plugin:
    """Watches ConfigMaps (declared by its informer) and, in its reconcile, lists Secrets
    through the raw client: declared only when ``declared`` says so."""

    async def setup(ctx: PluginContext) -> None:
        client = ctx.client
        configmaps = await ctx.cluster.informer("v1", "ConfigMap")
        secrets = await client.resource("v1", "Secret")

        async def reconcile(run: RunContext) -> None:
            await client.list(secrets, namespace=run.ref.namespace)

        ctx.cluster.watches(ctx.manager.add_controller(Controller("sneaky", reconcile)), configmaps)

    return Plugin(name="sneaky", setup=setup, rules=declared)


async def test_an_undeclared_access_fails_the_plugins_test_with_the_rule_to_declare(kube_target: KubeTarget) -> None:
    ns = kube_target.namespace
    with pytest.raises(HarnessError, match=(
        r'^the plugin was refused permissions its rules do not grant: list secrets in namespace "' + ns
        + r'" \(declare PolicyRule\(\'\', \'secrets\', \(\'list\',\)\)\)$')):
        async with open_plugin_test(_sneaky(()), kube_target, watch_namespace=ns, rbac=True,
                                    manifests=[configmap("c")]) as h:
            failure = (await h.wait_runs(name="c", kind=OutcomeKind.FAILED))[0]
            assert "403 Forbidden" in str(failure.outcome.error)
    with pytest.raises(AssertionError, match="^the test failed first\n") as failed:
        async with open_plugin_test(_sneaky(()), kube_target, watch_namespace=ns, rbac=True,
                                    manifests=[configmap("c")]) as h:
            await h.wait_runs(name="c", kind=OutcomeKind.FAILED)
            raise AssertionError("the test failed first")
    assert failed.value.__notes__ == [
        f'the plugin was refused permissions its rules do not grant: list secrets in namespace "{ns}" '
        f"(declare PolicyRule('', 'secrets', ('list',)))"
    ]
    declared = (PolicyRule("", "secrets", ("list",)),)
    async with open_plugin_test(_sneaky(declared), kube_target, watch_namespace=ns, rbac=True,
                                manifests=[configmap("c")]) as h:
        await h.wait_runs(name="c", kind=OutcomeKind.SUCCEEDED)
