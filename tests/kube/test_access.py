"""Permissions checked at start (SelfSubjectAccessReview), 403s reported once and counted."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import attrs
import pytest
import trio
from prometheus_client import CollectorRegistry, generate_latest

from engine import Manager
from engine.apiserver import ApiServer
from engine.kube import (
    Client,
    Config,
    ForbiddenCollector,
    ForbiddenError,
    MissingPermission,
    MissingPermissionsError,
    PolicyRule,
    Resource,
    check_permissions,
    run_plugins,
    whoami,
)
from engine.plugins.bundles import plugin as bundles

SA = "system:serviceaccount:default:op"


@pytest.fixture
async def api() -> AsyncIterator[ApiServer]:
    async with ApiServer(listen=False, seed=0) as server:
        yield server


@pytest.fixture
async def admin(api: ApiServer) -> AsyncIterator[Client]:
    async with Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport()) as client:
        yield client


@pytest.fixture
async def sa(api: ApiServer, admin: Client) -> AsyncIterator[Client]:
    accounts = await admin.resource("v1", "ServiceAccount")
    await admin.create(accounts, {"metadata": {"name": "op"}}, namespace="default")
    tokens = Resource("", "v1", "TokenRequest", "serviceaccounts/op/token", True)
    answer = await admin.create(tokens, {"apiVersion": "authentication.k8s.io/v1", "spec": {}}, namespace="default")
    config = attrs.evolve(Config.from_dict(api.kubeconfig), token=answer["status"]["token"])
    async with Client(config, transport=api.memory_transport()) as client:
        yield client


async def grant(admin: Client, kind: str, rules: list[dict[str, object]], namespace: str | None = None) -> None:
    roles = await admin.resource("rbac.authorization.k8s.io/v1", kind)
    bindings = await admin.resource("rbac.authorization.k8s.io/v1", f"{kind}Binding")
    await admin.create(roles, {"metadata": {"name": "op"}, "rules": rules}, namespace=namespace)
    await admin.create(bindings, {
        "metadata": {"name": "op"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": "op"},
        "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "default"}],
    }, namespace=namespace)


async def test_check_permissions_asks_for_each_verb_scope_and_name(admin: Client, sa: Client) -> None:
    rules = [
        PolicyRule("", "configmaps", ("get", "list")),
        PolicyRule("apps", "deployments/status", ("patch",)),
        PolicyRule("apiextensions.k8s.io", "customresourcedefinitions", ("get",), cluster_wide=True,
                   resource_names=("a.x.dev",)),
    ]
    assert await check_permissions(sa, rules, namespace="team") == (
        MissingPermission("get", "apiextensions.k8s.io", "customresourcedefinitions", None, "a.x.dev"),
        MissingPermission("get", "", "configmaps", "team"),
        MissingPermission("list", "", "configmaps", "team"),
        MissingPermission("patch", "apps", "deployments/status", "team"),
    )
    namespaces = await admin.resource("v1", "Namespace")
    await admin.create(namespaces, {"metadata": {"name": "team"}})
    await grant(admin, "Role", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]},
                                {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["patch"]}],
                namespace="team")
    await grant(admin, "ClusterRole", [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                                        "resourceNames": ["a.x.dev"], "verbs": ["get"]}])
    assert await check_permissions(sa, rules, namespace="team") == ()
    assert await check_permissions(admin, rules, namespace=None) == ()
    assert await whoami(sa) == SA
    assert await whoami(admin) == "kubernetes-admin"


async def test_the_runner_refuses_to_start_without_the_permissions_in_one_line(sa: Client) -> None:
    manager = Manager(handle_signals=False)
    with pytest.raises(MissingPermissionsError, match=(
        rf'^User "{SA}" lacks 2 permissions the plugins need: get customresourcedefinitions.apiextensions.k8s.io '
        r'"bundles.bundles.engine.dev" cluster-wide; get customresourcedefinitions.apiextensions.k8s.io '
        r'"sources.bundles.engine.dev" cluster-wide \(python -m engine manifests --plugin bundles --namespace demo '
        r"generates the Role they need\)$")) as caught:
        await run_plugins(sa, [bundles], manager=manager, namespace="demo", install=False, check_access=True)
    assert not manager.started
    assert caught.value.identity == SA and len(caught.value.missing) == 2


async def test_after_the_crds_every_other_rule_is_checked_before_the_manager_runs(
    api: ApiServer, admin: Client, sa: Client
) -> None:
    from engine.kube import install_crds

    await install_crds(admin, bundles.crds)
    await grant(admin, "ClusterRole", [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                                        "verbs": ["get"]}])
    manager = Manager(handle_signals=False)
    with pytest.raises(MissingPermissionsError) as caught:
        await run_plugins(sa, [bundles], manager=manager, namespace="demo", install=False, check_access=True)
    assert not manager.started
    assert [str(m) for m in caught.value.missing] == [
        'create configmaps in namespace "demo"', 'delete configmaps in namespace "demo"',
        'get configmaps in namespace "demo"', 'list configmaps in namespace "demo"',
        'patch configmaps in namespace "demo"',
        'get bundles.bundles.engine.dev in namespace "demo"', 'list bundles.bundles.engine.dev in namespace "demo"',
        'patch bundles.bundles.engine.dev in namespace "demo"', 'watch bundles.bundles.engine.dev in namespace "demo"',
        'patch bundles.bundles.engine.dev/status in namespace "demo"',
        'get sources.bundles.engine.dev in namespace "demo"', 'list sources.bundles.engine.dev in namespace "demo"',
        'watch sources.bundles.engine.dev in namespace "demo"',
        'patch sources.bundles.engine.dev/status in namespace "demo"',
    ]


async def test_each_forbidden_verb_and_resource_is_logged_once_and_counted(
    sa: Client, caplog: pytest.LogCaptureFixture
) -> None:
    configmaps = await sa.resource("v1", "ConfigMap")
    caplog.set_level(logging.ERROR, logger="engine.kube.forbidden")
    for _ in range(3):
        with pytest.raises(ForbiddenError):
            await sa.list(configmaps, namespace="default")
        await trio.sleep(1)
    with pytest.raises(ForbiddenError):
        await sa.get(configmaps, "x", namespace="default")
    assert [r.getMessage() for r in caplog.records] == [
        'forbidden: the credentials lack the permission to list configmaps in namespace "default"; requests needing '
        "it fail until it is granted (declare it in the plugin's rules, see python -m engine manifests)",
        'forbidden: the credentials lack the permission to get configmaps "x" in namespace "default"; requests '
        "needing it fail until it is granted (declare it in the plugin's rules, see python -m engine manifests)",
    ]
    assert sa.forbidden.counts() == {("list", "configmaps"): 3, ("get", "configmaps"): 1}
    assert sa.forbidden.notices() == [
        'forbidden: the credentials lack the permission to list configmaps in namespace "default" (3 refused)',
        'forbidden: the credentials lack the permission to get configmaps "x" in namespace "default" (1 refused)',
    ]
    registry = CollectorRegistry()
    registry.register(ForbiddenCollector(sa))
    text = generate_latest(registry).decode()
    assert 'engine_forbidden_requests_total{resource="configmaps",verb="list"} 3.0' in text
    assert 'engine_forbidden_requests_total{resource="configmaps",verb="get"} 1.0' in text
