"""orjson against the standard library's json, on the bytes the engine really decodes and encodes.

Run by hand (not a test)::

    python bench/json_codec.py [--repeat R] [--number K]

The samples come from the embedded API server (in this process, through its memory transport),
so they are shaped as the server sends them, ``managedFields`` included:

* a ``Widget`` watch event line (``bench/vs_kopf.py``'s custom resource after its operator wrote
  ``status.observedN``: two managers, one of them on the status subresource);
* the answer to a status merge patch of that Widget (the object as stored);
* a ConfigMap watch event line (``bench/informer.py``'s ConfigMaps: labels, an annotation, two
  data keys);
* a list page of 500 Widgets (what an informer's list decodes, page by page);
* encoding: a status merge patch body ``{"status": {"observedN": n}}`` and a ConfigMap.

Each figure is the best of R timings of K calls, in microseconds per call; stdlib and orjson are
timed interleaved, in one run, and the ratio is stdlib / orjson.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import orjson
import trio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from informer import configmap  # noqa: E402
from vs_kopf import CRD, GROUP, KIND, VERSION  # noqa: E402

from engine.apiserver import ApiServer  # noqa: E402
from engine.kube import Client, Config, install_crds  # noqa: E402
from engine.kube._client._request import RequestOptions  # noqa: E402


async def samples() -> dict[str, Any]:
    async with ApiServer() as api:
        config = Config.from_dict(api.kubeconfig)
        async with Client(config, transport=api.memory_transport(), user_agent="bench-driver") as client:
            await install_crds(client, [CRD])
            widgets = await client.resource(f"{GROUP}/{VERSION}", KIND)
            cms = await client.resource("v1", "ConfigMap")
            for i in range(500):
                await client.create(widgets, {"metadata": {"name": f"w-{i:06d}"}, "spec": {"n": 1}}, namespace="default")
                await client.patch_status(widgets, f"w-{i:06d}", {"status": {"observedN": 1}}, namespace="default")
            patched = await client.patch_status(widgets, "w-000000", {"status": {"observedN": 1}}, namespace="default")
            cm = await client.create(cms, configmap(1), namespace="default")
            response = await client._send("GET", widgets.path(namespace="default"), RequestOptions(safe=True))
            page = response.content
    compact = {"separators": (",", ":")}
    return {
        "Widget watch event": json.dumps({"type": "MODIFIED", "object": patched}, **compact).encode(),
        "Widget status patch answer": json.dumps(patched, **compact).encode(),
        "ConfigMap watch event": json.dumps({"type": "MODIFIED", "object": cm}, **compact).encode(),
        "list page of 500 Widgets": page,
        "encode: status patch body": {"status": {"observedN": 2}},
        "encode: ConfigMap": configmap(1),
    }


def best(fn: Callable[[], object], number: int, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        out = min(out, time.perf_counter() - start)
    return out / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=2000)
    args = parser.parse_args()
    data = trio.run(samples)
    print(f"orjson {orjson.__version__}, Python {sys.version.split()[0]}; best of {args.repeat}, us per call")
    print("| sample | bytes | json (us) | orjson (us) | json/orjson |\n|---|---:|---:|---:|---:|")
    for label, value in data.items():
        if label.startswith("encode"):
            size = len(orjson.dumps(value))
            std = lambda v=value: json.dumps(v, separators=(",", ":")).encode()  # noqa: E731
            fast = lambda v=value: orjson.dumps(v)  # noqa: E731
        else:
            size = len(value)
            std = lambda v=value: json.loads(v)  # noqa: E731
            fast = lambda v=value: orjson.loads(v)  # noqa: E731
            assert std() == fast()
        number = max(1, args.number * 700 // max(size, 700))
        t_std = t_fast = float("inf")
        for _ in range(2):
            t_std = min(t_std, best(std, number, args.repeat))
            t_fast = min(t_fast, best(fast, number, args.repeat))
        print(f"| {label} | {size:,} | {t_std:.2f} | {t_fast:.2f} | {t_std / t_fast:.1f}x |")


if __name__ == "__main__":
    main()
