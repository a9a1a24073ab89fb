"""The benchmark's operator written with kopf, as its documentation suggests.

    python bench/operators/kopf_op.py --kubeconfig PATH --namespace NS --stats PATH

Async create and ``spec.n`` update handlers write ``status.observedN = spec.n`` through kopf's patch.
Standalone (no peering), one namespace, kopf's defaults otherwise, except: Kubernetes Event
posting is off and logging is quiet (the other two operators post no events and log nothing
per object either). kopf logs in with its default (``$KUBECONFIG``, set to the given kubeconfig).
SIGTERM is handled by kopf.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

if "--kubeconfig" in sys.argv[:-1]:  # kopf's default login reads $KUBECONFIG
    os.environ["KUBECONFIG"] = sys.argv[sys.argv.index("--kubeconfig") + 1]

import _stats  # noqa: E402
import kopf  # noqa: E402


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.posting.enabled = False


def _write(name: str, spec: Any, patch: kopf.Patch) -> None:
    _stats.count(name)
    patch.status["observedN"] = spec["n"]


@kopf.on.create(_stats.GROUP, _stats.VERSION, _stats.PLURAL)
async def on_create(name: str, spec: Any, patch: kopf.Patch, **_: Any) -> None:
    _write(name, spec, patch)


@kopf.on.update(_stats.GROUP, _stats.VERSION, _stats.PLURAL, field="spec.n")
async def on_update(name: str, spec: Any, patch: kopf.Patch, **_: Any) -> None:
    _write(name, spec, patch)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _stats.add_arguments(parser)
    arguments = parser.parse_args()
    _stats.install(arguments.stats)
    kopf.configure(quiet=True)
    logging.getLogger().setLevel(logging.WARNING)
    profile = _stats.profiler(arguments.cprofile)
    try:
        kopf.run(standalone=True, clusterwide=False, namespaces=[arguments.namespace])
    finally:
        if profile is not None:
            profile.disable()
            profile.dump_stats(arguments.cprofile)
