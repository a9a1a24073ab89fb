"""Building HTTP responses: JSON bodies, ``Status`` failures, objects with their type."""

from __future__ import annotations

import json
from typing import Any

from .._http import Response
from ._errors import RequestRejected
from ._events import from_storage
from ._resources import BUILTIN_TYPES, ResourceType

__all__ = ["json_response", "status_response", "typed", "list_item"]

_JSON = [("content-type", "application/json")]


def json_response(status: int, body: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    """A compact JSON response."""
    return Response(status, _JSON + (headers or []), json.dumps(body, separators=(",", ":")).encode())


def status_response(exc: RequestRejected, headers: list[tuple[str, str]] | None = None) -> Response:
    """The ``Status`` body of ``exc`` with its HTTP status code."""
    return json_response(exc.code, exc.status, headers)


def typed(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as ``rt`` answers it (a view of the stored form, see :mod:`._events`), with
    ``apiVersion`` and ``kind`` of ``rt`` first."""
    obj = from_storage(rt, obj)
    return {
        "apiVersion": rt.api_version,
        "kind": rt.kind,
        **{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")},
    }


def list_item(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as an item of a list: built-in types' items carry no ``apiVersion`` and ``kind``
    (the real server encodes them from typed lists), custom resources' items do."""
    if rt in BUILTIN_TYPES:
        return {k: v for k, v in from_storage(rt, obj).items() if k not in ("apiVersion", "kind")}
    return typed(rt, obj)
