"""Compact copies of decoded objects for the informer's cache.

A decoded object is a tree of ``dict``s, ``list``s and strings. Held by the tens of thousands,
most of its memory is dictionary tables and string headers, not data. :func:`compact` copies
the containers of a decoded object so that the cached copy shares what repeats across
objects, and the result is still made of plain ``dict``s and ``list``s that compare, iterate,
serialise and copy exactly like the decoded ones:

* **Strings**: dictionary keys, and the values of a few fields that repeat from object to
  object (``apiVersion``, ``kind``, ``namespace``, ``type``, ``status``, ``reason``, label
  values and the like), are interned, so every cached object refers to one copy of each.
* **Key tables**: dictionaries whose keys (in order) recur across objects, such as
  ``metadata`` or a pod template's labels, are built as key-sharing dictionaries (PEP 412):
  the table of keys is stored once for all of them and each dictionary holds only its values,
  a bit over half the memory of an ordinary dictionary. CPython makes these for the
  attribute dictionaries of instances of one class, so each recurring key sequence gets a
  small class of its own (:class:`KeyShapes`); the dictionaries the cache holds are the
  instances' ``__dict__``, and the instances themselves are dropped. A key sequence gets a
  class once it has been seen :attr:`KeyShapes.min_sightings` times, and at most
  :attr:`KeyShapes.max_shapes` classes are made; other dictionaries are ordinary ones. A
  change that the shared table cannot hold (a new key, a deleted one) makes CPython give
  that dictionary a table of its own, so behaviour never differs; only the memory does. On
  interpreters that do not share keys the copies are ordinary dictionaries.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["KeyShapes", "compact"]

_intern = sys.intern

_REPEATED_VALUES = frozenset(
    {
        "apiVersion",
        "kind",
        "namespace",
        "type",
        "status",
        "reason",
        "fieldsType",
        "manager",
        "operation",
        "subresource",
    }
)
"""Keys whose string values repeat across objects of a type; those values are interned."""


class KeyShapes:
    """The classes whose instances' ``__dict__`` share one key table, one per key sequence.

    :meth:`build` returns a key-sharing copy of a dictionary whose key sequence has been seen
    often enough, and ``None`` otherwise (always for keys that are not all strings, which only
    a transform can add). A class and its key table cost about 2.5 KiB, and each dictionary
    built from it saves 90 to 300 bytes, so a sequence only gets a class once it has been
    seen :attr:`min_sightings` times; sightings of sequences without a class are
    forgotten once :attr:`max_sightings` distinct ones have piled up, and no more than
    :attr:`max_shapes` classes are ever made. Dictionaries with more than :attr:`max_keys`
    keys are never shared (CPython stops sharing keys at 30, and then an instance dictionary
    takes more memory than an ordinary one).
    """

    min_sightings = 8
    max_sightings = 4096
    max_shapes = 2048
    max_keys = 24

    def __init__(self) -> None:
        self._classes: dict[tuple[str, ...], type] = {}
        self._sightings: dict[tuple[str, ...], int] = {}

    def __len__(self) -> int:
        return len(self._classes)

    def build(self, items: dict[str, Any]) -> dict[str, Any] | None:
        """A key-sharing dictionary with the items of ``items``, in order, or ``None`` if its
        key sequence has no class (yet)."""
        out = self.empty(items)
        if out is not None:
            # Items are set on the instance dictionary, not with setattr, so that keys naming
            # attributes of every class ("__class__", "__dict__") are stored like any other.
            for key, value in items.items():
                out[key] = value
        return out

    def empty(self, items: dict[str, Any]) -> dict[str, Any] | None:
        """An empty key-sharing dictionary (as :meth:`build` makes) to copy the items of
        ``items`` into, in order, or ``None`` if its key sequence has no class (yet). A
        sighting of the sequence counts as for :meth:`build`."""
        keys = tuple(items)
        cls = self._classes.get(keys)
        if cls is None:
            cls = self._sighted(keys)
            if cls is None:
                return None
        out: dict[str, Any] = object.__new__(cls).__dict__
        return out

    def _sighted(self, keys: tuple[str, ...]) -> type | None:
        if len(keys) > self.max_keys or not keys or len(self._classes) >= self.max_shapes:
            return None
        if not all(type(key) is str for key in keys):
            return None
        seen = self._sightings.get(keys, 0) + 1
        if seen < self.min_sightings:
            if len(self._sightings) >= self.max_sightings:
                self._sightings.clear()
            self._sightings[keys] = seen
            return None
        self._sightings.pop(keys, None)
        cls = type("CachedObjectKeys", (), {"__module__": __name__})
        # The first instance dictionary puts its keys in the class's shared table, which then
        # holds them for every dictionary built from it: interned ones.
        table: dict[str, Any] = object.__new__(cls).__dict__
        for key in keys:
            table[_intern(key)] = None
        self._classes[keys] = cls
        return cls


_shapes = KeyShapes()


def _table_keeps_keys() -> bool:
    """Whether a key-sharing dictionary stores the keys of its class's table rather than the
    equal key objects it is given (CPython's split tables), so these need no interning."""
    cls = type("Probe", (), {})
    first, second = "probe-" + str(id(cls)), "probe-" + str(id(cls))
    object.__new__(cls).__dict__[first] = None
    out: dict[str, Any] = object.__new__(cls).__dict__
    out[second] = None
    return next(iter(out)) is first


_TABLE_KEEPS_KEYS = _table_keeps_keys()


def compact(obj: dict[str, Any], shapes: KeyShapes = _shapes) -> dict[str, Any]:
    """A copy of the decoded ``obj`` that shares keys, repeated values and key tables with
    other cached objects (see the module documentation). Only containers are copied; other
    values are the decoded ones. ``shapes`` defaults to one set shared by every informer."""
    if not obj:
        return {}
    # shapes.empty(obj), inlined: it runs for every dictionary of every cached object.
    keys = tuple(obj)
    cls = shapes._classes.get(keys)
    if cls is None:
        cls = shapes._sighted(keys)
    out: dict[str, Any]
    if cls is None:
        out = {}
        intern_keys = True
    else:
        out = object.__new__(cls).__dict__
        # A key-sharing dictionary keeps its class table's keys (interned when the class was
        # made): only a plain dictionary, or an interpreter that does not keep them, needs
        # them interned.
        intern_keys = not _TABLE_KEEPS_KEYS
    for key, value in obj.items():
        kind = type(value)
        if kind is str:
            if key in _REPEATED_VALUES:
                value = _intern(value)
        elif kind is dict:
            value = _compact_labels(value, shapes) if key == "labels" else compact(value, shapes)
        elif kind is list:
            value = _compact_list(value, shapes)
        if intern_keys and type(key) is str:
            key = _intern(key)
        out[key] = value
    return out


def _compact_list(items: list[Any], shapes: KeyShapes) -> list[Any]:
    return [
        compact(v, shapes) if type(v) is dict else _compact_list(v, shapes) if type(v) is list else v
        for v in items
    ]


def _compact_labels(labels: dict[str, Any], shapes: KeyShapes) -> dict[str, Any]:
    out = {
        _intern(k) if type(k) is str else k: _intern(v) if type(v) is str else v for k, v in labels.items()
    }
    return shapes.build(out) or out
