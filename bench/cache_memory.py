"""Memory an informer's cache takes per object, against the size of the object's JSON.

Run by hand (not a test)::

    python bench/cache_memory.py [N] [--kind configmap,widget] [--transform strip,none]

For each kind asked for, creates N objects in the embedded API server, run in its own process
(``bench/apiserver.py``, so that this process holds nothing but the client and the cache):
``configmap``, ConfigMaps with labels, an annotation and two data keys; ``widget``, the custom
resource of ``bench/vs_kopf.py`` (``spec.n``, and ``status.observedN`` written through the
status subresource, as its operators do). Then, for each transform asked for (``strip``:
:func:`engine.kube.strip_managed_fields`, what ``Cluster.informer`` uses by default; ``none``:
objects cached whole) runs an :class:`engine.kube.Informer` and measures with ``tracemalloc``
how much traced memory grew since just before the informer started:

* **at sync**: once the informer synced (the list, decoded and cached);
* **after watch**: once every object was patched (a new ``data`` value, a new ``spec.n``) and
  the informer received all the changes through its watch (the cache then holds objects
  decoded from watch events);
* **relist**: the peak growth of traced memory while the informer lists everything again, as
  its watcher does after a 410 (``Watcher._relist``, called directly), against the cache size:
  1.0x would mean the relist holds a second cache.

Each is printed per object and as a ratio to the object's JSON size, the size of the object as
the server sends it (compact separators, ``managedFields`` included), measured from a list
just before.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import trio

sys.path.insert(0, os.environ.get("ROOT", "."))

from engine.kube import (  # noqa: E402
    Client,
    Config,
    Informer,
    InformerEvent,
    Resource,
    WatchEventType,
    install_crds,
)

CM = Resource(group="", version="v1", kind="ConfigMap", plural="configmaps", namespaced=True)


@attrs.frozen
class Kind:
    """What to cache: objects of ``resource``, made by ``make``, changed by ``change``."""

    resource: Resource
    make: Callable[[Client, int], Awaitable[object]]
    change: Callable[[Client, int, int], Awaitable[object]]
    setup: Callable[[Client], Awaitable[object]] | None = None


def configmaps() -> Kind:
    from informer import configmap

    return Kind(
        CM,
        lambda client, i: client.create(CM, configmap(i), namespace="default"),
        lambda client, i, round_: client.patch(
            CM, f"cm-{i:06d}", {"data": {"key": f"value-{i}-{round_}"}}, namespace="default"
        ),
    )


def widgets() -> Kind:
    from vs_kopf import CRD, GROUP, KIND, PLURAL, VERSION

    widget = Resource(group=GROUP, version=VERSION, kind=KIND, plural=PLURAL, namespaced=True)

    async def make(client: Client, i: int) -> None:
        await client.create(widget, {"metadata": {"name": f"w-{i:06d}"}, "spec": {"n": 0}}, namespace="default")
        await client.patch_status(widget, f"w-{i:06d}", {"status": {"observedN": 0}}, namespace="default")

    return Kind(
        widget,
        make,
        lambda client, i, round_: client.patch(widget, f"w-{i:06d}", {"spec": {"n": round_ + 1}}, namespace="default"),
        lambda client: install_crds(client, [CRD]),
    )


KINDS = {"configmap": configmaps, "widget": widgets}


def transforms(names: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name in names.split(","):
        if name == "none":
            out.append(("none (whole objects)", None))
        elif name == "strip":
            from engine.kube import strip_managed_fields

            out.append(("strip_managed_fields (Cluster.informer's default)", strip_managed_fields))
        else:
            raise SystemExit(f"unknown transform {name!r}: use strip or none")
    return out


async def json_size(client: Client, resource: Resource, n: int) -> float:
    listing = await client.list(resource, namespace="default")
    return sum(len(json.dumps(o, separators=(",", ":"))) for o in listing.items) / n


def traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def measure(client: Client, kind: Kind, n: int, label: str, transform: Any, round_: int) -> None:
    size = await json_size(client, kind.resource, n)
    kwargs = {} if transform is None else {"transform": transform}
    base = traced()
    informer = Informer(client, kind.resource, namespace="default", **kwargs)
    modified = 0

    def count(event: InformerEvent) -> None:
        nonlocal modified
        modified += event.type is WatchEventType.MODIFIED

    async with trio.open_nursery() as nursery:
        await nursery.start(informer.run)
        await informer.wait_synced()
        at_sync = (traced() - base) / n
        informer.add_handler(count, replay=False)
        await for_all(n, lambda i: kind.change(client, i, round_))
        while modified < n:
            await trio.sleep(0.01)
        after_watch = (traced() - base) / n
        before_relist = traced()
        tracemalloc.reset_peak()
        started = time.perf_counter()
        await informer.watcher._relist(informer._on_event)
        relist_s = time.perf_counter() - started
        relist_peak = (tracemalloc.get_traced_memory()[1] - before_relist) / n
        nursery.cancel_scope.cancel()
    del informer
    watched_size = await json_size(client, kind.resource, n)
    print(f"transform: {label}")
    print(f"  at sync      JSON {size:5.0f} B/object  cache {at_sync:5.0f} B/object  ratio {at_sync / size:.2f}")
    print(
        f"  after watch  JSON {watched_size:5.0f} B/object  cache {after_watch:5.0f} B/object"
        f"  ratio {after_watch / watched_size:.2f}"
    )
    print(
        f"  relist       peak growth {relist_peak:5.0f} B/object ({relist_peak / after_watch:.2f}x the cache)"
        f"  in {relist_s:.2f} s"
    )


@contextlib.contextmanager
def api_server() -> Iterator[str]:
    """Start ``bench/apiserver.py``; yields the path of its kubeconfig."""
    with tempfile.TemporaryDirectory() as workdir:
        kubeconfig = os.path.join(workdir, "kubeconfig")
        here = os.path.dirname(os.path.abspath(__file__))
        popen = subprocess.Popen(
            [sys.executable, os.path.join(here, "apiserver.py"), "--write-kubeconfig", kubeconfig],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert popen.stdout is not None
            line = popen.stdout.readline()
            if not line.startswith("listening on "):
                raise SystemExit(f"the embedded API server did not start: {line!r}")
            yield kubeconfig
        finally:
            popen.terminate()
            popen.wait(30)


async def for_all(n: int, request: Callable[[int], Awaitable[object]]) -> None:
    """``request(i)`` for every ``i`` below ``n``, 16 at a time."""

    async def worker(start: int) -> None:
        for i in range(start, n, 16):
            await request(i)

    async with trio.open_nursery() as nursery:
        for start in range(16):
            nursery.start_soon(worker, start)


async def main(n: int, kinds: list[str], names: str, kubeconfig: str) -> None:
    async with Client(Config.from_kubeconfig(kubeconfig)) as client:
        tracemalloc.start()
        round_ = 0
        for name in kinds:
            kind = KINDS[name]()
            if kind.setup is not None:
                await kind.setup(client)
            await for_all(n, lambda i, kind=kind: kind.make(client, i))
            print(f"{kind.resource.kind}, N={n}")
            for label, transform in transforms(names):
                await measure(client, kind, n, label, transform, round_)
                round_ += 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("n", type=int, nargs="?", default=10_000, help="objects (default 10,000)")
    parser.add_argument("--kind", default="configmap,widget", help="comma-separated: configmap, widget")
    parser.add_argument("--transform", default="strip,none", help="comma-separated: strip, none")
    args = parser.parse_args()
    kinds = [name.strip() for name in args.kind.split(",") if name.strip()]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown or not kinds:
        parser.error(f"--kind: unknown {unknown}; choose from {', '.join(KINDS)}")
    with api_server() as kubeconfig:
        trio.run(main, args.n, kinds, args.transform, kubeconfig)
