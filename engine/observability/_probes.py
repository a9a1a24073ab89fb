"""Liveness (``/healthz``) and readiness (``/readyz``) checks of a manager.

Both endpoints answer as Kubernetes' own do: ``200 ok``, or ``500`` with one line per check
(``[+]name ok`` / ``[-]name failed: reason``) and a last line ``healthz check failed``.
``?verbose`` lists the checks on success too, ``?exclude=name`` skips a check, and
``/readyz/<name>`` runs a single check (404 if there is none by that name).

Built-in checks: ``workers`` (liveness: no controller worker died on an engine error, and
while the manager runs every controller has all its workers) and ``manager`` (readiness: every
source, start gate and controller started, and no stop began). With leader election a standby
replica (not leading) is ready, as in controller-runtime: otherwise a rolling update whose new
pod waits for the old pod's Lease could never complete. Once it leads, it is ready again only
when start-up finished. Register more checks by name, for example
``add_readiness_check("informers", informers_synced)``.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from .._errors import EngineError
from .._http import Request, Response

if TYPE_CHECKING:
    from .._manager import Manager

__all__ = ["Probes", "Check", "CheckFailed"]

logger = logging.getLogger("engine.probes")

Check = Callable[[], bool | None | Awaitable[bool | None]]
"""A check passes by returning ``None`` or ``True``; it fails by returning ``False`` or raising
(the exception's message is the reason shown). It may be async."""


class CheckFailed(EngineError):
    """Raise from a check to fail it with this message as the reason."""


class Probes:
    """The named health and readiness checks of one manager, and their HTTP handlers.

    ``check_timeout`` bounds each async check; a check past it fails with ``timed out``.
    """

    def __init__(self, manager: Manager, *, check_timeout: float = 5.0) -> None:
        self.manager = manager
        self.check_timeout = check_timeout
        self._health: dict[str, Check] = {"workers": self._workers_alive}
        self._ready: dict[str, Check] = {"manager": self._manager_started}

    def add_health_check(self, name: str, check: Check) -> None:
        """Add a liveness check named ``name`` (served at ``/healthz/<name>``)."""
        self._add(self._health, "health", name, check)

    def add_readiness_check(self, name: str, check: Check) -> None:
        """Add a readiness check named ``name`` (served at ``/readyz/<name>``)."""
        self._add(self._ready, "readiness", name, check)

    @staticmethod
    def _add(table: dict[str, Check], what: str, name: str, check: Check) -> None:
        if not name or "/" in name:
            raise ValueError(f"a {what} check name must be non-empty and contain no '/', got {name!r}")
        if name in table:
            raise ValueError(f"a {what} check named {name!r} is already registered")
        table[name] = check

    def _workers_alive(self) -> None:
        running = self.manager.started
        for controller in self.manager.controllers:
            if not controller.healthy:
                raise CheckFailed(
                    f"controller {controller.name!r}: {controller.worker_failures} worker(s) died on an engine error"
                )
            if running and controller.live_workers < controller.max_concurrent:
                raise CheckFailed(
                    f"controller {controller.name!r}: {controller.live_workers} of "
                    f"{controller.max_concurrent} workers alive"
                )

    def _manager_started(self) -> None:
        manager = self.manager
        if manager.stopping:
            raise CheckFailed("manager is stopping")
        if manager.started:
            return
        leader = manager.leader_election
        if leader is not None and not leader.is_leader:
            return
        raise CheckFailed("controllers and sources not started yet")

    async def run_checks(self, kind: str, *, only: str | None = None, exclude: frozenset[str] = frozenset()
                         ) -> list[tuple[str, str | None]]:
        """Run the ``"healthz"`` or ``"readyz"`` checks; returns ``(name, failure or None)``.

        Raises ``KeyError`` if ``only`` names no check. Async checks are bounded by
        ``check_timeout``.

        Cancellation: if cancelled, ``Cancelled`` propagates and no result is returned.
        """
        table = self._health if kind == "healthz" else self._ready
        names = [only] if only is not None else [n for n in table if n not in exclude]
        results: list[tuple[str, str | None]] = []
        for name in names:
            check = table[name]
            results.append((name, await self._run_one(check)))
        return results

    async def _run_one(self, check: Check) -> str | None:
        try:
            value = check()
            if inspect.isawaitable(value):
                with trio.move_on_after(self.check_timeout) as scope:
                    value = await value
                if scope.cancelled_caught:
                    return "timed out"
        except trio.Cancelled:
            raise
        except Exception as exc:
            return str(exc) or type(exc).__name__
        return "check returned False" if value is False else None

    def handler(self, kind: str) -> Callable[[Request], Awaitable[Response]]:
        """The HTTP handler for ``/healthz`` or ``/readyz`` (and their ``/<name>`` subpaths)."""

        async def handle(request: Request) -> Response:
            rest = request.path[len(kind) + 2:]
            only = rest or None
            exclude = frozenset(v for values in request.query_values.get("exclude", []) for v in values.split(","))
            try:
                results = await self.run_checks(kind, only=only, exclude=exclude)
            except KeyError:
                return Response.text(404, f"no {kind} check named {only!r}\n".encode())
            failed = any(reason is not None for _, reason in results)
            if only is not None:
                reason = results[0][1]
                if reason is None:
                    return Response.text(200, b"ok")
                return Response.text(500, f"[-]{only} failed: {reason}\n{kind} check failed\n".encode())
            if not failed and "verbose" not in request.query:
                return Response.text(200, b"ok")
            lines = [f"[+]{n} ok" if r is None else f"[-]{n} failed: {r}" for n, r in results]
            for name in sorted(exclude):
                lines.append(f"[+]{name} excluded: ok")
            lines.append(f"{kind} check {'failed' if failed else 'passed'}")
            if failed:
                logger.debug("%s check failed", kind, extra={"checks": {n: r for n, r in results if r}})
            return Response.text(500 if failed else 200, ("\n".join(lines) + "\n").encode())

        return handle
