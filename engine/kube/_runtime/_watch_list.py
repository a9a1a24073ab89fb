"""Whether the API server streams a watcher's initial state (watch-list), found once per client.

A watch with ``sendInitialEvents=true`` (KEP-3157) hands every existing object as an ``ADDED``
event, then a bookmark annotated ``k8s.io/initial-events-end``, then the changes: the state
arrives one object at a time on the stream that goes on as the watch, with no list held in the
server's memory or the client's. kube-apiserver 1.34 and later serve it by default; 1.32 and
1.33 serve it only when etcd can report watch progress (etcd 3.5.13 and later) and otherwise
answer with an ``ERROR`` event (500, "the required storage feature RequestWatchProgress is
disabled"); older servers refuse the parameters (400 or 422). A :class:`~engine.kube.Watcher`
tries it first, and on such a refusal lists in pages (``limit`` and ``continue``) instead, as
client-go's reflector does. The answer is kept per client and logged once per client, so
every watcher of one client asks once in all.
"""

from __future__ import annotations

import logging
import weakref

from .._client._client import Client
from .._client._errors import ApiError

__all__ = ["refuses_watch_list", "server_streams_lists", "watch_list_answered"]

log = logging.getLogger("engine.kube.informer")

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
"""The annotation of the bookmark that ends a watch-list stream's initial state."""

_BY_CLIENT: weakref.WeakKeyDictionary[Client, bool] = weakref.WeakKeyDictionary()
"""Each client's answer, gone with the client."""


def server_streams_lists(client: Client) -> bool | None:
    """Whether ``client``'s server streamed a watcher's initial state (``None``: not tried
    yet). Not a checkpoint."""
    return _BY_CLIENT.get(client)


def refuses_watch_list(exc: ApiError, *, in_stream: bool) -> bool:
    """Whether ``exc``, raised before a watch-list stream's initial state ended, says the server
    does not serve watch-list: a 400 or 422 answer, or a 500 ``InternalError`` as the stream's
    ``ERROR`` event (``in_stream``), as 1.32 on etcd 3.4 answers; not a passing failure (429,
    5xx answers to the request itself, 410)."""
    if exc.code in (400, 422):
        return True
    return in_stream and exc.code == 500 and exc.reason == "InternalError"


def watch_list_answered(client: Client, streams: bool, resource: object, why: str = "") -> None:
    """Record (and log, the first time for ``client``) whether its server streams initial
    states. Not a checkpoint."""
    if _BY_CLIENT.get(client) == streams:
        return
    _BY_CLIENT[client] = streams
    if streams:
        log.info("the API server streams initial states (watch-list, sendInitialEvents); first for %s", resource)
    else:
        log.info("the API server does not stream initial states (%s); listing %s and the rest in pages", why, resource)
