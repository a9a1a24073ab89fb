"""The live dashboard: served next to /live, and rendered by a real (headless) browser."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionRejected, open_websocket_url

from engine import Controller, Manager, ObjectRef, RunContext
from engine.kube import Client, Config
from engine.observability import Observability

from .._e2e import ROOT, Runner
from .._support import running
from ._browser import Page, find_chromium, open_page
from ._support import Recorder

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium; .ci/run installs it)"
)

TOKEN = "dashboard-test-token"

# Runs in the page: waits (polling the DOM every 100 ms, up to `timeout` ms) until `want(summary)`
# holds, and returns the last summary of what the page shows either way.
SUMMARY = """
async (want, timeout) => {
  const summary = () => ({
    state: document.body.dataset.state,
    status: document.getElementById("status").textContent,
    controllers: [...document.querySelectorAll("#controllers tbody tr")].map((tr) => ({
      name: tr.dataset.controller, cells: [...tr.cells].map((c) => c.textContent),
    })),
    count: document.getElementById("object-count").textContent,
    rowElements: document.querySelectorAll("#rows .row").length,
    rows: [...document.querySelectorAll("#rows .row:not([hidden])")].map((r) => ({
      object: r.dataset.object, controller: r.dataset.controller, state: r.dataset.state,
      running: r.dataset.running, text: r.textContent,
      revision: r.querySelector(".c-revision").textContent,
      revisionTitle: r.querySelector(".c-revision").title,
      clipped: [...r.children].filter((c) => !c.classList.contains("c-timeline") && c.scrollWidth > c.clientWidth)
        .map((c) => c.className),
      deps: [...r.querySelectorAll(".dep")].map((d) => [d.textContent, d.dataset.ready]),
      timeline: [...r.querySelectorAll(".c-timeline .run:not(.empty)")].map((s) => s.className.slice(6)),
    })),
    events: [...document.querySelectorAll("#events li")].map((li) => [li.dataset.type, li.dataset.reason]),
  });
  const deadline = Date.now() + timeout;
  for (;;) {
    const s = summary();
    if (want(s)) return { ok: true, summary: s };
    if (Date.now() > deadline) return { ok: false, summary: s };
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
"""


async def wait_for_page(page: Page, want: str, *, timeout: float = 30.0) -> dict[str, Any]:
    """Wait until the JS predicate ``want`` (of the page summary) holds; returns the summary."""
    result = await page.evaluate(f"({SUMMARY})(({want}), {int(timeout * 1000)})")
    assert result["ok"], f"the page never showed {want}:\n{json.dumps(result['summary'], indent=1)[:6000]}"
    summary: dict[str, Any] = result["summary"]
    return summary


BANNER_SHOWN = """new Promise((resolve) => {
  const poll = setInterval(() => {
    const banner = document.getElementById("banner");
    if (!banner.hidden) { clearInterval(poll); resolve(banner.textContent); }
  }, 50);
})"""
"""A promise of the dashboard's banner text, once the banner shows."""


def row(summary: dict[str, Any], suffix: str) -> dict[str, Any]:
    return next(r for r in summary["rows"] if r["object"].endswith(suffix))


# -- serving -----------------------------------------------------------------------------------


async def test_page_and_assets_are_served_next_to_live_with_their_content_types() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager, live_bind_address=":0")
    with trio.fail_after(10):
        async with running(manager):
            assert obs.live_address is not None
            base = "http://{}:{}".format(*obs.live_address)
            assert obs.live is not None
            token = obs.live.token
            async with httpx.AsyncClient(base_url=base) as http:
                page = await http.get("/", params={"token": token})
                script = await http.get("/dashboard.js")
                style = await http.get("/dashboard.css")
                head = await http.head("/", params={"token": token})
                missing = await http.get("/nope")
                live_without_upgrade = await http.get("/live")
            async with open_websocket_url(f"{obs.live_url}?token={token}") as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert '<script src="dashboard.js" defer></script>' in page.text
    assert "connect-src 'self'" in page.text
    assert script.status_code == 200
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert "requestAnimationFrame" in script.text
    assert style.status_code == 200
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    assert head.status_code == 200 and head.content == b""
    assert missing.status_code == 404
    assert live_without_upgrade.status_code == 404


async def test_token_is_required_for_the_page_and_accepted_in_the_query_for_live() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager, live_bind_address=":0", live_token=TOKEN)
    with trio.fail_after(10):
        async with running(manager):
            assert obs.live_address is not None and obs.live_url is not None
            base = "http://{}:{}".format(*obs.live_address)
            async with httpx.AsyncClient(base_url=base) as http:
                bare = await http.get("/")
                wrong = await http.get("/", params={"token": "wrong"})
                by_query = await http.get("/", params={"token": TOKEN})
                by_header = await http.get("/", headers={"authorization": f"Bearer {TOKEN}"})
                wrong_header = await http.get("/", headers={"authorization": "Bearer wrong"})
                script = await http.get("/dashboard.js")
            with pytest.raises(ConnectionRejected) as rejected:
                async with open_websocket_url(obs.live_url + "?token=wrong"):
                    pass
            async with open_websocket_url(obs.live_url + f"?token={TOKEN}") as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
    assert (bare.status_code, wrong.status_code, wrong_header.status_code) == (401, 401, 401)
    assert "?token=" in bare.text
    assert (by_query.status_code, by_header.status_code) == (200, 200)
    assert by_query.headers["content-type"] == "text/html; charset=utf-8"
    assert script.status_code == 200, "the script is public package data, it carries no data"
    assert rejected.value.status_code == 401


async def test_clients_that_reset_or_send_nothing_do_not_stop_the_server() -> None:
    manager = Manager(handle_signals=False)
    obs = Observability(manager, live_bind_address=":0")
    with trio.fail_after(10):
        async with running(manager):
            assert obs.live_address is not None
            host, port = obs.live_address
            silent = await trio.open_tcp_stream(host, port)
            await silent.aclose()
            reset = await trio.open_tcp_stream(host, port)
            await reset.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
            reset.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await reset.aclose()
            assert obs.live is not None
            async with httpx.AsyncClient() as http:
                page = await http.get(f"http://{host}:{port}/", params={"token": obs.live.token})
            async with open_websocket_url(f"{obs.live_url}?token={obs.live.token}") as ws:
                assert json.loads(await ws.get_message())["type"] == "hello"
    assert page.status_code == 200


# -- in a browser ------------------------------------------------------------------------------


@needs_chromium
async def test_embedded_demo_in_a_browser(tmp_path: Path) -> None:
    """The runner with the bundles plugin against the embedded API server, as a user starts it;
    extra objects give the page a failure, a wait on a dependency and superseded runs."""
    assert CHROMIUM is not None
    kubeconfig = tmp_path / "embedded.kubeconfig"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "engine", "run", "--embedded", "--plugin", "bundles",
         "--live-bind-address", "127.0.0.1:0", "--write-kubeconfig", str(kubeconfig),
         "--log-format", "json", "--grace-period", "2",
         # without the webhooks, which would refuse the Bundle that depends on itself below
         "--webhook-bind-address", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    runner = Runner(proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner._pump, proc.stdout, runner.stdout.append)
            nursery.start_soon(runner._pump, proc.stderr, runner._log)
            with trio.fail_after(60):
                await runner.wait_for(lambda r: any("running;" in line for line in r.stdout) or r.closed == 2)
            page_url = next((line.split()[2] for line in runner.stdout if line.startswith("dashboard at ")), None)
            assert page_url is not None and "/?token=" in page_url, runner.stdout
            async with Client(Config.from_kubeconfig(kubeconfig), user_agent="dashboard-test") as client:
                await _add_variety(client)
            with trio.fail_after(90):
                async with open_page(CHROMIUM) as page:
                    await page.navigate(page_url)
                    summary = await wait_for_page(page, """(s) => {
                        const row = (name) => s.rows.find((r) => r.object.endsWith("/demo/" + name));
                        const done = (r) => r && ["succeeded", "requeued"].includes(r.state) && r.running === "false";
                        return s.state === "live" && s.controllers.some((c) => c.name === "bundles")
                          && done(row("infra")) && done(row("apps"))
                          && row("infra").timeline.includes("superseded") && row("infra").deps.length === 0
                          && row("broken") && row("broken").state === "terminal_error"
                          && row("waiting") && row("waiting").state === "dependency_not_ready"
                          && row("slow") && row("slow").running === "true"
                          && s.events.some((e) => e[1] === "ReconciliationSucceeded");
                    }""")
                    shot = await page.screenshot()
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(30):
                assert await proc.wait() == 0
            nursery.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()

    (tmp_path / "dashboard.png").write_bytes(shot)
    assert shot.startswith(b"\x89PNG\r\n\x1a\n") and len(shot) > 10_000

    controllers = {c["name"]: c["cells"] for c in summary["controllers"]}
    assert list(controllers) == ["bundles", "sources"]
    busy, alive, configured = (part.strip() for part in controllers["bundles"][1].split("/")[:3])
    assert alive[:1] == configured[:1] == "4"
    assert int(controllers["bundles"][5]) >= 1, "the terminal error counts as an error"
    infra = row(summary, "/demo/infra")
    assert infra["controller"] == "bundles" and infra["object"].startswith("Bundle.")
    assert "superseded" in infra["timeline"] and infra["timeline"][-1] in ("succeeded", "requeued")
    assert infra["revision"] == "r3", "the revision the plugin reported applying"
    assert re.fullmatch(r"revision r3; trigger revision \d+ \(for a Kubernetes object, its resourceVersion\)",
                        infra["revisionTitle"]), infra["revisionTitle"]
    assert row(summary, "/demo/platform")["revision"] == "r3"
    broken = row(summary, "/demo/broken")
    assert "dependency cycle: broken -> broken" in broken["text"]
    assert broken["revision"] == "", "a Bundle that applied nothing has no revision to show"
    waiting = row(summary, "/demo/waiting")
    assert waiting["deps"] == [["missing", "false"]]
    assert waiting["timeline"] == ["dependency_not_ready"]
    slow = row(summary, "/demo/slow")
    assert slow["timeline"][-1] == "running" and "▶" in slow["text"]
    for entry in summary["rows"]:
        kind, name = entry["object"].split(".", 1)[0], entry["object"].rsplit("/", 1)[1]
        assert f"{kind} demo/{name}" in entry["text"], "kind, namespace and name are shown apart"
        if entry["state"] != "terminal_error":
            assert entry["clipped"] == [], (entry["object"], entry["clipped"], entry["text"])
    assert "again in 10m" in infra["text"]
    assert ["Normal", "ReconciliationSucceeded"] in summary["events"]


async def _add_variety(client: Client) -> None:
    api = "bundles.engine.dev/v1alpha1"
    bundles = await client.resource(api, "Bundle")
    sources = await client.resource(api, "Source")

    def bundle(name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": api, "kind": "Bundle", "metadata": {"name": name, "namespace": "demo"},
                "spec": {"sourceRef": {"name": "apps"}, "interval": "10m", "timeout": "1m", **spec}}

    await client.apply(bundles, bundle("broken", dependsOn=[{"name": "broken"}]), field_manager="dashboard-test", force=True)
    await client.apply(bundles, bundle("waiting", dependsOn=[{"name": "missing"}]),
                       field_manager="dashboard-test", force=True)
    await client.apply(bundles, bundle("slow", healthCheckWait="10m", timeout="30m"),
                       field_manager="dashboard-test", force=True)
    for revision in ("r2", "r3"):
        await client.apply(sources, {
            "apiVersion": api, "kind": "Source", "metadata": {"name": "platform", "namespace": "demo"},
            "spec": {"revision": revision, "artifact": [{
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "platform-settings"},
                "data": {"revision": revision},
            }]},
        }, field_manager="dashboard-test", force=True)
        if revision == "r2":
            await _wait_for_health_check(client)


async def _wait_for_health_check(client: Client) -> None:
    """Until infra reports it is checking health of r2 (its run is inside ctx.interruptible)."""
    bundles = await client.resource("bundles.engine.dev/v1alpha1", "Bundle")
    with trio.fail_after(30):
        async with client.watch(bundles, namespace="demo") as events:
            async for event in events:
                obj = event.object
                if obj.get("metadata", {}).get("name") != "infra":
                    continue
                conditions = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or ()}
                if "Applied revision r2" in conditions.get("Ready", {}).get("message", ""):
                    return


@needs_chromium
async def test_ten_thousand_objects_render_only_visible_rows_and_update_live() -> None:
    assert CHROMIUM is not None
    total = 10_000

    async def reconcile(ctx: RunContext) -> None:
        if ctx.ref.name == "late":
            ctx.events.warning("Broken", "late object failed on purpose")
            raise RuntimeError("late object failed on purpose")

    manager = Manager(handle_signals=False)
    recorder = Recorder()
    manager.add_observer(recorder)
    controller = manager.add_controller(Controller("bulk", reconcile, max_concurrent=8))
    obs = Observability(manager, live_bind_address=":0", live_token=TOKEN)
    assert obs.live is not None
    notices: list[str] = []
    obs.live.add_notices(lambda: notices)
    obs.live.add_info(lambda: ["webhook /validate/x: 3 requests, 1 denied, 0 errors, 0 timeouts"])
    with trio.fail_after(120):
        async with running(manager):
            for i in range(total):
                controller.trigger(ObjectRef("Widget", f"w{i:05d}", "ns"), revision="v1")
            await recorder.wait_until(lambda: len(recorder.finished) == total)
            assert obs.live_address is not None
            url = "http://{}:{}/?token={}".format(*obs.live_address, TOKEN)
            async with open_page(CHROMIUM, width=1400, height=900) as page:
                await page.navigate(url)
                first = await wait_for_page(page, f"""(s) => s.state === "live" && s.count === "{total}"
                    && s.rows.some((r) => r.object === "Widget/ns/w00000")""", timeout=60)
                await page.evaluate('document.getElementById("viewport").scrollTop = 1e9')
                bottom = await wait_for_page(page, """(s) => s.rows.some((r) => r.object === "Widget/ns/w09999")""")
                assert await page.evaluate('document.getElementById("banner").hidden') is True
                info = await page.evaluate('document.getElementById("info").textContent')
                notices.append("forbidden: the credentials lack the permission to list configmaps (3 refused)")
                banner = await page.evaluate(BANNER_SHOWN)
                controller.trigger(ObjectRef("Widget", "late", "ns"))
                late = await wait_for_page(page, f"""(s) => s.count === "{total + 1}"
                    && s.events.some((e) => e[1] === "Broken")
                    && s.controllers.some((c) => c.name === "bulk" && Number(c.cells[5]) >= 1)""")
                await page.evaluate('document.getElementById("filter").value = "late";'
                                    'document.getElementById("filter").dispatchEvent(new Event("input"))')
                filtered = await wait_for_page(page, f"""(s) => s.count === "1 of {total + 1}"
                    && s.rows.length === 1 && s.rows[0].state === "failed" """)
    for summary in (first, bottom, late):
        assert summary["rowElements"] < 80, "only the rows in view exist in the DOM"
    assert len(first["rows"]) < 60
    assert filtered["rows"][0]["object"] == "Widget/ns/late"
    assert banner == "forbidden: the credentials lack the permission to list configmaps (3 refused)"
    assert info == "webhook /validate/x: 3 requests, 1 denied, 0 errors, 0 timeouts", "routine facts, not a warning"
    assert "late object failed on purpose" in filtered["rows"][0]["text"]
