"""The live dashboard: a web page, served next to ``/live``, that renders the live stream.

The page is three static files shipped as package data (``engine/observability/dashboard/``):
plain HTML, CSS and JavaScript, no build step, nothing loaded from elsewhere. The page opens
the websocket ``/live`` on the same address and draws from its messages. ``/`` needs the
live stream's token (every stream has one): ``?token=<token>`` (a browser cannot set headers
when it navigates or opens a websocket) or ``Authorization: Bearer <token>``; the page passes it
on to ``/live``.
The script and stylesheet are the same public files as in the package and carry no data,
so they are served without the token.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from .._http import Handler, Request, Response

__all__ = ["dashboard_routes", "DASHBOARD_ASSETS"]

DASHBOARD_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
"""Path -> (file in the package's ``observability/dashboard`` directory, content type)."""

_PUBLIC = frozenset({"/dashboard.js", "/dashboard.css"})


def _read(name: str) -> bytes:
    return resources.files("engine").joinpath("observability", "dashboard", name).read_bytes()


def dashboard_routes(authorized: Callable[[Request], bool]) -> dict[str, Handler]:
    """HTTP routes of the dashboard; ``authorized(request)`` guards the page itself.

    Files are read once, on first request.
    """
    cache: dict[str, bytes] = {}

    def route(path: str) -> Handler:
        name, content_type = DASHBOARD_ASSETS[path]

        async def handler(request: Request) -> Response:
            if request.path != path:  # "/" would also serve every path under it
                return Response.text(404, b"not found; the dashboard is at /\n")
            if path not in _PUBLIC and not authorized(request):
                return Response.text(401, b"unauthorized: open this page as /?token=<live stream token>\n")
            body = cache.get(name)
            if body is None:
                body = cache[name] = _read(name)
            return Response.text(200, body, content_type)

        return handler

    return {path: route(path) for path in DASHBOARD_ASSETS}
