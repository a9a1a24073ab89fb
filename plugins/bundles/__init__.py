"""``bundles``: a small GitOps controller with the shape of Flux's source and kustomize controllers.

A ``Source`` carries a revision and an inline artifact (a list of manifests); the ``sources``
controller checks it and sets its ``Ready`` condition (``revision r1 with 3 objects``, or
``InvalidSpec`` naming what is wrong) and ``observedGeneration``. A ``Bundle``
references a Source, may depend on other Bundles (``dependsOn``), and has an ``interval``, a
``timeout`` and a ``healthCheckWait``. Reconciling a Bundle:

1. waits for its dependencies (``DependencyNotReady``; woken from the watch path when a
   dependency turns Ready);
2. applies the artifact's manifests with server-side apply (field manager
   ``bundles.engine.dev``);
3. prunes what it applied before and no longer has (the inventory in its status);
4. waits for health inside ``ctx.interruptible()``: a new Source revision supersedes it;
   ConfigMaps and Secrets are healthy once present, objects with a ``Ready`` condition when it
   is True, and they must stay so for ``healthCheckWait``;
5. writes ``status`` (``Ready``, ``Reconciling``, ``observedGeneration``,
   ``lastAppliedRevision``, ``inventory``) inside ``ctx.shield``, and emits events.

Every Bundle and Source is checked by the plugin itself (the CRDs' schemas reject most mistakes
at admission, but schemas can be bypassed): a malformed Bundle gets ``Ready=False`` with reason
``InvalidSpec`` naming each broken field, a malformed Source makes its Bundles ``InvalidSource``;
both are terminal until the object changes. A Bundle that depends on itself is a terminal
``DependencyCycle``; one in a longer cycle says ``dependency cycle: a -> b -> a`` and waits, woken
when the cycle is broken. Bundle names longer than 63 characters are hashed into the owner label
value (``bundles.engine.dev/name``).

Two admission webhooks come with the plugin (``engine.plugins.bundles._webhooks``): the validating one
refuses a Bundle whose ``dependsOn`` closes a cycle, through other Bundles too, naming it; the
mutating one writes ``interval: 10m`` into a Bundle that has none. The reconciler's own cycle
check above remains for what was stored without them.

A superseded or shutdown-cancelled run writes no failure status and emits no failure event.
With ``prune`` (the default) a Bundle carries the finalizer ``bundles.engine.dev/finalizer``:
deleting it garbage-collects the objects it applied (those still labelled for it) first.
"""

from __future__ import annotations

from ._controller import plugin

__all__ = ["plugin"]
