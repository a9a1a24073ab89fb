"""A replica's writes as it sent them: which run made each, and which the server failed without the run writing it again."""

from __future__ import annotations

import httpx

from engine import ObjectRef
from engine._writes import writing_for

from ._replica import Roster

__all__ = ["RunWrites"]

_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _failed(status: int) -> bool:
    """Whether an answer says the server failed the write (a 5xx or a 429), not the request."""
    return status >= 500 or status == 429


class RunWrites(httpx.AsyncBaseTransport):
    """A replica client's transport: hands every request to ``inner`` and notes, for each
    write a run makes (the own-writes record of the sending task says whose run it works
    for), whether the server failed it (a 5xx, a 429, or no answer at all) and whether the run
    then wrote that path again and got it written. What is still failed is in the replica's
    :attr:`~engine.testing._simulation._replica.Replica.unretried`, by run id, until the run
    ends.

    Runs in the task that sends the request, so it sees that task's run. Cancellation: as
    ``inner``'s; a cancelled write is noted as neither failed nor written."""

    def __init__(self, inner: httpx.AsyncBaseTransport, identity: str, roster: Roster) -> None:
        self._inner = inner
        self._identity = identity
        self._roster = roster

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        key = writing_for() if request.method in _WRITES else None
        if key is None:
            return await self._inner.handle_async_request(request)
        path = request.url.path
        try:
            response = await self._inner.handle_async_request(request)
        except Exception as exc:
            self._note(key, path, f"{request.method} {path} (no answer: {type(exc).__name__})")
            raise
        if _failed(response.status_code):
            self._note(key, path, f"{request.method} {path} ({response.status_code})")
        elif response.status_code < 300:
            self._note(key, path, None)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _note(self, key: ObjectRef, path: str, failure: str | None) -> None:
        rep = self._roster.named(self._identity)
        if rep is None:
            return
        for (_, ref), run in rep.running.items():
            if ref != key:
                continue
            if failure is not None:
                rep.unretried.setdefault(run.id, {})[path] = failure
            elif run.id in rep.unretried:
                rep.unretried[run.id].pop(path, None)
