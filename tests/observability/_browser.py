"""Headless Chromium driven over the Chrome DevTools protocol (a websocket), for page tests.

Only what the dashboard tests need: open a page at a window size, evaluate a script that
waits for a DOM state (a promise), take a screenshot. No third-party driver.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from trio_websocket import WebSocketConnection, open_websocket_url

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "chrome")

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio",
)


def find_chromium() -> str | None:
    explicit = os.environ.get("ENGINE_CHROMIUM")
    if explicit:
        return explicit
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class BrowserError(Exception):
    pass


class Page:
    """One browser tab, attached over a flattened DevTools session."""

    def __init__(self, ws: WebSocketConnection, session: str, counter: itertools.count[int]) -> None:
        self._ws = ws
        self._session = session
        self._ids = counter
        self._events: list[str] = []

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await _call(self._ws, self._ids, method, params, session=self._session, events=self._events)

    async def navigate(self, url: str) -> None:
        """Open ``url`` and return once its load event fired."""
        await self.send("Page.enable")
        self._events.clear()
        await self.send("Page.navigate", url=url)
        while "Page.loadEventFired" not in self._events:
            message = json.loads(await self._ws.get_message())
            if message.get("sessionId") == self._session and "method" in message:
                self._events.append(message["method"])

    async def evaluate(self, expression: str) -> Any:
        """Evaluate ``expression`` in the page; a promise is awaited. Returns its JSON value."""
        reply = await self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in reply:
            raise BrowserError(f"script failed: {json.dumps(reply['exceptionDetails'])[:2000]}")
        return reply["result"].get("value")

    async def screenshot(self) -> bytes:
        reply = await self.send("Page.captureScreenshot", format="png")
        return base64.b64decode(reply["data"])


async def _call(
    ws: WebSocketConnection,
    ids: itertools.count[int],
    method: str,
    params: dict[str, Any],
    *,
    session: str | None = None,
    events: list[str] | None = None,
) -> dict[str, Any]:
    request_id = next(ids)
    message: dict[str, Any] = {"id": request_id, "method": method, "params": params}
    if session is not None:
        message["sessionId"] = session
    await ws.send_message(json.dumps(message))
    while True:
        reply = json.loads(await ws.get_message())
        if reply.get("id") != request_id:
            if events is not None and "method" in reply and reply.get("sessionId") == session:
                events.append(reply["method"])
            continue
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result


@asynccontextmanager
async def open_page(chromium: str, *, width: int = 1400, height: int = 860) -> AsyncIterator[Page]:
    """Start headless Chromium with a fresh profile and yield a blank page of the given size."""
    with tempfile.TemporaryDirectory(prefix="engine-chromium-", ignore_cleanup_errors=True) as profile:
        proc = await trio.lowlevel.open_process(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            assert proc.stderr is not None
            url = await _devtools_url(proc.stderr)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_drain, proc.stderr)
                async with open_websocket_url(url, max_message_size=64 * 1024 * 1024) as ws:
                    ids = itertools.count(1)
                    target = await _call(ws, ids, "Target.createTarget", {"url": "about:blank"})
                    attached = await _call(
                        ws, ids, "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
                    )
                    page = Page(ws, attached["sessionId"], ids)
                    await page.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                                    deviceScaleFactor=1, mobile=False)
                    yield page
                nursery.cancel_scope.cancel()
        finally:
            proc.terminate()
            with trio.move_on_after(5) as waited:
                waited.shield = True
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()


async def _devtools_url(stderr: trio.abc.ReceiveStream) -> str:
    buffer = b""
    with trio.fail_after(30):
        while True:
            chunk = await stderr.receive_some(4096)
            if not chunk:
                raise BrowserError("chromium exited before it listened for DevTools:\n" + buffer.decode(errors="replace"))
            buffer += chunk
            found = re.search(rb"DevTools listening on (ws://\S+)", buffer)
            if found:
                return found.group(1).decode()


async def _drain(stream: trio.abc.ReceiveStream) -> None:
    """Read and drop Chromium's log output, so a full pipe never blocks it."""
    while await stream.receive_some(65536):
        pass
