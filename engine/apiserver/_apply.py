"""Field ownership (``managedFields``) and server-side apply, as the real server's field manager
keeps them.

Each ``managedFields`` entry is one manager's field set for one operation (``Update`` or
``Apply``), subresource and, for updates, API version. An update (create, update, patch) gives
its manager every field it adds, changes or removes from the stored object (:func:`compare`), and
takes those from every other manager; a manager whose write changes nothing keeps its entry as it
was. An apply gives its manager exactly the fields of its configuration, merges the configuration
into the stored object, removes the fields the manager applied before and no longer applies
(unless someone else owns them), and is a 409 conflict when it would change a field another
manager owns, unless forced. Fields the write cannot change are left out: ``status`` for writes to
the main resource of a type with a status subresource, ``spec`` for writes to ``status``.

Only the request object is compared, before the type's strategy prepares it: fields the server
sets itself (``status.phase`` of a namespace, a namespace's ``spec.finalizers``) belong to no
manager, as on the real server.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import attrs

from ._errors import RequestRejected
from ._fieldsets import (
    Path,
    Shape,
    compare,
    decode,
    encode,
    format_path,
    merge,
    remove_path,
    to_field_set,
    value_at,
    without,
)
from ._objects import Obj, meta
from ._resources import ResourceType
from ._schema import SchemaNode, go_float
from ._shapes import builtin_shape

__all__ = ["shape_for", "managed_base", "record_update", "apply_config", "check_typed"]

Clock = Callable[[], str]

_STRIPPED: frozenset[Path] = frozenset(
    {("f:apiVersion",), ("f:kind",), ("f:metadata",)}
    | {
        ("f:metadata", "f:" + name)
        for name in (
            "name",
            "namespace",
            "creationTimestamp",
            "selfLink",
            "uid",
            "clusterName",
            "generation",
            "managedFields",
            "resourceVersion",
        )
    }
)


def shape_for(rt: ResourceType) -> Shape:
    """The shape field sets of ``rt``'s objects are computed with."""
    return rt.field_shape if isinstance(rt.field_shape, Shape) else builtin_shape(rt.group, rt.plural)


def _reset_fields(rt: ResourceType, subresource: str | None) -> set[Path]:
    if subresource == "status":
        return {("f:spec",)}
    if rt.has_status:
        return {("f:status",)}
    return set()


@attrs.frozen
class _Entry:
    manager: str
    operation: str
    subresource: str
    api_version: str
    time: str | None
    paths: frozenset[Path]

    @property
    def identity(self) -> tuple[str, str, str, str]:
        return (self.manager, self.operation, self.subresource, self.api_version if self.operation != "Apply" else "")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version}
        if self.time is not None:
            out["time"] = self.time
        out["fieldsType"] = "FieldsV1"
        out["fieldsV1"] = encode(set(self.paths))
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def _read(entries: Any) -> list[_Entry] | None:
    """The entries of a ``managedFields`` value, ``None`` when it is not a valid one."""
    if not isinstance(entries, list):
        return None
    out = []
    for raw in entries:
        if not isinstance(raw, dict) or not isinstance(raw.get("manager", ""), str):
            return None
        out.append(
            _Entry(
                manager=raw.get("manager", ""),
                operation=str(raw.get("operation", "")),
                subresource=str(raw.get("subresource", "")),
                api_version=str(raw.get("apiVersion", "")),
                time=raw.get("time") if isinstance(raw.get("time"), str) else None,
                paths=frozenset(decode(raw.get("fieldsV1"))),
            )
        )
    return out


def _write(entries: list[_Entry]) -> list[dict[str, Any]]:
    ordered = sorted(
        (e for e in entries if e.paths),
        key=lambda e: (e.operation, e.time or "", e.manager, e.api_version, e.subresource),
    )
    return [e.to_json() for e in ordered]


def _store(obj: Obj, entries: list[_Entry]) -> None:
    encoded = _write(entries)
    if encoded:
        obj["metadata"]["managedFields"] = encoded
    else:
        obj["metadata"].pop("managedFields", None)


def managed_base(live: Obj | None, request: Obj, subresource: str | None) -> list[dict[str, Any]]:
    """The ``managedFields`` a write starts from, as the real server picks them: the live
    object's for a subresource write or when the request carries none (or an unreadable value);
    none when the request resets them (``[]`` or ``[{}]``); otherwise the request's own."""
    live_entries = list(meta(live).get("managedFields") or []) if live is not None else []
    if subresource:
        return live_entries
    sent = meta(request).get("managedFields")
    if isinstance(sent, list) and (sent == [] or sent == [{}]):
        return []
    entries = _read(sent)
    if not entries or not any(e.paths for e in entries):
        return live_entries
    return list(sent) if isinstance(sent, list) else live_entries


def _overlay(obj: Any, empty: Any) -> Any:
    if not isinstance(obj, dict) or not isinstance(empty, dict):
        return obj
    out = dict(obj)
    for key, value in empty.items():
        if key not in out:
            out[key] = copy.deepcopy(value)
        elif isinstance(value, dict) and isinstance(out[key], dict):
            out[key] = _overlay(out[key], value)
    return out


def _typed(obj: Obj, shape: Shape) -> Obj:
    """``obj`` as the server's typed decoding sees it: with the fields an empty object of its type
    has (``Shape.empty``) where it lacks them."""
    return _overlay(obj, shape.empty) if shape.empty else obj


def record_update(
    rt: ResourceType,
    live: Obj | None,
    new: Obj,
    manager: str,
    now: Clock,
    *,
    subresource: str | None = None,
    base: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """The ``managedFields`` after ``manager`` wrote ``new`` (the request object, after decoding)
    over ``live`` (``None`` on create). ``base`` is the entries to start from (see
    :func:`managed_base`; the live object's by default)."""
    shape = shape_for(rt)
    entries = _read(base if base is not None else (meta(live).get("managedFields") if live else [])) or []
    before = _typed(live, shape) if live is not None else _typed({}, shape)
    comparison = compare(before, _typed(new, shape), shape).without(_reset_fields(rt, subresource))
    changed = comparison.modified | comparison.added
    identity = (manager, "Update", subresource or "", rt.api_version)
    out = []
    previous: frozenset[Path] = frozenset()
    previous_time: str | None = None
    for entry in entries:
        kept = entry.paths - changed - comparison.removed
        if entry.identity == identity:
            previous, previous_time = kept, entry.time
            continue
        out.append(attrs.evolve(entry, paths=kept))
    mine = changed - _STRIPPED
    if mine:
        # The real server converts a scale write's field set back from the Scale object and loses
        # the entry's time on the way.
        when = None if subresource == "scale" else now()
        out.append(_Entry(manager, "Update", subresource or "", rt.api_version, when, previous | mine))
    elif previous:
        out.append(_Entry(manager, "Update", subresource or "", rt.api_version, previous_time, previous))
    return _write(out)


def _owned_below(path: Path, owned: set[Path]) -> bool:
    n = len(path)
    return any(len(o) >= n and o[:n] == path for o in owned)


def _is_key_field(path: Path) -> bool:
    """Whether ``path`` names a key field of a keyed list item (``k:{"name":"a"}`` / ``f:name``)."""
    if len(path) < 2 or not path[-2].startswith("k:") or not path[-1].startswith("f:"):
        return False
    try:
        keys = json.loads(path[-2][2:])
    except ValueError:
        return False
    return isinstance(keys, dict) and path[-1][2:] in keys


def _prune(merged: Obj, stale: set[Path], owned: set[Path], shape: Shape) -> None:
    for path in sorted(stale, key=len, reverse=True):
        if _is_key_field(path):
            # A keyed item's key goes with the item: removing it alone would leave an item no
            # key can find again; the item itself is pruned when nobody owns anything in it.
            path = path[:-1]
        if _owned_below(path, owned):
            continue
        if not remove_path(merged, path, shape):
            continue
        for depth in range(len(path) - 1, 1 if path[0] == "f:metadata" else 0, -1):
            ancestor = path[:depth]
            if value_at(merged, ancestor, shape) in ({}, []) and not _owned_below(ancestor, owned):
                remove_path(merged, ancestor, shape)
            else:
                break


def apply_config(
    rt: ResourceType,
    live: Obj | None,
    name: str,
    config: Obj,
    manager: str,
    now: Clock,
    *,
    force: bool,
    subresource: str | None = None,
) -> Obj:
    """The object ``name`` after ``manager`` applied ``config`` to ``live`` (``None``: the object
    does not exist yet), with its ``managedFields``. Raises :class:`RequestRejected` 409 when a changed
    field is owned by another manager and not ``force``."""
    shape = shape_for(rt)
    ignored = _reset_fields(rt, subresource)
    entries = (_read(meta(live).get("managedFields")) or []) if live is not None else []
    applied = frozenset(without(to_field_set(config, shape), ignored) - _STRIPPED)
    identity = (manager, "Apply", subresource or "", "")
    last = next((e.paths for e in entries if e.identity == identity), frozenset())
    base = _typed(live, shape) if live is not None else _typed({}, shape)
    merged: Obj = merge(base, config, shape)
    others: set[Path] = set()
    for entry in entries:
        if entry.identity != identity:
            others |= entry.paths
    _prune(merged, set(last - applied), others | applied, shape)
    comparison = compare(base, merged, shape).without(ignored)
    changed = comparison.modified | comparison.added
    conflicts: list[dict[str, str]] = []
    out = []
    for entry in entries:
        if entry.identity == identity:
            continue
        taken = entry.paths & changed
        if taken and not force:
            who = f'"{entry.manager}"'
            if entry.subresource:
                who += f' with subresource "{entry.subresource}"'
            if entry.operation != "Apply":
                who += f" using {entry.api_version}"
            conflicts.extend(
                {"reason": "FieldManagerConflict", "message": f"conflict with {who}", "field": format_path(p)}
                for p in sorted(taken)
            )
        out.append(attrs.evolve(entry, paths=entry.paths - taken - comparison.removed))
    if conflicts:
        raise _conflict(conflicts)
    unchanged = live is not None and _same_object(base, merged)
    previous_time = next((e.time for e in entries if e.identity == identity), None)
    out.append(
        _Entry(manager, "Apply", subresource or "", rt.api_version, previous_time if unchanged else now(), applied)
    )
    merged.setdefault("metadata", {})
    _store(merged, out)
    return merged


def _conflict(conflicts: list[dict[str, str]]) -> RequestRejected:
    """The real server's apply conflict: 409 ``Conflict`` whose details hold only the causes
    (no name or kind); the message lists one conflict inline, several grouped by manager."""
    if len(conflicts) == 1:
        text = f"{conflicts[0]['message']}: {conflicts[0]['field']}"
        return RequestRejected(409, "Conflict", f"Apply failed with 1 conflict: {text}", details={"causes": conflicts})
    by_manager: dict[str, list[str]] = {}
    for conflict in conflicts:
        by_manager.setdefault(conflict["message"].removeprefix("conflict with "), []).append(conflict["field"])
    lines = []
    for who in sorted(by_manager):
        lines.append(f"conflicts with {who}:")
        lines.extend(f"- {field}" for field in by_manager[who])
    text = "\n".join(lines)
    return RequestRejected(
        409, "Conflict", f"Apply failed with {len(conflicts)} conflicts: {text}", details={"causes": conflicts}
    )


def _same_object(a: Obj, b: Obj) -> bool:
    strip = ("managedFields",)
    return {**a, "metadata": {k: v for k, v in meta(a).items() if k not in strip}} == {
        **b,
        "metadata": {k: v for k, v in meta(b).items() if k not in strip},
    }


# ----- typed conversion of a custom resource -----


def _go_plain(value: Any) -> str:
    """``value`` as Go's ``%v`` prints it inside an unstructured object."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_plain(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_plain(v) for v in value) + "]"
    return str(value)


def _go_syntax(value: Any) -> str:
    """``value`` as Go's ``%#v`` prints it inside an unstructured object."""
    if value is None:
        return "interface {}(nil)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        inner = ", ".join(f"{json.dumps(k, ensure_ascii=False)}:{_go_syntax(v)}" for k, v in sorted(value.items()))
        return "map[string]interface {}{" + inner + "}"
    if isinstance(value, list):
        return "[]interface {}{" + ", ".join(_go_syntax(v) for v in value) + "}"
    return str(value)


def _go_type(value: Any) -> str:
    """Go's ``%T`` of ``value`` decoded into an unstructured object."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "[]interface {}"
    return "map[string]interface {}"


_NO_DEFAULT = SchemaNode().default


def _key_text(item: dict[str, Any], keys: tuple[str, ...]) -> str:
    return "[" + ",".join(f"{k}={json.dumps(item[k], ensure_ascii=False)}" for k in sorted(keys) if k in item) + "]"


def _item_path(node: SchemaNode, index: int, item: Any) -> str:
    if node.list_type == "map" and isinstance(item, dict):
        return _key_text(item, node.list_map_keys)
    if node.list_type == "set":
        return f"[={json.dumps(item, ensure_ascii=False)}]"
    return f"[{index}]"


def _item_problem(node: SchemaNode, item: Any) -> str | None:
    """Why an item cannot be an element of ``node``'s associative list, or ``None``."""
    if node.list_type == "map":
        if item is None:
            return "associative list with keys may not have a null element"
        if not isinstance(item, dict):
            return "associative list with keys may not have non-map elements"
        item_fields = node.items.properties if node.items is not None else {}
        keys = node.list_map_keys
        if keys and all(k not in item and (k not in item_fields or item_fields[k].default is _NO_DEFAULT) for k in keys):
            listed = " ".join(json.dumps(k) for k in keys)
            return f"associative list with keys has an element that omits all key fields [{listed}] " \
                "(and doesn't have default values for any key fields)"
        return None
    if node.list_type == "set":
        if isinstance(item, dict):
            return "associative list without keys has an element that's a map type"
        if isinstance(item, list):
            return "not supported: associative list with lists as elements"
        if item is None:
            return "associative list without keys has an element that's an explicit null"
    return None


def _type_errors(node: SchemaNode, value: Any, path: str, duplicates: bool, out: list[str]) -> None:
    """Append ``<path>: <problem>`` for each value that does not fit ``node``'s type, as
    structured-merge-diff's typed conversion words it (``duplicates``: whether repeated keys
    of an associative list are allowed, as they are in a live object)."""
    if value is None or not node.types or len(node.types) > 1 or node.int_or_string:
        return
    kind = node.types[0]
    if kind == "boolean" and not isinstance(value, bool):
        out.append(f"{path}: expected boolean, got &{{{_go_plain(value)}}}")
    elif kind == "string" and not isinstance(value, str):
        out.append(f"{path}: expected string, got &value.valueUnstructured{{Value:{_go_syntax(value)}}}")
    elif kind in ("integer", "number") and (isinstance(value, bool) or not isinstance(value, (int, float))):
        out.append(f"{path}: expected numeric (int or float), got {_go_type(value)}")
    elif kind == "object":
        if not isinstance(value, dict):
            out.append(f"{path}: expected map, got &{{{_go_plain(value)}}}")
            return
        for key in sorted(value):
            child = node.properties.get(key) or node.additional
            if child is not None:
                _type_errors(child, value[key], f"{path}.{key}", duplicates, out)
    elif kind == "array":
        if not isinstance(value, list):
            out.append(f"{path}: expected list, got &{{{_go_plain(value)}}}")
            return
        seen: set[str] = set()
        for index, item in enumerate(value):
            problem = _item_problem(node, item)
            if problem is not None:
                out.append(f"{path}: element {index}: {problem}")
                return
            element = _item_path(node, index, item)
            if node.list_type in ("map", "set") and not duplicates:
                if element in seen:
                    out.append(f"{path}: duplicate entries for key {element}")
                seen.add(element)
            if node.items is not None:
                _type_errors(node.items, item, path + element, duplicates, out)


_STRING = SchemaNode(types=("string",))
_METADATA = SchemaNode(types=("object",), properties={
    **{key: _STRING for key in ("name", "namespace", "generateName", "uid", "resourceVersion")},
    "labels": SchemaNode(types=("object",), additional=_STRING),
    "annotations": SchemaNode(types=("object",), additional=_STRING),
    "finalizers": SchemaNode(types=("array",), items=_STRING),
})
"""The parts of ``ObjectMeta``'s schema an apply configuration is read through before its
other checks (the real server's typed conversion of every kind)."""


def _typed_failure(rt: ResourceType, obj: Obj, what: str, duplicates: bool) -> str | None:
    errors: list[str] = []
    for key in sorted(obj):
        if key == "metadata":
            _type_errors(_METADATA, obj[key], ".metadata", duplicates, errors)
            continue
        child = rt.schema.root.properties.get(key) if rt.schema is not None else None
        if key not in ("apiVersion", "kind") and child is not None:
            _type_errors(child, obj[key], f".{key}", duplicates, errors)
    if not errors:
        return None
    gvknn = f"{meta(obj).get('namespace') or ''}/{meta(obj).get('name') or ''}; {rt.api_version}, Kind={rt.kind}"
    listed = errors[0] if len(errors) == 1 else "errors:\n" + "\n".join("  " + e for e in errors)
    return f"failed to create typed {what} object ({gvknn}): {listed}"


def check_typed(rt: ResourceType, config: Obj, live: Obj | None) -> None:
    """Read an apply's ``config`` (as sent), then the ``live`` object (as the current schema
    prunes it on reading), as values of a custom resource's schema, as the real server does
    before applying. Raises :class:`RequestRejected` 500 (no reason) naming every value of the
    wrong type (``.spec.prune: expected boolean, got &{yes}``), and for the configuration
    also every repeated key of an associative list; for a built-in type, only the
    configuration's ``metadata`` (labels, annotations, finalizers and names) is read so."""
    failure = _typed_failure(rt, config, "patch", duplicates=False)
    if failure is None and live is not None and rt.schema is not None:
        read = copy.deepcopy(live)
        rt.schema.prune_and_default(read)
        failure = _typed_failure(rt, read, "live", duplicates=True)
    if failure is not None:
        raise RequestRejected(500, "", failure)
