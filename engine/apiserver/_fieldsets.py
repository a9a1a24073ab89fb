"""Field sets as server-side apply sees them: the ``fieldsV1`` of ``managedFields``.

A field set is a set of paths; a path is a tuple of elements, each written as in ``fieldsV1``:
``f:<name>`` for a field or map key, ``k:<json>`` for an item of a list keyed by some of its
fields (``k:{"uid":"..."}``), ``v:<json>`` for an item of a list of distinct values
(``v:"finalizer"``). A path in the set is a *member*; members that also have members below them
are encoded with a ``"."`` entry (``{"f:data": {".": {}, "f:a": {}}}``).

The structure of an object (which maps and lists are atomic, which lists are sets or keyed
maps, which map keys are declared fields) is a :class:`Shape` (:mod:`._shapes` has them).

Two ways to get a set from objects, as structured-merge-diff computes them: :func:`compare`
(what an ``Update`` changed: every node of an added or removed subtree is a member, modified
leaves are members) and :func:`to_field_set` (what an ``Apply`` configuration sets: leaves,
list items, map elements and empty maps; declared fields holding non-empty maps are not
members themselves).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs

__all__ = [
    "Path",
    "Shape",
    "Comparison",
    "LOOSE",
    "DEDUCED",
    "ATOMIC",
    "compare",
    "to_field_set",
    "encode",
    "decode",
    "without",
    "merge",
    "remove_path",
    "format_path",
]

Path = tuple[str, ...]
ListType = Literal["atomic", "set", "map"]


@attrs.frozen(eq=False)
class Shape:
    """The structure of one node of an object, for field tracking.

    ``fields`` are declared fields (a struct); keys not declared take the shape ``elements``
    and are map elements, or, when ``elements`` is ``None``, are treated as declared fields of
    shape :data:`LOOSE`. Lists take ``list_type`` (``map`` lists are keyed by ``keys``) and
    their items the shape ``items``. ``atomic`` maps and structs are single leaves.
    ``empty`` is the object as the server's typed decoding of an empty request sees it (only
    meaningful on a root: the struct fields present in an empty object).
    """

    fields: Mapping[str, Shape] = attrs.field(factory=dict)
    elements: Shape | None = None
    list_type: ListType = "atomic"
    keys: tuple[str, ...] = ()
    items: Shape | None = None
    atomic: bool = False
    empty: Mapping[str, Any] = attrs.field(factory=dict)

    def child(self, key: str) -> tuple[Shape, bool]:
        """The shape of the value at ``key`` and whether ``key`` is a declared field."""
        declared = self.fields.get(key)
        if declared is not None:
            return declared, True
        if self.elements is not None:
            return self.elements, False
        return LOOSE, True

    def item(self) -> Shape:
        """The shape of an item of a list of this shape."""
        return self.items if self.items is not None else DEDUCED


LOOSE = Shape()
"""Unknown structure of a built-in type: map keys are fields, lists are atomic."""

DEDUCED = Shape(elements=None)
"""Structure deduced from the value (``x-kubernetes-preserve-unknown-fields``): map keys are
elements, lists are atomic."""
object.__setattr__(DEDUCED, "elements", DEDUCED)

ATOMIC = Shape(atomic=True)
"""A map or struct that is one leaf (``+structType=atomic``, ``x-kubernetes-map-type: atomic``)."""


# ----- paths of objects -----

_MISSING: Any = object()


def _key_element(item: Any, keys: Iterable[str]) -> str | None:
    if not isinstance(item, dict):
        return None
    picked = {k: item[k] for k in sorted(keys) if k in item}
    return "k:" + json.dumps(picked, separators=(",", ":"), ensure_ascii=False)


def _value_element(item: Any) -> str:
    return "v:" + json.dumps(item, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _children(value: Any, shape: Shape) -> dict[str, tuple[Any, Shape, bool]]:
    """``element -> (child value, child shape, declared)`` of a non-atomic map or list."""
    out: dict[str, tuple[Any, Shape, bool]] = {}
    if isinstance(value, dict):
        for key, child in value.items():
            child_shape, declared = shape.child(key)
            out["f:" + key] = (child, child_shape, declared)
    elif isinstance(value, list):
        item_shape = shape.item()
        for item in value:
            if shape.list_type == "set":
                element: str | None = _value_element(item)
            else:
                element = _key_element(item, shape.keys)
            if element is not None:
                out[element] = (item, item_shape, False)
    return out


def _is_leaf(value: Any, shape: Shape) -> bool:
    if isinstance(value, dict):
        return shape.atomic
    if isinstance(value, list):
        return shape.list_type == "atomic"
    return True


def _kind(value: Any) -> str:
    return "map" if isinstance(value, dict) else "list" if isinstance(value, list) else "scalar"


@attrs.define
class Comparison:
    """What changed between two objects, as paths."""

    added: set[Path] = attrs.Factory(set)
    modified: set[Path] = attrs.Factory(set)
    removed: set[Path] = attrs.Factory(set)

    def without(self, ignored: set[Path]) -> Comparison:
        """This comparison without ``ignored`` paths and everything below them."""
        return Comparison(without(self.added, ignored), without(self.modified, ignored), without(self.removed, ignored))


def _compare(lhs: Any, rhs: Any, shape: Shape, path: Path, out: Comparison) -> None:
    if lhs is not _MISSING and rhs is not _MISSING and type(lhs) is type(rhs) and lhs == rhs:
        return
    if lhs is None and isinstance(rhs, (dict, list)) and not _is_leaf(rhs, shape):
        lhs = type(rhs)()  # a null field of a typed object: the node is there, its items are not
    elif rhs is None and isinstance(lhs, (dict, list)) and not _is_leaf(lhs, shape):
        rhs = type(lhs)()
    if lhs is not _MISSING and rhs is not _MISSING and _kind(lhs) != _kind(rhs):
        _compare(lhs, _MISSING, shape, path, out)
        _compare(_MISSING, rhs, shape, path, out)
        return
    value = rhs if rhs is not _MISSING else lhs
    if _is_leaf(value, shape):
        if lhs is _MISSING:
            out.added.add(path)
        elif rhs is _MISSING:
            out.removed.add(path)
        elif lhs != rhs:
            out.modified.add(path)
        return
    if path:
        if lhs is _MISSING:
            out.added.add(path)
        elif rhs is _MISSING:
            out.removed.add(path)
    left = _children(lhs, shape) if lhs is not _MISSING else {}
    right = _children(rhs, shape) if rhs is not _MISSING else {}
    for element, (value_l, child_shape, _) in left.items():
        value_r = right[element][0] if element in right else _MISSING
        _compare(value_l, value_r, child_shape, path + (element,), out)
    for element, (value_r, child_shape, _) in right.items():
        if element not in left:
            _compare(_MISSING, value_r, child_shape, path + (element,), out)


def compare(old: Any, new: Any, shape: Shape) -> Comparison:
    """The paths ``new`` adds to, modifies in and removes from ``old`` (``None`` for no object:
    then the shape's empty object is the old one)."""
    out = Comparison()
    _compare(shape.empty if old is None else old, new, shape, (), out)
    return out


def _to_field_set(value: Any, shape: Shape, path: Path, out: set[Path]) -> None:
    if _is_leaf(value, shape):
        if path:
            out.add(path)
        return
    for element, (child, child_shape, declared) in _children(value, shape).items():
        child_path = path + (element,)
        _to_field_set(child, child_shape, child_path, out)
        if not element.startswith("f:") or child is None or child == {} or not declared:
            out.add(child_path)


def to_field_set(obj: Any, shape: Shape) -> set[Path]:
    """The fields an apply configuration sets."""
    out: set[Path] = set()
    _to_field_set(obj, shape, (), out)
    return out


def without(paths: set[Path], ignored: set[Path]) -> set[Path]:
    """``paths`` without the ``ignored`` ones and everything below them."""
    if not ignored:
        return set(paths)
    return {p for p in paths if not any(p[: len(i)] == i for i in ignored)}


# ----- fieldsV1 -----


def encode(paths: set[Path]) -> dict[str, Any]:
    """The ``fieldsV1`` of a set of paths."""
    root: dict[str, Any] = {}
    for path in paths:
        node = root
        for element in path:
            node = node.setdefault(element, {})
    for path in paths:
        node = root
        for element in path:
            node = node[element]
        if node:
            node["."] = {}
    return root


def decode(fields: Any, prefix: Path = ()) -> set[Path]:
    """The set of paths of a ``fieldsV1`` map (entries that are not maps are skipped)."""
    paths: set[Path] = set()
    if not isinstance(fields, dict):
        return paths
    for element, value in fields.items():
        if element == "." or not isinstance(value, dict):
            continue
        path = prefix + (element,)
        if not value or "." in value:
            paths.add(path)
        paths |= decode(value, path)
    return paths


def format_path(path: Path) -> str:
    """A path as conflicts name it: ``.data.k``, ``.metadata.finalizers[="x"]``,
    ``.spec.ports[port=80]``."""
    out = []
    for element in path:
        kind, text = element[:2], element[2:]
        if kind == "f:":
            out.append("." + text)
        elif kind == "v:":
            out.append(f"[={text}]")
        else:
            try:
                keys = json.loads(text)
            except ValueError:
                keys = {}
            out.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]")
    return "".join(out)


# ----- merging and removing, for apply -----


def merge(live: Any, config: Any, shape: Shape) -> Any:
    """``config`` merged into ``live`` as server-side apply merges (neither is modified): maps
    and structs key by key, set lists by value, keyed lists by key; atomic values replaced."""
    if live is _MISSING or live is None or _kind(live) != _kind(config) or _is_leaf(config, shape):
        return copy.deepcopy(config)
    if isinstance(config, dict):
        result = copy.deepcopy(live)
        for key, value in config.items():
            result[key] = merge(live.get(key, _MISSING), value, shape.child(key)[0])
        return result
    existing = _children(live, shape)
    result_items = [copy.deepcopy(x) for x in live]
    index = {element: i for i, element in enumerate(existing)}
    for element, (item, item_shape, _) in _children(config, shape).items():
        if element in index:
            result_items[index[element]] = merge(result_items[index[element]], item, item_shape)
        else:
            index[element] = len(result_items)
            result_items.append(copy.deepcopy(item))
    return result_items


def remove_path(obj: Any, path: Path, shape: Shape) -> bool:
    """Remove the value at ``path`` from ``obj`` in place; whether something was removed."""
    if not path:
        return False
    parent: Any = obj
    parent_shape = shape
    for element in path[:-1]:
        found = _children(parent, parent_shape).get(element)
        if found is None:
            return False
        parent, parent_shape = found[0], found[1]
    last = path[-1]
    if isinstance(parent, dict) and last.startswith("f:") and last[2:] in parent:
        del parent[last[2:]]
        return True
    if isinstance(parent, list):
        for i, item_element in enumerate(_children_list(parent, parent_shape)):
            if item_element == last:
                del parent[i]
                return True
    return False


def _children_list(items: list[Any], shape: Shape) -> list[str | None]:
    if shape.list_type == "set":
        return [_value_element(item) for item in items]
    return [_key_element(item, shape.keys) for item in items]


def value_at(obj: Any, path: Path, shape: Shape) -> Any:
    """The value at ``path``, or :data:`MISSING`."""
    current, current_shape = obj, shape
    for element in path:
        found = _children(current, current_shape).get(element) if not _is_leaf(current, current_shape) else None
        if found is None:
            return _MISSING
        current, current_shape = found[0], found[1]
    return current


MISSING = _MISSING
"""What :func:`value_at` answers for an absent path."""
