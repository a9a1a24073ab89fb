"""A plugin whose every run asks to run again at once (``Result(requeue_after=0)``): it keeps
the engine busy at one virtual instant, so a simulation's virtual time never advances. What
``python -m engine simulate --seed-timeout`` and Ctrl-C must end."""

from __future__ import annotations

from engine import Controller, Result, RunContext
from engine.kube import Plugin, PluginContext

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "spinners.test.dev"},
    "spec": {
        "group": "test.dev",
        "scope": "Namespaced",
        "names": {"kind": "Spinner", "plural": "spinners", "singular": "spinner", "listKind": "SpinnerList"},
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}


async def setup(ctx: PluginContext) -> None:
    spinners = await ctx.cluster.informer("test.dev/v1", "Spinner")

    async def reconcile(run: RunContext) -> Result:
        return Result(requeue_after=0)

    ctx.cluster.watches(ctx.manager.add_controller(Controller("spinners", reconcile)), spinners)


plugin = Plugin(
    name="busy", setup=setup, crds=(CRD,),
    examples=({"apiVersion": "test.dev/v1", "kind": "Spinner", "metadata": {"name": "s"}, "spec": {"n": 1}},),
)
