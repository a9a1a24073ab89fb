"""Patch formats: JSON merge patch, JSON patch, a strategic merge patch subset, and the field
sets server-side apply works with.

Strategic merge patch is JSON merge patch plus these directives: ``$patch: replace`` and
``$patch: delete`` on maps and on list items, ``$retainKeys``, ``$deleteFromPrimitiveList/<f>``
and ``$setElementOrder/<f>`` (accepted; the order is applied to merged lists). Lists named in
:data:`MERGE_KEYS` are merged by their key, ``finalizers`` is merged as a set of strings; every
other list is replaced, as JSON merge patch does.
"""

from __future__ import annotations

import copy
from typing import Any

from ._errors import RequestRejected

__all__ = [
    "MERGE_KEYS",
    "merge_patch",
    "apply_json_patch",
    "strategic_merge_patch",
    "leaf_paths",
    "get_path",
    "delete_path",
    "paths_to_fields",
    "fields_to_paths",
    "deep_merge",
]

MERGE_KEYS: dict[str, str] = {
    "ownerReferences": "uid",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
}
"""List fields merged by key in strategic merge patch (field name -> merge key)."""

_PRIMITIVE_MERGE = frozenset({"finalizers"})

Path = tuple[str, ...]


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7386 JSON merge patch; neither argument is modified."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _invalid_patch(message: str) -> RequestRejected:
    """A JSON patch that does not apply: 422 ``Invalid`` with empty ``details``, as the real
    server's generic error answer has them."""
    return RequestRejected(422, "Invalid", message, details={})


_NO_PATH = "the server rejected our request due to an error in our request"
"""What kube-apiserver 1.36.2 answers (422) for an operation whose ``path`` or ``from`` is
missing or ``null``."""


def _go_json_kind(value: Any) -> str:
    """How Go's ``encoding/json`` names the JSON type of ``value`` in an unmarshal error."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return "array" if isinstance(value, list) else "object"


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _invalid_patch(f"JSON patch path {path!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    for part in parts:
        if isinstance(doc, dict):
            if part not in doc:
                raise _invalid_patch(f"JSON patch path {path!r} does not exist")
            doc = doc[part]
        elif isinstance(doc, list):
            try:
                doc = doc[int(part)]
            except (ValueError, IndexError):
                raise _invalid_patch(f"JSON patch path {path!r} does not exist") from None
        else:
            raise _invalid_patch(f"JSON patch path {path!r} does not exist")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str, *, replace: bool) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise _invalid_patch(f"JSON patch path {path!r} does not exist")
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
            return doc
        try:
            index = int(last)
        except ValueError:
            raise _invalid_patch(f"JSON patch path {path!r} has a non-numeric list index") from None
        if not 0 <= index <= len(parent) - (1 if replace else 0):
            raise _invalid_patch(f"JSON patch path {path!r} is out of range")
        if replace:
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise _invalid_patch(f"JSON patch path {path!r} does not exist")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        raise _invalid_patch("JSON patch cannot remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            return parent.pop(int(last))
        except (ValueError, IndexError):
            pass
    raise _invalid_patch(f"JSON patch path {path!r} does not exist")


def apply_json_patch(target: Any, operations: Any) -> Any:
    """Apply an RFC 6902 JSON patch; ``target`` is not modified.

    A failed ``test`` operation or a missing path raises :class:`RequestRejected` (422).
    """
    if not isinstance(operations, list):
        raise RequestRejected(400, "BadRequest", "a JSON patch must be a list of operations")
    for op in operations:
        if not isinstance(op, dict) or "op" not in op:
            raise RequestRejected(400, "BadRequest", "each JSON patch operation needs 'op' and 'path'")
        for field in ("path", "from"):
            value = op.get(field)
            if value is not None and not isinstance(value, str):
                raise RequestRejected(400, "BadRequest", f"error decoding patch: json: cannot unmarshal "
                                      f"{_go_json_kind(value)} into Go struct field jsonPatchOp.{field} of type string")
    doc = copy.deepcopy(target)
    for op in operations:
        name, path = op["op"], op.get("path")
        if path is None:
            raise _invalid_patch(_NO_PATH)
        parts = _pointer(path)
        if name in ("add", "replace"):
            if "value" not in op:
                raise RequestRejected(400, "BadRequest", f"JSON patch {name} needs a 'value'")
            doc = _add(doc, parts, copy.deepcopy(op["value"]), path, replace=name == "replace")
        elif name == "remove":
            _remove(doc, parts, path)
        elif name in ("move", "copy"):
            source = op.get("from")
            if source is None:
                raise _invalid_patch(_NO_PATH)
            from_parts = _pointer(source)
            value = _walk(doc, from_parts, source)
            if name == "move":
                _remove(doc, from_parts, source)
            doc = _add(doc, parts, copy.deepcopy(value), path, replace=False)
        elif name == "test":
            if _walk(doc, parts, path) != op.get("value"):
                raise _invalid_patch(f"JSON patch test failed at {path!r}")
        else:
            raise RequestRejected(400, "BadRequest", f"unknown JSON patch operation {name!r}")
    return doc


def _merge_keyed_list(
    key: str, target: list[Any], patch: list[Any], order: list[Any] | None, keys: dict[str, str]
) -> list[Any]:
    result = [copy.deepcopy(x) for x in target]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            result.append(copy.deepcopy(item))
            continue
        index = next(
            (i for i, x in enumerate(result) if isinstance(x, dict) and x.get(key) == item[key]), None
        )
        directive = item.get("$patch")
        if directive == "delete":
            if index is not None:
                result.pop(index)
            continue
        if directive == "replace" or index is None:
            clean = {k: v for k, v in item.items() if k != "$patch"}
            if index is None:
                result.append(strategic_merge_patch({}, clean, keys))
            else:
                result[index] = copy.deepcopy(clean)
        else:
            result[index] = strategic_merge_patch(result[index], item, keys)
    if not order:
        order = [item for item in patch if isinstance(item, dict) and item.get("$patch") != "delete"]
    if order:
        rank = {
            (o.get(key) if isinstance(o, dict) else o): i for i, o in enumerate(order)
        }
        result.sort(key=lambda x: rank.get(x.get(key) if isinstance(x, dict) else x, len(rank)))
    return result


def strategic_merge_patch(target: Any, patch: Any, merge_keys: dict[str, str] | None = None) -> Any:
    """Apply a strategic merge patch (the subset described in the module docstring).

    ``merge_keys`` overrides :data:`MERGE_KEYS` at the top level of ``target`` and below
    (a Service's ``ports`` merge by ``port``). Merged lists are ordered as the real server
    orders them: the patch's items first (or ``$setElementOrder``), then the others."""
    keys = MERGE_KEYS if merge_keys is None else merge_keys
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    base = copy.deepcopy(target) if isinstance(target, dict) else {}
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    retain = patch.get("$retainKeys")
    orders = {k.split("/", 1)[1]: v for k, v in patch.items() if k.startswith("$setElementOrder/")}
    for key, value in patch.items():
        if key.startswith("$"):
            if key.startswith("$deleteFromPrimitiveList/"):
                field = key.split("/", 1)[1]
                if isinstance(base.get(field), list) and isinstance(value, list):
                    base[field] = [x for x in base[field] if x not in value]
            continue
        if value is None:
            base.pop(key, None)
        elif isinstance(value, list) and key in keys and isinstance(base.get(key), list):
            base[key] = _merge_keyed_list(keys[key], base[key], value, orders.get(key), keys)
        elif isinstance(value, list) and key in _PRIMITIVE_MERGE and isinstance(base.get(key), list):
            merged = list(base[key])
            merged.extend(x for x in value if x not in merged)
            base[key] = merged
        elif isinstance(value, dict):
            merged_value = strategic_merge_patch(base.get(key), value, keys)
            if merged_value is None:
                base.pop(key, None)
            else:
                base[key] = merged_value
        else:
            base[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        base = {k: v for k, v in base.items() if k in retain}
    return base


def deep_merge(target: Any, config: Any) -> Any:
    """Merge ``config`` into ``target`` the way server-side apply merges: maps recursively,
    everything else (lists included) replaced. Neither argument is modified."""
    if not isinstance(config, dict) or not isinstance(target, dict):
        return copy.deepcopy(config)
    result = copy.deepcopy(target)
    for key, value in config.items():
        result[key] = deep_merge(result.get(key), value)
    return result


def leaf_paths(obj: Any, prefix: Path = ()) -> set[Path]:
    """The set of leaf paths in ``obj``: scalars, lists and empty maps are leaves."""
    if isinstance(obj, dict) and obj:
        paths: set[Path] = set()
        for key, value in obj.items():
            paths |= leaf_paths(value, prefix + (key,))
        return paths
    return {prefix} if prefix else set()


_MISSING = object()


def get_path(obj: Any, path: Path) -> Any:
    """The value at ``path``, or a private sentinel when absent (compare with ``is``)."""
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return _MISSING
        obj = obj[part]
    return obj


get_path.MISSING = _MISSING  # type: ignore[attr-defined]


def delete_path(obj: dict[str, Any], path: Path) -> None:
    """Remove the value at ``path`` from ``obj`` in place, pruning maps left empty."""
    if not path:
        return
    stack = [obj]
    current: Any = obj
    for part in path[:-1]:
        if not isinstance(current, dict) or part not in current:
            return
        current = current[part]
        stack.append(current)
    if not isinstance(current, dict):
        return
    current.pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        parent, child = stack[depth - 1], stack[depth]
        if child == {}:
            parent.pop(path[depth - 1], None)
        else:
            break


def paths_to_fields(paths: set[Path]) -> dict[str, Any]:
    """Render a set of paths as a ``fieldsV1`` map (``{"f:metadata": {"f:labels": {...}}}``)."""
    root: dict[str, Any] = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return root


def fields_to_paths(fields: Any, prefix: Path = ()) -> set[Path]:
    """The inverse of :func:`paths_to_fields`; unknown entries (``k:``, ``v:``, ``.``) are skipped."""
    paths: set[Path] = set()
    if not isinstance(fields, dict):
        return paths
    for key, value in fields.items():
        if not key.startswith("f:"):
            continue
        path = prefix + (key[2:],)
        if isinstance(value, dict) and any(k.startswith("f:") for k in value):
            paths |= fields_to_paths(value, path)
        else:
            paths.add(path)
    return paths
