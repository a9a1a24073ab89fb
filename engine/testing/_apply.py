"""Field ownership (``managedFields``) and server-side apply.

Ownership is a set of leaf paths per ``(manager, operation)`` entry; lists are atomic leaves.
An ``Update`` (create, update, patch) takes the paths it changes from every other manager; an
``Apply`` owns exactly the paths of its configuration. Applying a path whose current value
differs and that another manager owns is a 409 conflict unless forced; paths a manager applied
before and omits now are removed unless another manager owns them too.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._errors import RequestRejected
from ._objects import SYSTEM_METADATA, Obj, meta
from ._patch import deep_merge, delete_path, fields_to_paths, get_path, leaf_paths, paths_to_fields
from ._resources import ResourceType
from ._status import not_found

if TYPE_CHECKING:
    from ._storage import ObjectStorage

__all__ = ["apply", "record_update", "tracked_paths"]

Path = tuple[str, ...]
Clock = Callable[[], str]


def tracked_paths(obj: Obj, rt: ResourceType, *, include_status: bool) -> set[Path]:
    """The leaf paths of ``obj`` a manager can own (system metadata and, for types with a
    status subresource and unless ``include_status``, ``status`` excluded)."""
    paths = set()
    for path in leaf_paths(obj):
        if path[0] in ("apiVersion", "kind"):
            continue
        if path[0] == "metadata" and (len(path) < 2 or path[1] in SYSTEM_METADATA):
            continue
        if path[0] == "status" and rt.has_status and not include_status:
            continue
        paths.add(path)
    return paths


def _entries(obj: Obj) -> list[dict[str, Any]]:
    entries = meta(obj).get("managedFields")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def _entry(rt: ResourceType, manager: str, operation: str, paths: set[Path], now: Clock) -> dict[str, Any]:
    return {
        "manager": manager,
        "operation": operation,
        "apiVersion": rt.api_version,
        "time": now(),
        "fieldsType": "FieldsV1",
        "fieldsV1": paths_to_fields(paths),
    }


def record_update(rt: ResourceType, new: Obj, old: Obj | None, manager: str, now: Clock) -> None:
    """Give ``manager`` (operation ``Update``) the paths ``new`` changes from ``old``, in place;
    ``now`` gives the timestamp of the entry."""
    new_paths = tracked_paths(new, rt, include_status=True)
    old_paths = tracked_paths(old, rt, include_status=True) if old else set()
    changed = {p for p in new_paths if old is None or get_path(old, p) != get_path(new, p)}
    removed = old_paths - new_paths
    entries = []
    mine: set[Path] = set()
    for entry in _entries(new):
        owned = fields_to_paths(entry.get("fieldsV1")) - removed
        if entry.get("manager") == manager and entry.get("operation") == "Update":
            mine = owned
            continue
        owned -= changed
        if owned:
            entries.append({**entry, "fieldsV1": paths_to_fields(owned)})
    mine |= changed
    if mine:
        entries.append(_entry(rt, manager, "Update", mine, now))
    if entries:
        new["metadata"]["managedFields"] = entries
    else:
        new["metadata"].pop("managedFields", None)


def _set_applied(rt: ResourceType, obj: Obj, manager: str, paths: set[Path], stolen: set[Path], now: Clock) -> None:
    entries = []
    for entry in _entries(obj):
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            continue
        owned = fields_to_paths(entry.get("fieldsV1")) - stolen
        if owned:
            entries.append({**entry, "fieldsV1": paths_to_fields(owned)})
    if paths:
        entries.append(_entry(rt, manager, "Apply", paths, now))
    obj["metadata"]["managedFields"] = entries


def apply(
    storage: ObjectStorage,
    rt: ResourceType,
    namespace: str | None,
    name: str,
    config: Any,
    *,
    manager: str,
    force: bool,
    subresource: str | None = None,
    dry_run: bool = False,
) -> tuple[Obj, bool]:
    """Server-side apply of ``config`` into ``storage``; returns ``(object, created)``.

    Raises :class:`RequestRejected`: 400 for a malformed configuration, 404 (namespace, or the
    object for a status apply), 409 on conflicts without ``force``, and whatever the create or
    update it turns into raises.
    """
    if not isinstance(config, dict):
        raise RequestRejected(400, "BadRequest", "an apply configuration must be an object")
    if not config.get("apiVersion") or not config.get("kind"):
        raise RequestRejected(400, "BadRequest", "an apply configuration must set apiVersion and kind")
    namespace = storage.check_namespace(rt, namespace)
    applied = storage._prepare_body(rt, namespace, config, name)
    applied.pop("apiVersion", None)
    applied.pop("kind", None)
    include_status = subresource == "status" or not rt.has_status
    paths = tracked_paths(applied, rt, include_status=include_status)
    if subresource == "status":
        paths = {p for p in paths if p[0] == "status"}
    elif rt.has_status:
        applied.pop("status", None)
    current = storage.lookup(rt, namespace, name)
    now = storage._timestamp
    if current is None:
        if subresource == "status":
            raise not_found(rt, name)
        obj = copy.deepcopy(applied)
        _set_applied(rt, obj, manager, paths, set(), now)
        created = storage.create(rt, namespace, obj, dry_run=dry_run, _managed_fields=obj["metadata"]["managedFields"])
        return created, True
    conflicts: list[dict[str, str]] = []
    for entry in _entries(current):
        if entry.get("manager") == manager:
            continue
        owned = fields_to_paths(entry.get("fieldsV1"))
        for path in sorted(paths & owned):
            if get_path(current, path) != get_path(applied, path):
                conflicts.append(
                    {
                        "reason": "FieldManagerConflict",
                        "message": f'conflict with "{entry.get("manager")}" using '
                        f"{entry.get('apiVersion', rt.api_version)}",
                        "field": "." + ".".join(path),
                    }
                )
    if conflicts and not force:
        text = "\n".join(f"- {c['message']}: {c['field']}" for c in conflicts)
        raise RequestRejected(
            409,
            "Conflict",
            f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: {text}",
            details={"name": name, "group": rt.group, "kind": rt.plural, "causes": conflicts},
        )
    previous: set[Path] = set()
    others: set[Path] = set()
    for entry in _entries(current):
        owned = fields_to_paths(entry.get("fieldsV1"))
        if entry.get("manager") == manager and entry.get("operation") == "Apply":
            previous = owned
        else:
            others |= owned
    merged = deep_merge(current, applied)
    for path in previous - paths - others:
        delete_path(merged, path)
    stolen = {p for p in paths if get_path(current, p) != get_path(applied, p)}
    _set_applied(rt, merged, manager, paths, stolen, now)
    merged["metadata"]["resourceVersion"] = meta(current)["resourceVersion"]
    updated = storage.update(
        rt,
        namespace,
        name,
        merged,
        subresource=subresource,
        dry_run=dry_run,
        check_version=False,
        _ownership_changed=True,
    )
    return updated, False
