from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio

from engine import Controller, Manager, RunContext
from engine.apiserver import ApiServer
from engine.kube import (
    SHARD_LABEL,
    Client,
    Config,
    NotFoundError,
    Plugin,
    PluginContext,
    PluginError,
    PluginHost,
    ServerError,
    TransportError,
    check_plugin_config,
    install_crds,
    load_plugin,
    load_plugins,
    run_plugins,
)
from engine.observability import Observability

from ..observability._support import get

ROOT = Path(__file__).resolve().parents[2]


async def _setup(ctx: object) -> None:
    pass


def test_load_by_module_and_attribute() -> None:
    assert load_plugin("tests.programs.plugins_for_tests:good").name == "good"


def test_load_a_factory() -> None:
    assert load_plugin("tests.programs.plugins_for_tests:factory").name == "made"


def test_load_bundled_by_name() -> None:
    assert load_plugin("bundles").name == "bundles"
    assert load_plugin("mirror").name == "mirror"


def test_load_by_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint(name="thirdparty", value="tests.programs.plugins_for_tests:good", group="engine.plugins")

    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        return [ep] if group == "engine.plugins" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert load_plugin("thirdparty").name == "good"


def test_unknown_plugin() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'nope' not found \(no module 'engine.plugins.nope', no entry point in 'engine.plugins'\)$"):
        load_plugin("nope")


def test_plugin_that_fails_to_import() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'tests.programs.plugin_import_error:plugin' failed to import: ModuleNotFoundError: No module named 'this_module_does_not_exist'$"):
        load_plugin("tests.programs.plugin_import_error:plugin")


def test_missing_attribute_and_wrong_type() -> None:
    with pytest.raises(PluginError, match=r"has no attribute 'missing'$"):
        load_plugin("tests.programs.plugins_for_tests:missing")
    with pytest.raises(PluginError, match=r"^plugin 'tests.programs.plugins_for_tests:not_a_plugin': expected an engine.kube.Plugin, got int$"):
        load_plugin("tests.programs.plugins_for_tests:not_a_plugin")


def test_a_function_that_cannot_be_a_plugin_factory_is_named_as_the_mistake_it_is() -> None:
    with pytest.raises(PluginError, match=(
        r"^plugin 'tests.programs.plugins_for_tests:setup' is an async function, not a Plugin: name the Plugin "
        r"that holds it \(Plugin\(name=..., setup=...\)\) or a function that returns that Plugin$"
    )):
        load_plugin("tests.programs.plugins_for_tests:setup")
    with pytest.raises(PluginError, match=(
        r"^plugin 'tests.programs.plugins_for_tests:factory_with_arguments' is a function that takes arguments "
        r"\(name: 'str'\) -> 'Plugin': a plugin factory takes none and returns a Plugin$"
    )):
        load_plugin("tests.programs.plugins_for_tests:factory_with_arguments")
    with pytest.raises(PluginError, match=(
        r"^plugin 'tests.programs.plugins_for_tests:factory_of_a_number': its factory returned int, "
        r"not an engine.kube.Plugin$"
    )):
        load_plugin("tests.programs.plugins_for_tests:factory_of_a_number")


def test_a_configuration_key_no_plugin_or_setting_has_is_refused_with_the_valid_ones() -> None:
    widgets = Plugin(name="widgets", setup=_setup, config={"size": 1, "colour": "red"})
    plain = Plugin(name="plain", setup=_setup)
    check_plugin_config([widgets, plain], {"widgets": {"size": 3}, "plain": None})
    with pytest.raises(PluginError, match=(
        r"^plugin 'widgets' has no setting 'colur' \(its settings: colour, size\)$"
    )):
        check_plugin_config([widgets], {"widgets": {"colur": "blue", "size": 2}})
    with pytest.raises(PluginError, match=r"^plugin 'plain' has no setting 'size' \(its settings: none\)$"):
        check_plugin_config([plain], {"plain": {"size": 2}})
    with pytest.raises(PluginError, match=(
        r"^configuration for 'widget', which is not a plugin of this run \(plugins: plain, widgets\)$"
    )):
        check_plugin_config([widgets, plain], {"widget": {"size": 2}})
    check_plugin_config([widgets], {"broken": {"size": 2}}, skipped=True)


def test_invalid_crd_is_rejected() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'x': crds must be apiextensions.k8s.io/v1 CustomResourceDefinition objects$"):
        Plugin(name="x", setup=_setup, crds=({"apiVersion": "v1", "kind": "ConfigMap"},))


def test_bad_plugins_are_skipped_unless_strict() -> None:
    plugins, errors = load_plugins(["nope", "tests.programs.plugins_for_tests:good", "bundles"])
    assert [p.name for p in plugins] == ["good", "bundles"]
    assert [str(e) for e in errors] == [
        "plugin 'nope' not found (no module 'engine.plugins.nope', no entry point in 'engine.plugins')"
    ]
    with pytest.raises(PluginError):
        load_plugins(["nope", "bundles"], strict=True)


def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine", "run", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_runner_reports_a_bad_plugin_and_exits_when_strict(tmp_path: Path) -> None:
    out = _run("--embedded", "--write-kubeconfig", str(tmp_path / "kc"), "--plugin", "nope", "--plugin", "bundles",
               "--strict-plugins")
    assert out.returncode == 1
    (last,) = [json.loads(line) for line in out.stderr.splitlines() if "not found" in line]
    assert (last["level"], last["msg"][:27]) == ("error", "plugin 'nope' not found (no")


def test_runner_needs_a_plugin() -> None:
    out = _run("--embedded")
    assert out.returncode == 2
    assert "error: no plugin to run (give --plugin NAME, e.g. --plugin bundles)" in out.stderr


def test_runner_names_the_bad_kubeconfig_field(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    out = _run("--kubeconfig", str(bad), "--plugin", "bundles")
    assert out.returncode == 1
    (last,) = [json.loads(line) for line in out.stderr.splitlines()]
    assert last["level"] == "error" and last["msg"].startswith(f"{bad}: ")


def test_missing_module_of_a_module_attr_spec() -> None:
    with pytest.raises(PluginError, match=r"^plugin 'nosuchpkg.mod:plugin' not found: no module named 'nosuchpkg.mod'$"):
        load_plugin("nosuchpkg.mod:plugin")


WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.engine.dev"},
    "spec": {
        "group": "test.engine.dev",
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
        }],
    },
}


def _widget(name: str, **labels: str) -> dict[str, object]:
    return {"apiVersion": "test.engine.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "default", "labels": labels}}


def _widgets_plugin(seen: list[str], contexts: list[PluginContext]) -> Plugin:
    async def setup(ctx: PluginContext) -> None:
        contexts.append(ctx)

        async def reconcile(run: RunContext) -> None:
            seen.append(run.ref.name)

        controller = ctx.manager.add_controller(Controller("widgets", reconcile))
        informer = await ctx.cluster.informer("test.engine.dev/v1", "Widget", label_selector=ctx.cluster.label_selector)
        ctx.cluster.watches(controller, informer)

    return Plugin(name="widgets", setup=setup, crds=(WIDGET_CRD,), config={"size": 1, "colour": "red"},
                  examples=(_widget("example", **{SHARD_LABEL: "a"}),))


async def test_run_plugins_installs_sets_up_applies_examples_and_runs_until_stopped() -> None:
    seen: list[str] = []
    contexts: list[PluginContext] = []
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        manager = Manager(handle_signals=False, grace_period=1)
        obs = Observability(manager, health_probe_bind_address=":0")
        async with trio.open_nursery() as nursery:
            with trio.fail_after(20):
                host: PluginHost = await nursery.start(partial(
                    run_plugins, client, [_widgets_plugin(seen, contexts), "tests.programs.plugins_for_tests:broken_setup"],
                    manager=manager, config={"widgets": {"size": 3}}, namespace="default", shard="a",
                    apply_examples=True, observability=obs, strict=False,
                ))
            assert (host.manager, host.client, [p.name for p in host.plugins], host.examples_applied) == (
                manager, client, ["widgets"], 1)
            assert [str(e) for e in host.errors] == [
                "plugin 'broken' failed to set up: RuntimeError: cannot reach the widget service"]
            ctx = contexts[0]
            assert (ctx.config, ctx.namespace, ctx.shard, ctx.cluster) == (
                {"size": 3, "colour": "red"}, "default", "a", host.cluster)
            assert host.cluster.label_selector == f"{SHARD_LABEL}=a"
            widgets = await client.resource("test.engine.dev/v1", "Widget")
            await client.create(widgets, _widget("other-shard", **{SHARD_LABEL: "b"}))
            await client.create(widgets, _widget("mine", **{SHARD_LABEL: "a"}))
            with trio.fail_after(20):
                while "mine" not in seen:
                    await trio.sleep(0.01)
            ready = await get(obs.health_probe_address, "/readyz", params={"verbose": ""})
            assert ready.text == "[+]manager ok\n[+]informers ok\nreadyz check passed\n"
            manager.stop("test over")
    assert sorted(seen) == ["example", "mine"]


async def test_run_plugins_strict_raises_the_first_failure_and_never_runs_the_manager() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        manager = Manager(handle_signals=False)
        with pytest.raises(PluginError, match=r"^plugin 'nope' not found \(no module 'engine.plugins.nope', no entry point"):
            await run_plugins(client, ["nope", "tests.programs.plugins_for_tests:good"], manager=manager, strict=True)
        with pytest.raises(
            PluginError, match=r"^plugin 'broken' failed to set up: RuntimeError: cannot reach the widget service$"
        ):
            await run_plugins(client, ["tests.programs.plugins_for_tests:broken_setup"], manager=manager, strict=True)
        assert not manager.started and not manager.stopping


async def test_run_plugins_without_any_plugin_set_up_says_why() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        with pytest.raises(PluginError, match=(
            r"^no plugin could be set up: plugin 'nope' not found \(.*\); "
            r"plugin 'broken' failed to set up: RuntimeError: cannot reach the widget service$"
        )):
            await run_plugins(client, ["nope", "tests.programs.plugins_for_tests:broken_setup"],
                              manager=Manager(handle_signals=False), strict=False)
        with pytest.raises(PluginError, match=r"^CRD widgets.test.engine.dev is not installed"):
            await run_plugins(client, [_widgets_plugin([], [])], manager=Manager(handle_signals=False),
                              install=False, strict=True)


async def test_run_plugins_is_strict_by_default_and_checks_configuration_before_writing() -> None:
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        with pytest.raises(PluginError, match=r"^plugin 'broken' failed to set up: RuntimeError: cannot reach"):
            await run_plugins(client, ["tests.programs.plugins_for_tests:broken_setup", "bundles"],
                              manager=Manager(handle_signals=False))
        with pytest.raises(PluginError, match=r"^plugin 'widgets': its configuration must be a mapping, got list$"):
            await run_plugins(client, [_widgets_plugin([], [])], manager=Manager(handle_signals=False),
                              config={"widgets": ["size", 3]})
        crds = await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        with pytest.raises(NotFoundError):
            await client.get(crds, WIDGET_CRD["metadata"]["name"])


async def test_an_unreachable_server_is_not_blamed_on_a_plugin() -> None:
    config = Config.from_dict({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    })
    async with Client(config) as client:
        with pytest.raises(TransportError):
            await run_plugins(client, ["bundles"], manager=Manager(handle_signals=False), strict=False)


def _memory_client(api: ApiServer) -> Client:
    """A client joined to ``api`` in memory (for MockClock), each request given 30 s."""
    return Client(Config.from_dict(api.kubeconfig), transport=api.memory_transport(), timeout=30)


def _hung_then_failing(api: ApiServer) -> None:
    """What a kube-apiserver under SIGSTOP, then starting again, does to set-up: the first
    access review gets no answer, then two answer 503, and discovery answers 503 a dozen times
    (more than the client's own retries of a read)."""
    api.faults.add_latency(45, count=1, resource="selfsubjectaccessreviews")
    api.faults.fail(503, count=2, resource="selfsubjectaccessreviews")
    api.faults.fail(503, count=12, verbs={"discovery"})


async def test_set_up_waits_out_an_api_server_that_hangs_and_fails_within_the_startup_timeout(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []
    async with ApiServer(listen=False) as api, _memory_client(api) as client:
        _hung_then_failing(api)
        manager = Manager(handle_signals=False, grace_period=1)
        async with trio.open_nursery() as nursery:
            started = trio.current_time()
            host: PluginHost = await nursery.start(partial(
                run_plugins, client, [_widgets_plugin(seen, [])], manager=manager, check_access=True,
                apply_examples=True, startup_timeout=120,
            ))
            assert 30 < trio.current_time() - started < 120
            assert [p.name for p in host.plugins] == ["widgets"]
            assert api.faults.active == []
            while "example" not in seen:
                await trio.sleep(0.1)
            manager.stop("test over")
    warnings = [r.getMessage() for r in caplog.records if r.name == "engine.kube.plugins" and r.levelname == "WARNING"]
    assert any(w.startswith("start-up: the access check failed (TransportError: ") for w in warnings), warnings
    assert any(w.startswith("start-up: the access check failed (ServerError: 503") for w in warnings), warnings
    assert any(w.startswith("start-up: installing plugin widgets's CRDs failed (ServerError: 503") for w in warnings)


async def test_the_crd_wait_counts_an_api_server_that_fails_as_not_serving_them_yet(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api, _memory_client(api) as client:
        await client.resource("apiextensions.k8s.io/v1", "CustomResourceDefinition")
        down = api.faults.fail(503, count=None, verbs={"discovery"})
        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(install_crds, client, [WIDGET_CRD], timeout=60))
            await trio.sleep(20)
            assert down.hits > 5
            api.faults.remove(down)
        assert (await client.resource("test.engine.dev/v1", "Widget")).plural == "widgets"
        api.faults.fail(503, count=None, verbs={"discovery"})
        other = {**WIDGET_CRD, "metadata": {"name": "gadgets.other.engine.dev"}, "spec": {
            **WIDGET_CRD["spec"], "group": "other.engine.dev",
            "names": {"kind": "Gadget", "plural": "gadgets", "singular": "gadget", "listKind": "GadgetList"}}}
        with pytest.raises(ServerError, match=r"^503 "):
            await install_crds(client, [other], timeout=10)


async def test_without_a_startup_timeout_set_up_ends_at_the_first_outage(autojump_clock: trio.testing.MockClock) -> None:
    async with ApiServer(listen=False) as api, _memory_client(api) as client:
        _hung_then_failing(api)
        manager = Manager(handle_signals=False)
        with pytest.raises(TransportError, match="selfsubjectaccessreviews"):
            await run_plugins(client, [_widgets_plugin([], [])], manager=manager, check_access=True)
        assert not manager.started


async def test_set_up_gives_up_on_an_outage_longer_than_the_startup_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with ApiServer(listen=False) as api, _memory_client(api) as client:
        api.faults.fail(503, count=None, resource="selfsubjectaccessreviews")
        manager = Manager(handle_signals=False)
        started = trio.current_time()
        with pytest.raises(ServerError, match=r"^503 "):
            await run_plugins(client, [_widgets_plugin([], [])], manager=manager, check_access=True,
                              startup_timeout=40)
        assert 40 <= trio.current_time() - started < 41
        assert not manager.started


async def test_run_plugins_scale_out_waits_for_a_foreign_claim_and_is_ready_while_owning_nothing() -> None:
    import datetime as dt

    from engine import OwnershipGate
    from engine._keyspace import KeyRanges
    from engine.kube import RING_LABEL, HashRing
    from engine.kube.lowlevel import LEASE_RESOURCE

    seen: list[str] = []
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await client.create(LEASE_RESOURCE, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "widgets-ghost", "namespace": "default", "labels": {RING_LABEL: "widgets"},
                         "annotations": {"ring.engine.dev/plugins": "widgets",
                                         "ring.engine.dev/held": "0-10000000000000000"}},
            "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 2, "renewTime": now, "acquireTime": now},
        })
        gate = OwnershipGate(lambda ref: None)
        manager = Manager(handle_signals=False, grace_period=1, ownership=gate)
        ring = HashRing(client, gate, name="widgets", namespace="default", plugins=["widgets"],
                        lease_duration=1.5, renew_deadline=1, retry_period=0.2)
        obs = Observability(manager, health_probe_bind_address=":0", metrics_bind_address=":0")
        async with trio.open_nursery() as nursery:
            with trio.fail_after(20):
                host: PluginHost = await nursery.start(partial(
                    run_plugins, client, [_widgets_plugin(seen, [])], manager=manager, namespace="default",
                    observability=obs, scale_out=ring,
                ))
            widgets = await client.resource("test.engine.dev/v1", "Widget")
            for i in range(5):
                await client.create(widgets, _widget(f"w{i}"))
            await trio.sleep(0.5)
            assert not gate.owned and seen == [], "nothing runs while another member's Lease holds the key space"
            assert gate.statistics().parked == 5
            ready = await get(obs.health_probe_address, "/readyz", params={"verbose": ""})
            assert ready.status_code == 200, "a replica that owns nothing is ready"
            with trio.fail_after(10):
                while len(seen) < 5:
                    await trio.sleep(0.05)
            assert gate.owned == KeyRanges.everything()
            metrics = (await get(obs.metrics_address, "/metrics")).text
            assert 'engine_ring_owned_share{ring="widgets"} 1.0' in metrics
            assert 'engine_ring_owned_keys{ring="widgets"} 5.0' in metrics
            assert any(r.resource == "leases" and "list" in r.verbs for r in host.rules)
            manager.stop("test over")
        leases = await client.list(LEASE_RESOURCE, namespace="default", label_selector={RING_LABEL: "widgets"})
        assert [item["metadata"]["name"] for item in leases.items] == ["widgets-ghost"], "the member left"
    assert sorted(seen) == [f"w{i}" for i in range(5)]


@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
async def test_a_warm_standby_is_ready_once_its_informers_synced_and_a_cold_one_without_them(warm: bool) -> None:
    import datetime as dt

    from engine.kube import LeaderElector
    from engine.kube.lowlevel import LEASE_RESOURCE

    seen: list[str] = []
    contexts: list[PluginContext] = []
    async with ApiServer() as api, Client(Config.from_dict(api.kubeconfig)) as client:
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await client.create(LEASE_RESOURCE, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "widgets", "namespace": "default"},
            "spec": {"holderIdentity": "ghost", "leaseDurationSeconds": 3600, "renewTime": now, "acquireTime": now},
        })
        elector = LeaderElector(client, name="widgets", namespace="default", lease_duration=3, renew_deadline=2,
                                retry_period=0.2)
        manager = Manager(handle_signals=False, grace_period=1, leader_election=elector, enable_warmup=warm)
        obs = Observability(manager, health_probe_bind_address=":0")
        slow_list = api.faults.add_latency(1.5, resource="widgets", verbs={"list", "watch"})

        async def readyz() -> tuple[int, str]:
            answer = await get(obs.health_probe_address, "/readyz", params={"verbose": ""})
            return answer.status_code, answer.text

        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(run_plugins, client, [_widgets_plugin(seen, contexts)], manager=manager,
                                       namespace="default", observability=obs))
            with trio.fail_after(20):
                while obs.health_probe_address is None or not manager.standby or not elector.statistics().state_known:
                    await trio.sleep(0.02)
            cluster = contexts[0].cluster
            first = await readyz()
            api.faults.remove(slow_list)
            if warm:
                assert first == (500, "[+]manager ok\n[-]informers failed: check returned False\n"
                                      "[+]leader-election ok\nreadyz check failed\n"), "not ready before its caches synced"
                with trio.fail_after(20):
                    while (await readyz())[0] != 200:
                        await trio.sleep(0.05)
                assert cluster.synced and cluster.informers
            else:
                assert first == (200, "[+]manager ok\n[+]informers ok\n[+]leader-election ok\nreadyz check passed\n")
                assert not any(i.synced for i in cluster.informers), "a cold standby does not list"
            assert manager.standby and seen == []
            manager.stop("test over")
