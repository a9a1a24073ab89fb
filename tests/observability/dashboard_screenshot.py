"""Retake ``docs/dashboard.png`` from the README's demo: ``python -m tests.observability.dashboard_screenshot``.

Starts ``python -m engine run --embedded --plugin bundles`` with a live address, does what the
README's demo does with kubectl (waits for both Bundles, rolls the ``platform`` Source out to
``r2``, waits for ``infra`` to apply it), then opens the printed dashboard URL in headless
Chromium and writes the screenshot. Needs kubectl and Chromium.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from .._e2e import ROOT
from ._browser import find_chromium, open_page
from .test_dashboard import wait_for_page

PATCH = ('{"spec":{"revision":"r2","artifact":[{"apiVersion":"v1","kind":"ConfigMap",'
         '"metadata":{"name":"platform-settings"},"data":{"revision":"r2"}}]}}')


async def retake(out: Path) -> None:
    """Run the demo, roll out r2 as the README does, and write the dashboard's screenshot to ``out``."""
    chromium = find_chromium()
    if chromium is None:
        raise SystemExit("Chromium is not installed (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="engine-demo-") as work:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CACHE_HOME": work}
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "engine", "run", "--embedded", "--plugin", "bundles",
             "--live-bind-address", "127.0.0.1:0", "--progress", "never"],
            cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
        try:
            assert proc.stdout is not None
            text = ""
            with trio.fail_after(60):
                async for chunk in proc.stdout:
                    text += chunk.decode()
                    if "running; press Ctrl-C" in text:
                        break
            lines = text.splitlines()
            url = next(line.split()[2] for line in lines if line.startswith("dashboard at "))
            kubeconfig = next(line.split()[3] for line in lines if line.startswith("kubeconfig written to "))

            async def kubectl(*args: str) -> None:
                await trio.run_process(["kubectl", "--kubeconfig", kubeconfig, *args], stdout=subprocess.DEVNULL)

            await kubectl("wait", "--for=condition=Ready", "bundle/infra", "bundle/apps", "-n", "demo", "--timeout=60s")
            await kubectl("patch", "source", "platform", "-n", "demo", "--type", "merge", "-p", PATCH)
            await kubectl("wait", "--for=jsonpath={.status.lastAppliedRevision}=r2", "bundle/infra", "-n", "demo",
                          "--timeout=60s")
            async with open_page(chromium, width=1400, height=620) as page:
                await page.navigate(url)
                await wait_for_page(page, """(s) => s.state === "live" && s.rows.length === 4
                    && s.rows.some((r) => r.object.endsWith("/demo/infra") && r.revision === "r2")""")
                await trio.sleep(1)
                out.write_bytes(await page.screenshot())
        finally:
            proc.terminate()
            await proc.wait()


if __name__ == "__main__":
    trio.run(retake, ROOT / "docs" / "dashboard.png")
