"""Whether the API server filters lists and watches by ``shardSelector``, asked once per client.

KEP-5866 (a 1.36 server with the ``ShardedListAndWatch`` gate) lets a list or watch ask for the
objects of some key ranges only. The only sign that a server does is ``metadata.shardInfo``,
which a filtering server sets on lists of built-in kinds only (not on custom resources): so the
question is a one-item list with a selector of the whole key space, of a built-in kind this
client may list. A :class:`~engine.kube.Watcher` with key ranges asks it
(:func:`filters_shards`) before it lists, and filters on its side whatever the answer: the
server filter only saves work. The answer is kept per client (the client itself knows nothing
of it), so every watcher of one client asks once in all; a scale-out ring offers the list of
its Leases (:func:`add_shard_probe`) for controllers that may not list namespaces.
"""

from __future__ import annotations

import logging
import weakref

import attrs
import trio

from ..._keyspace import KeyRanges
from .._client._client import Client
from .._client._errors import ApiError
from .._client._resource import Resource

__all__ = ["add_shard_probe", "filters_shards", "server_filters_shards"]

log = logging.getLogger("engine.kube.informer")

_NAMESPACES = Resource("", "v1", "Namespace", "namespaces", False)
_WHOLE_KEY_SPACE = KeyRanges.everything().selector()
_AGGREGATED_GROUPS = frozenset({"metrics.k8s.io", "custom.metrics.k8s.io", "external.metrics.k8s.io"})


def _builtin_group(group: str) -> bool:
    """Whether kube-apiserver itself serves ``group`` (a custom resource's group has a dot and
    is not under ``k8s.io``; the metrics groups are served by aggregated servers)."""
    if group in _AGGREGATED_GROUPS:
        return False
    return "." not in group or group.endswith(".k8s.io")


@attrs.define(eq=False)
class _ShardFilter:
    """One client's answer, and the lists it may ask with besides the asker's own and namespaces."""

    answer: bool | None = None
    probes: list[tuple[Resource, str | None]] = attrs.Factory(list)


_BY_CLIENT: weakref.WeakKeyDictionary[Client, _ShardFilter] = weakref.WeakKeyDictionary()
"""Each client's :class:`_ShardFilter`, gone with the client."""


def _of(client: Client) -> _ShardFilter:
    found = _BY_CLIENT.get(client)
    if found is None:
        found = _BY_CLIENT[client] = _ShardFilter()
    return found


def server_filters_shards(client: Client) -> bool | None:
    """What :func:`filters_shards` found for ``client``: ``None`` until it got an answer.
    Not a checkpoint."""
    found = _BY_CLIENT.get(client)
    return None if found is None else found.answer


def add_shard_probe(client: Client, resource: Resource, namespace: str | None = None) -> None:
    """Let :func:`filters_shards` ask ``client``'s server with a list of ``resource`` (a built-in
    kind) in ``namespace``: one this client may list (the Leases of a ring, say), for
    controllers of custom resources that may not list namespaces. Forgets an answer of
    ``False``. Not a checkpoint."""
    found = _of(client)
    found.probes.append((resource, namespace if resource.namespaced else None))
    if found.answer is False:
        found.answer = None


async def filters_shards(client: Client, resource: Resource | None = None, *, namespace: str | None = None) -> bool:
    """Whether ``client``'s server filters lists and watches by ``shardSelector`` (KEP-5866: a
    1.36 server with the ``ShardedListAndWatch`` gate), asked once per client.

    The question is a one-item list, with a selector of the whole key space, of ``resource``
    in ``namespace`` when it is a built-in kind, else (or when that list is refused) of each
    :func:`add_shard_probe` type, else of namespaces. The answer is kept and logged once.
    When every such list is refused the answer is ``False``, kept too (until
    :func:`add_shard_probe`): callers filter on their side anyway, the server filter only
    saves work.

    Cancellation: a checkpoint; nothing is kept.
    """
    found = _of(client)
    if found.answer is not None:
        await trio.lowlevel.checkpoint()
        return found.answer
    candidates: list[tuple[Resource, str | None]] = []
    if resource is not None and _builtin_group(resource.group):
        candidates.append((resource, namespace if resource.namespaced else None))
    candidates.extend(found.probes)
    candidates.append((_NAMESPACES, None))
    for candidate, ns in candidates:
        try:
            page = await client.list(candidate, namespace=ns, limit=1, shard_selector=_WHOLE_KEY_SPACE)
        except ApiError as exc:
            log.debug("cannot ask whether the server filters by shardSelector with %s: %s", candidate, exc)
            continue
        found.answer = page.shard_selector is not None
        log.info(
            "the API server %s",
            "filters lists and watches by shardSelector (ShardedListAndWatch)"
            if found.answer
            else "ignores shardSelector (no ShardedListAndWatch): key ranges are filtered on the client",
            extra={"server_filters_shards": found.answer},
        )
        return found.answer
    log.info("cannot tell whether the API server filters by shardSelector (no list allowed): key ranges are "
             "filtered on the client")
    found.answer = False
    return False
