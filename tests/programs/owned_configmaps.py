"""A plugin that server-side-applies a ConfigMap it owns, then writes its status: the shape
whose own watch echoes once superseded every run and kept the simulator from ending a seed
(``python -m engine simulate --plugin tests.programs.owned_configmaps:plugin``). Its status
says when (wall clock, as plugins write it) it was last reconciled, so each run's status write
changes the object: were the echo of that write news, every run would start another at the
same virtual instant, and virtual time would never advance."""

from __future__ import annotations

import datetime

from engine import Controller, RunContext
from engine.kube import Plugin, PluginContext, PolicyRule, Resource

GROUP = "test.dev"

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"widgets.{GROUP}"},
    "spec": {
        "group": GROUP,
        "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}

EXAMPLES = tuple(
    {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "metadata": {"name": f"w{i}"}, "spec": {"size": i}}
    for i in range(3)
)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


async def setup(ctx: PluginContext) -> None:
    widgets = await ctx.cluster.informer(f"{GROUP}/v1", "Widget")
    configmaps = await ctx.cluster.informer("v1", "ConfigMap")
    client = ctx.client
    cm_resource: Resource = configmaps.resource

    async def reconcile(run: RunContext) -> None:
        widget = widgets.store.get(run.ref.namespace, run.ref.name)
        if widget is None or widget["metadata"].get("deletionTimestamp"):
            return
        meta = widget["metadata"]
        await client.apply(cm_resource, {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"{meta['name']}-config", "namespace": meta["namespace"], "ownerReferences": [
                {"apiVersion": f"{GROUP}/v1", "kind": "Widget", "name": meta["name"], "uid": meta["uid"],
                 "controller": True}]},
            "data": {"size": str(widget["spec"].get("size"))},
        }, field_manager="widgets", force=True)
        with run.shield(5):
            await client.patch_status(widgets.resource, meta["name"], {"status": {
                "observedGeneration": meta["generation"], "reconciledAt": _now(),
                "conditions": [{"type": "Ready", "status": "True", "reason": "Applied", "message": "",
                                "observedGeneration": meta["generation"],
                                "lastTransitionTime": "2024-01-01T00:00:00Z"}]}},
                namespace=meta["namespace"])

    controller = ctx.manager.add_controller(Controller("widgets", reconcile))
    ctx.cluster.watches(controller, widgets)
    ctx.cluster.owns(controller, configmaps, owner_kind="Widget", owner_api_version=f"{GROUP}/v1")


plugin = Plugin(
    name="owned-configmaps", setup=setup, crds=(CRD,), examples=EXAMPLES,
    rules=(PolicyRule("", "configmaps", ("create", "patch")), PolicyRule(GROUP, "widgets/status", ("patch",))),
)
