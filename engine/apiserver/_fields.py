"""Field validation of request bodies: unknown and duplicate fields, ``fieldValidation``.

The real server decodes a body into its Go type: fields the type does not have are dropped, a
field given twice keeps its last value. ``fieldValidation`` decides what the client hears:
``Strict`` rejects the request (400 ``strict decoding error: unknown field "spec.x"``),
``Warn`` (the default) answers a ``Warning: 299 - "unknown field \\"spec.x\\""`` header per
field, ``Ignore`` says nothing. Here the fields of the built-in types come from
``builtin_fields.json``, generated from the Kubernetes API definitions (see
``tests/apiserver/test_builtin_fields.py``); custom resources are pruned by their schemas instead.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import attrs

from ._errors import RequestRejected

__all__ = [
    "DATA",
    "MODES",
    "FieldCheck",
    "load",
    "unknown_fields",
    "loads_with_duplicates",
    "field_validation",
    "reject_or_warn",
]

DATA = Path(__file__).with_name("builtin_fields.json")
MODES = ("Strict", "Warn", "Ignore")


@functools.cache
def load() -> dict[str, Any]:
    """The generated table: ``kinds`` (``group/version/Kind`` -> type) and ``types`` (type ->
    field -> ``""`` for a value of no known structure, ``T``, ``[T`` (list) or ``{T`` (map))."""
    data: dict[str, Any] = json.loads(DATA.read_text())
    return data


def _walk(types: dict[str, dict[str, str]], type_name: str, value: Any, path: str, out: list[str]) -> None:
    if not isinstance(value, dict):
        return
    fields = types[type_name]
    for key in list(value):
        where = f"{path}.{key}" if path else key
        if key not in fields:
            out.append(where)
            del value[key]
            continue
        ref, child = fields[key], value[key]
        if not ref:
            continue
        if ref[0] == "[":
            for i, item in enumerate(child if isinstance(child, list) else []):
                _walk(types, ref[1:], item, f"{where}[{i}]", out)
        elif ref[0] == "{":
            for name, item in (child.items() if isinstance(child, dict) else []):
                _walk(types, ref[1:], item, f"{where}[{name}]", out)
        else:
            _walk(types, ref, child, where, out)


def unknown_fields(kind: str, obj: Any) -> list[str]:
    """The paths of the fields ``obj`` has that the built-in type ``kind``
    (``group/version/Kind``) has not, sorted, removed from ``obj`` in place; ``[]`` for other
    kinds."""
    table = load()
    type_name = table["kinds"].get(kind)
    if type_name is None:
        return []
    out: list[str] = []
    _walk(table["types"], type_name, obj, "", out)
    return sorted(out)


class _Duplicated(dict[str, Any]):
    duplicates: list[str]


def _collect(value: Any, path: str, out: list[str]) -> Any:
    if isinstance(value, list):
        return [_collect(v, f"{path}[{i}]", out) for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if isinstance(value, _Duplicated):
        out.extend(f"{path}.{k}" if path else k for k in value.duplicates)
    return {k: _collect(v, f"{path}.{k}" if path else k, out) for k, v in value.items()}


def loads_with_duplicates(text: bytes) -> tuple[Any, list[str]]:
    """JSON ``text`` decoded (the last of duplicate keys wins, as in Go) and the paths of the
    duplicated fields; raises ``ValueError`` for malformed JSON."""
    seen = False

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal seen
        out = dict(items)
        if len(out) == len(items):
            return out
        seen = True
        marked = _Duplicated(out)
        counted: set[str] = set()
        marked.duplicates = []
        for key, _ in items:
            if key in counted:
                marked.duplicates.append(key)
            counted.add(key)
        return marked

    data = json.loads(text, object_pairs_hook=pairs)
    paths: list[str] = []
    if seen:
        data = _collect(data, "", paths)
    return data, paths


def field_validation(query: dict[str, str]) -> str:
    """The ``fieldValidation`` mode of a request (``Warn`` when not given); raises
    :class:`RequestRejected` (400) for an unknown one."""
    mode = query.get("fieldValidation") or "Warn"
    if mode not in MODES:
        raise RequestRejected(
            400,
            "BadRequest",
            f'fieldValidation parameter unsupported: {mode!r}: supported values are "Ignore", "Warn", "Strict"',
        )
    return mode


def reject_or_warn(mode: str, kind: str, version: str, unknown: list[str], duplicates: list[str]) -> list[str]:
    """The ``Warning`` header values for ``unknown`` and ``duplicates`` fields under ``mode``;
    raises :class:`RequestRejected` (400) under ``Strict`` when there are any."""
    problems = [f'duplicate field "{p}"' for p in duplicates] + [f'unknown field "{p}"' for p in unknown]
    if not problems or mode == "Ignore":
        return []
    if mode == "Strict":
        raise RequestRejected(
            400,
            "BadRequest",
            f'{kind} in version "{version}" cannot be handled as a {kind}: strict decoding error: ' + ", ".join(problems),
        )
    return [f"299 - {json.dumps(p)}" for p in problems]


@attrs.define
class FieldCheck:
    """What one write's ``fieldValidation`` makes of its unknown and duplicate fields."""

    mode: str
    """``Strict``, ``Warn`` or ``Ignore``."""
    kind: str
    version: str
    duplicates: list[str] = attrs.field(factory=list)
    """Paths of the fields the body gave twice (reported with the first :meth:`report`)."""
    warnings: list[str] = attrs.field(factory=list)
    """``Warning`` header values gathered so far."""

    def report(self, unknown: list[str]) -> None:
        """Add the warnings for ``unknown`` fields (and the duplicates); raises
        :class:`RequestRejected` (400) under ``Strict`` when there are any."""
        self.warnings.extend(reject_or_warn(self.mode, self.kind, self.version, unknown, self.duplicates))
        self.duplicates = []
