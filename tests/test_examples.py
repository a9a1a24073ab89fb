"""The examples run as documented."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from typing import Any

import pytest
import trio

from engine.kube import ApiError
from engine.testing import KubeTarget, open_plugin_test

from ._e2e import API, ROOT, bundle, cluster, configmap, ready_at, source, watch


async def test_kubeconfig_runner_example_reconciles_and_stops_on_sigterm() -> None:
    async with cluster() as (api, client, kubeconfig, nursery):
        await client.create(await client.resource(API, "Source"), source("repo", "r1", [configmap("example")]))
        await client.create(await client.resource(API, "Bundle"), bundle("demo", "repo"))
        bundles = await watch(nursery, client, API, "Bundle")
        proc = await trio.lowlevel.open_process(
            [sys.executable, "examples/kubeconfig_runner.py", "--kubeconfig", str(kubeconfig)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        try:
            with trio.fail_after(30):
                await bundles.wait_until(lambda w: ready_at(w.get("e2e", "demo"), "r1"))
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                assert await proc.wait() == 0
            assert proc.stdout is not None
            out = await proc.stdout.receive_some(65536)
            assert b"stopped (SIGTERM)" in out
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_webhook_plugin_example_defaults_validates_and_converts(kube_target: KubeTarget) -> None:
    """``examples/webhook_plugin.py``, as docs/webhooks.md shows it, through the API server's
    admission chain (in-process on the embedded server, over HTTPS on a real one)."""
    from examples.webhook_plugin import plugin

    def queue(name: str, api_version: str = "example.dev/v1", **spec: Any) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": "Queue", "metadata": {"name": name}, "spec": spec}

    async with open_plugin_test(plugin, kube_target, watch_namespace=kube_target.namespace) as h:
        denied = 'admission webhook "validate.queues.example.dev" denied the request: '
        with pytest.raises(ApiError, match=f"{re.escape(denied)}deadLetter 'missing': no Queue of that name in "
                                           f"namespace {re.escape(h.namespace)}$") as refused:
            await h.apply(queue("orders", deadLetter="missing"))
        assert refused.value.code == 422
        assert await h.get("example.dev/v1/Queue", "orders") is None
        with pytest.raises(ApiError, match=f"{re.escape(denied)}deadLetter 'orders' is this Queue itself$") as own:
            await h.apply(queue("orders", deadLetter="orders"))
        assert own.value.code == 403

        await h.apply(queue("orders-dead"))
        await h.apply(queue("orders", "example.dev/v2", limits={"messages": 50}, deadLetter="orders-dead"))
        dead = await h.get("example.dev/v1/Queue", "orders-dead")
        assert dead is not None and dead["spec"] == {"maxMessages": 1000}, "defaulted"
        orders = await h.get("example.dev/v1/Queue", "orders")
        assert orders is not None and orders["spec"] == {"maxMessages": 50, "deadLetter": "orders-dead"}
        as_v2 = await h.get("example.dev/v2/Queue", "orders-dead")
        assert as_v2 is not None and as_v2["spec"] == {"limits": {"messages": 1000}}

        await h.apply(queue("audit", "example.dev/v2"))
        audit = await h.get("example.dev/v2/Queue", "audit")
        assert audit is not None and audit["spec"] == {"limits": {"messages": 1000}}, (
            "a v2 write is defaulted through the v1 rules")
        with pytest.raises(ApiError, match=f"{re.escape(denied)}deadLetter 'gone': "):
            await h.apply(queue("audit", "example.dev/v2", deadLetter="gone"))
        assert h.webhook_server is not None
        assert h.webhook_server.statistics()["/validate/validate.queues.example.dev"]["denied"] == 3


def test_the_code_docs_webhooks_md_quotes_is_in_the_files_it_names() -> None:
    """A ``python`` block of docs/webhooks.md opening with ``# from PATH`` is a verbatim excerpt of PATH."""
    text = (ROOT / "docs" / "webhooks.md").read_text()
    quoted = re.findall(r"```python\n# from (\S+)\n(.*?)```", text, re.S)
    assert len(quoted) == text.count("```python\n"), "every python block names the file it quotes"
    assert {path for path, _ in quoted} == {"examples/webhook_plugin.py", "tests/test_examples.py"}
    for path, block in quoted:
        assert block in (ROOT / path).read_text(), f"docs/webhooks.md quotes {path} as it no longer is:\n{block}"
