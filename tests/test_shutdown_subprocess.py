"""Seed 2 in a real process: SIGTERM during reconciles is a graceful shutdown, not a failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from ._webhook import WebhookReceiver

ROOT = Path(__file__).resolve().parent.parent
GRACE = 2.0


async def read_lines(proc: trio.Process, out: list[dict], seen: dict[str, trio.Event]) -> None:  # type: ignore[type-arg]
    assert proc.stdout is not None
    buffer = b""
    async for chunk in proc.stdout:
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            entry = json.loads(line)
            out.append(entry)
            name = f"{entry['step']}:{entry.get('key', '')}"
            if name in seen:
                seen[name].set()


async def test_seed2_sigterm_mid_run_is_graceful_and_emits_no_failure() -> None:
    receiver = WebhookReceiver()
    lines: list[dict] = []  # type: ignore[type-arg]
    seen = {name: trio.Event() for name in ("started:fast", "started:slow")}
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "tests.programs.slow_manager", receiver.url, str(GRACE)],
            cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        nursery.start_soon(read_lines, proc, lines, seen)
        with trio.fail_after(30):
            for event in seen.values():
                await event.wait()
        t0 = trio.current_time()
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(GRACE + 10):
            code = await proc.wait()
        elapsed = trio.current_time() - t0
        await trio.sleep(0)
        nursery.cancel_scope.cancel()

    assert code == 0, lines
    assert elapsed <= GRACE + 3.0, f"exit took {elapsed:.2f}s, grace period is {GRACE}s"
    finished = {e["key"]: (e["outcome"], e["cause"]) for e in lines if e["step"] == "finished"}
    assert finished == {"fast": ("success", None), "slow": ("shutdown", "shutdown")}
    severities = [(b["reason"], b["severity"]) for b in receiver.bodies]
    assert [s for s in severities if s[1] == "error"] == [], f"failure events reached the webhook: {severities}"
    assert ("ReconciliationSucceeded", "info") in severities, "the run that finished in the grace period completed normally"
    assert [e for e in lines if e["step"] == "exit"][0]["events_flushed"] is True


async def test_second_signal_forces_exit() -> None:
    receiver = WebhookReceiver()
    lines: list[dict] = []  # type: ignore[type-arg]
    seen = {"started:slow": trio.Event(), "finished:fast": trio.Event()}
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "tests.programs.slow_manager", receiver.url, "600"],
            cwd=ROOT, stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        nursery.start_soon(read_lines, proc, lines, seen)
        with trio.fail_after(30):
            await seen["started:slow"].wait()
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await seen["finished:fast"].wait()
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(10):
            code = await proc.wait()
        nursery.cancel_scope.cancel()
    assert code == 130
    assert [e for e in lines if e["step"] == "exit"][0]["forced"] is True
