"""Adding and removing a finalizer without clobbering concurrent changes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._client._client import Client, PatchType
from .._client._errors import ConflictError, InvalidError, NotFoundError
from .._client._resource import Resource

__all__ = ["hold_finalizer", "set_finalizer"]


async def set_finalizer(
    client: Client, resource: Resource, obj: Mapping[str, Any], finalizer: str, *, present: bool
) -> bool:
    """Add (``present=True``) or remove ``finalizer`` on ``obj``; returns whether it wrote.

    The JSON patch is guarded by ``obj``'s resourceVersion, so other finalizers written since
    (by another controller) are never lost; on a race the object is read again and the patch
    retried once, then the error is raised. A missing object is not an error (nothing to do).

    ``False`` after ``present=True`` means the finalizer was already there *or the object is
    gone* (a stale cache, or a write retried past its deletion): read the object again before
    creating anything the finalizer is meant to clean up, or it will outlive its owner.

    Cancellation: if cancelled, the patch may or may not have been applied; it is idempotent, so the next
    reconcile can simply call it again.
    """
    for attempt in range(2):
        meta = obj["metadata"]
        current = list(meta.get("finalizers") or [])
        wanted = [f for f in current if f != finalizer] + ([finalizer] if present else [])
        if wanted == current:
            return False
        patch = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "replace" if "finalizers" in meta else "add", "path": "/metadata/finalizers", "value": wanted},
        ]
        try:
            await client.patch(resource, meta["name"], patch, namespace=meta.get("namespace"), patch_type=PatchType.JSON)
            return True
        except NotFoundError:
            return False
        except (ConflictError, InvalidError):
            if attempt:
                raise
            try:
                obj = await client.get(resource, meta["name"], namespace=meta.get("namespace"))
            except NotFoundError:
                return False
    return False


async def hold_finalizer(
    client: Client, resource: Resource, obj: Mapping[str, Any], finalizer: str
) -> dict[str, Any] | None:
    """The object as the server has it now, holding ``finalizer`` (added if missing), or
    ``None`` when it is gone or was replaced by another of the same name (another uid).

    Call it before creating anything the finalizer is meant to clean up: ``obj`` usually comes
    from a cache, which may show an object already deleted, or show the finalizer on an object
    whose finalizer was since removed. The answer comes from the server (a GET, and a patch if
    the finalizer is missing). An object being deleted is returned as it is (check
    ``metadata.deletionTimestamp``): clean up rather than create.

    Cancellation: if cancelled, the finalizer may or may not have been added; calling again is
    safe.
    """
    meta = obj["metadata"]
    name, namespace = meta["name"], meta.get("namespace")
    for _ in range(2):
        try:
            live = await client.get(resource, name, namespace=namespace)
        except NotFoundError:
            return None
        live_meta = live["metadata"]
        if meta.get("uid") and live_meta.get("uid") != meta.get("uid"):
            return None
        if live_meta.get("deletionTimestamp") or finalizer in (live_meta.get("finalizers") or []):
            return live
        await set_finalizer(client, resource, live, finalizer, present=True)
    raise ConflictError(
        f"the finalizer {finalizer} could not be added to {resource.kind} {namespace}/{name}", code=409, reason="Conflict"
    )
