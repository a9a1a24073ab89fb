"""The informer's cache: one writer (:meth:`Store.apply`), many readers, with indexes."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from .._client._watch import WatchEventType
from .._client._wire import resource_version_of
from ._watcher import Added, Bookmark, Deleted, Modified, Restarted, WatcherEvent

__all__ = [
    "Store",
    "InformerEvent",
    "IndexFunc",
    "ObjectKey",
    "NAMESPACE_INDEX",
    "OWNER_INDEX",
    "object_key",
]

log = logging.getLogger("engine.kube.informer")

ObjectKey = tuple[str | None, str]
"""``(namespace, name)``; the namespace is ``None`` for cluster-scoped objects."""

IndexFunc = Callable[[Mapping[str, Any]], Iterable[str]]
"""Maps an object to the index values it is filed under (none, one or several)."""

NAMESPACE_INDEX = "namespace"
"""Built-in index: objects by ``metadata.namespace`` (cluster-scoped objects are not filed)."""
OWNER_INDEX = "owner"
"""Built-in index: objects by the ``uid`` of each of their ``metadata.ownerReferences``."""


@attrs.frozen
class InformerEvent:
    """A change an informer applied to its store."""

    type: WatchEventType
    """``ADDED``, ``MODIFIED`` or ``DELETED`` (never ``BOOKMARK``)."""
    obj: dict[str, Any]
    """The object as it is now; for ``DELETED``, its last known state."""
    old: dict[str, Any] | None = None
    """The cached object before the change (``None`` for ``ADDED``)."""
    listed: bool = False
    """Whether a list reported it (the first list, a relist, a handler's replay of the cache)
    rather than a watch event: a list is not news, so its triggers wait at low priority and
    start no rollout. An object a relist finds gone is reported as a ``DELETED`` that is not
    listed: that deletion did happen."""


def object_key(obj: Mapping[str, Any]) -> ObjectKey:
    """The store key of an object: ``(metadata.namespace or None, metadata.name)``."""
    meta = obj["metadata"]
    return (meta.get("namespace") or None, meta["name"])


def _uid(obj: Mapping[str, Any]) -> str | None:
    uid = obj.get("metadata", {}).get("uid")
    return uid if isinstance(uid, str) else None


class _ObjectFaults:
    """Contains exceptions raised by user code for one object: logs each once, counts them all.

    User code called from the watch path (an index function, a handler) that raises for one
    object must not stop the others: the caller leaves the object out of that index or handler
    and reports the exception here. It is logged (with the object's key, ``resourceVersion``
    and the exception) once per object, ``resourceVersion`` and site, and :attr:`count` counts
    every occurrence.
    """

    def __init__(self, resource: object = None) -> None:
        self.resource = resource
        """What the objects are (for log lines); set by the informer that owns the store."""
        self.count = 0
        """Exceptions contained so far."""
        self._logged: dict[ObjectKey, tuple[str | None, set[object]]] = {}

    def report(self, site: str, ident: object, obj: Mapping[str, Any], exc: Exception) -> None:
        """Count ``exc``, raised by ``site`` (``ident`` tells equal names apart) for ``obj``,
        and log it unless it was logged for this object and ``resourceVersion`` already."""
        self.count += 1
        key, rv = object_key(obj), resource_version_of(obj)
        logged_rv, sites = self._logged.get(key, (None, set()))
        if logged_rv != rv:
            sites = set()
        if ident in sites:
            return
        sites.add(ident)
        self._logged[key] = (rv, sites)
        namespace, name = key
        where = f"{namespace}/{name}" if namespace else name
        log.error(
            "%s raised for %s %s (resourceVersion %s); leaving this object out of it: %s: %s",
            site,
            self.resource if self.resource is not None else "object",
            where,
            rv,
            type(exc).__name__,
            exc,
            exc_info=exc,
            extra={
                "resource": str(self.resource),
                "object": where,
                "resource_version": rv,
                "site": site,
                "error": type(exc).__name__,
            },
        )

    def forget(self, key: ObjectKey) -> None:
        """Forget what was logged for ``key`` (the object is gone)."""
        self._logged.pop(key, None)

    def clear(self) -> None:
        """Forget everything logged (the server's history was reset)."""
        self._logged.clear()


def _by_owner(obj: Mapping[str, Any]) -> Iterable[str]:
    refs = obj["metadata"].get("ownerReferences")
    if not isinstance(refs, list):
        return ()
    return [r["uid"] for r in refs if isinstance(r, Mapping) and isinstance(r.get("uid"), str)]


class Store:
    """A cache of objects of one resource type, kept current by an :class:`Informer`.

    Reads are synchronous and never checkpoint; they see the informer's view, which **may be
    stale**: it lags the API server by however long the watch takes to deliver. It is never
    older than the last event an informer handler was called for, since the store is updated
    before the handlers run. Returned objects are the cached ones, shared with every reader:
    treat them as read-only (copy before changing).

    Indexes file each object under the values an index function returns. ``namespace`` and
    ``owner`` (owner reference uids) are built in; :meth:`add_index` adds more by name, at any
    time. An index function that raises for an object leaves that object out of that index
    only (the object is still stored and filed in the other indexes); the exception is
    logged once per object and ``resourceVersion`` and counted (the owning informer's
    :attr:`InformerStatistics.object_errors <engine.kube.InformerStatistics.object_errors>`).
    There are two writers, both called by the informer that owns the store: :meth:`apply`,
    and :meth:`retain`, which drops objects without reporting them (when the informer's key
    ranges shrink).
    """

    def __init__(self) -> None:
        self._faults = _ObjectFaults()
        self._namespaces: dict[str | None, dict[str, dict[str, Any]]] = {}
        """Objects by namespace (``None`` for cluster-scoped ones), then name: no key tuple
        per object, and the namespace index for free."""
        self._count = 0
        self._index_funcs: dict[str, IndexFunc] = {}
        self._indexes: dict[str, dict[str, set[ObjectKey]]] = {}
        self._filed: dict[str, dict[ObjectKey, str | tuple[str, ...]]] = {}
        """Per index, the values each object is filed under: a lone value as itself (no
        tuple of one per object), several as a tuple."""
        self.add_index(OWNER_INDEX, _by_owner)

    def add_index(self, name: str, func: IndexFunc) -> None:
        """Add the index ``name``, filing every cached and future object under ``func(obj)``.

        Raises ``ValueError`` if an index of that name exists. Objects ``func`` raises for
        are left out of the index (see the class documentation).
        """
        if name in self._index_funcs or name == NAMESPACE_INDEX:
            raise ValueError(f"index names must be unique, and {name!r} exists")
        self._index_funcs[name] = func
        self._indexes[name] = {}
        self._filed[name] = {}
        for key, obj in self._items():
            self._file(name, key, obj)

    def get(self, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The cached object, or ``None``. Pass ``None`` as namespace for cluster-scoped objects."""
        names = self._namespaces.get(namespace or None)
        return None if names is None else names.get(name)

    def list(self) -> builtins.list[dict[str, Any]]:
        """Every cached object, in no particular order."""
        out: builtins.list[dict[str, Any]] = []
        for names in self._namespaces.values():
            out.extend(names.values())
        return out

    def keys(self) -> builtins.list[ObjectKey]:
        """The ``(namespace, name)`` key of every cached object."""
        return [key for key, _ in self._items()]

    def _items(self) -> Iterator[tuple[ObjectKey, dict[str, Any]]]:
        for namespace, names in self._namespaces.items():
            for name, obj in names.items():
                yield (namespace, name), obj

    def _get(self, key: ObjectKey) -> dict[str, Any] | None:
        names = self._namespaces.get(key[0])
        return None if names is None else names.get(key[1])

    def by_index(self, name: str, value: str) -> builtins.list[dict[str, Any]]:
        """The cached objects that index ``name`` files under ``value``.

        Raises ``KeyError`` for an unknown index.
        """
        if name == NAMESPACE_INDEX:
            return list(self._namespaces.get(value, {}).values()) if value else []
        if name not in self._indexes:
            raise KeyError(f"no index named {name!r}; add it with add_index() first")
        objects = self._namespaces
        return [objects[namespace][object_name] for namespace, object_name in self._indexes[name].get(value, ())]

    def index_values(self, name: str) -> builtins.list[str]:
        """The values under which index ``name`` files at least one object."""
        if name == NAMESPACE_INDEX:
            return [namespace for namespace in self._namespaces if namespace]
        if name not in self._indexes:
            raise KeyError(f"no index named {name!r}; add it with add_index() first")
        return list(self._indexes[name])

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        names = self._namespaces.get(key[0])
        return names is not None and key[1] in names

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.list())

    # --- contained exceptions, shared with the owning informer ---

    @property
    def resource(self) -> object:
        """What the cached objects are, as the log lines of contained exceptions name them
        (``None`` says "object"); set by the informer that owns the store."""
        return self._faults.resource

    @resource.setter
    def resource(self, resource: object) -> None:
        self._faults.resource = resource

    @property
    def object_errors(self) -> int:
        """How many exceptions user code raised for single objects so far, counting index
        functions and the owning informer's handlers."""
        return self._faults.count

    def report_object_error(self, site: str, ident: object, obj: Mapping[str, Any], exc: Exception) -> None:
        """Count ``exc``, raised by user code at ``site`` (``ident`` tells equal names apart)
        for ``obj``, and log it unless it was logged for this object, ``resourceVersion`` and
        site already. The owning informer reports its handlers' exceptions here."""
        self._faults.report(site, ident, obj, exc)

    # --- the writer ---

    def apply(self, event: WatcherEvent) -> builtins.list[InformerEvent]:
        """Apply a watcher event and return the changes it made, in order.

        ``Added``/``Modified`` store the object (no change when the cached one has the same
        ``resourceVersion``; an object that replaced a cached one of the same name but another
        ``uid``, deleted and re-created while the watch was away, is reported as ``DELETED``
        of the old and ``ADDED`` of the new, so predicates comparing the two never mistake a
        new object for an unchanged one); ``Deleted`` removes it (reported even when it was not cached);
        ``Restarted`` replaces the contents with the list, reporting additions and
        modifications in list order, then deletions (with ``reset``, every listed object that
        was cached is reported as modified, whatever its ``resourceVersion``); ``Bookmark``
        changes nothing. An index function that raises leaves that object out of that index
        and does not stop the event (see the class documentation).
        """
        if isinstance(event, (Added, Modified)):  # noqa: UP038 - a tuple is checked faster than a union
            obj = event.obj
            key = object_key(obj)
            names = self._namespaces.get(key[0])
            current = None if names is None else names.get(key[1])
            if current is not None and resource_version_of(current) == resource_version_of(obj):
                return []
            return self._changes(obj, self._insert(obj, self._index_values(obj), key), False)
        if isinstance(event, Deleted):
            old = self._remove(object_key(event.obj))
            return [InformerEvent(WatchEventType.DELETED, event.obj, old)]
        if isinstance(event, Restarted):
            if event.reset:
                self._faults.clear()
            return self._replace(event.objects, reset=event.reset)
        assert isinstance(event, Bookmark)
        return []

    def retain(self, keep: Callable[[Mapping[str, Any]], bool]) -> int:
        """Drop every object for which ``keep`` is false, reporting nothing (no ``DELETED``:
        the objects still exist, the informer stopped caring about them); returns how many."""
        gone = [key for key, obj in self._items() if not keep(obj)]
        for key in gone:
            self._remove(key)
        return len(gone)

    @staticmethod
    def _changes(obj: dict[str, Any], old: dict[str, Any] | None, listed: bool) -> builtins.list[InformerEvent]:
        if old is None:
            return [InformerEvent(WatchEventType.ADDED, obj, None, listed)]
        if _uid(old) != _uid(obj):
            return [
                InformerEvent(WatchEventType.DELETED, old, old, listed),
                InformerEvent(WatchEventType.ADDED, obj, None, listed),
            ]
        return [InformerEvent(WatchEventType.MODIFIED, obj, old, listed)]

    def _replace(self, objects: Iterable[dict[str, Any]], *, reset: bool) -> builtins.list[InformerEvent]:
        # Names seen, by namespace: the listed objects' own name strings, no key tuple each.
        seen: dict[str | None, set[str]] = {}
        planned = []
        cached = self._namespaces
        for obj in objects:
            meta = obj["metadata"]
            namespace, name = meta.get("namespace") or None, meta["name"]
            names = seen.get(namespace)
            if names is None:
                names = seen[namespace] = set()
            names.add(name)
            in_namespace = cached.get(namespace)
            current = None if in_namespace is None else in_namespace.get(name)
            if not reset and current is not None and resource_version_of(current) == resource_version_of(obj):
                continue
            planned.append((obj, self._index_values(obj)))
        changes = [
            change for obj, values in planned for change in self._changes(obj, self._insert(obj, values), True)
        ]
        gone = [
            (namespace, name)
            for namespace, names in cached.items()
            for name in names
            if name not in seen.get(namespace, ())
        ]
        for key in gone:
            old = self._remove(key)
            if old is not None:
                changes.append(InformerEvent(WatchEventType.DELETED, old, old))
        return changes

    def _values(self, index: str, obj: Mapping[str, Any]) -> tuple[str, ...]:
        try:
            return tuple(dict.fromkeys(self._index_funcs[index](obj)))
        except Exception as exc:
            self._faults.report(f"index function {index!r}", ("index", index), obj, exc)
            return ()

    def _index_values(self, obj: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
        return {index: self._values(index, obj) for index in self._index_funcs}

    def _file(self, index: str, key: ObjectKey, obj: Mapping[str, Any]) -> None:
        self._file_values(index, key, self._values(index, obj))

    def _file_values(self, index: str, key: ObjectKey, values: tuple[str, ...]) -> None:
        buckets = self._indexes[index]
        for value in values:
            buckets.setdefault(value, set()).add(key)
        if len(values) == 1:
            self._filed[index][key] = values[0]
        elif values:
            self._filed[index][key] = values

    def _unfile(self, index: str, key: ObjectKey) -> None:
        filed = self._filed[index].pop(key, ())
        values = (filed,) if isinstance(filed, str) else filed
        buckets = self._indexes[index]
        for value in values:
            bucket = buckets.get(value)
            if bucket is not None:
                bucket.discard(key)
                if not bucket:
                    del buckets[value]

    def _put(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        return self._insert(obj, self._index_values(obj))

    def _insert(
        self, obj: dict[str, Any], new_values: dict[str, tuple[str, ...]], key: ObjectKey | None = None
    ) -> dict[str, Any] | None:
        """Cache ``obj`` (under ``key``, its :func:`object_key` when given) with its index
        values; returns the object it replaced, if any."""
        if key is None:
            key = object_key(obj)
        namespace, name = key
        names = self._namespaces.get(namespace)
        if names is None:
            names = self._namespaces[namespace] = {}
        old = names.get(name)
        if old is None:
            self._count += 1
            for index, values in new_values.items():
                self._file_values(index, key, values)
        else:
            for index, values in new_values.items():
                filed = self._filed[index].get(key, ())
                # An index whose values did not change keeps the key where it is filed.
                if ((filed,) if isinstance(filed, str) else filed) != values:
                    self._unfile(index, key)
                    self._file_values(index, key, values)
            # The table keeps the name it was first given; the new object is made to share
            # that string rather than hold an equal one of its own.
            kept = old["metadata"]["name"]
            meta = obj["metadata"]
            if meta["name"] is not kept and kept == name:
                meta["name"] = kept
        names[name] = obj
        return old

    def _remove(self, key: ObjectKey) -> dict[str, Any] | None:
        self._faults.forget(key)
        names = self._namespaces.get(key[0])
        old = None if names is None else names.pop(key[1], None)
        if old is not None:
            self._count -= 1
            if not names:
                del self._namespaces[key[0]]
            for index in self._index_funcs:
                self._unfile(index, key)
        return old
