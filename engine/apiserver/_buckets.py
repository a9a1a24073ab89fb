"""Buckets: the objects of one resource in key order, and the pages that lists cut from them.

A :class:`Bucket` keeps its keys sorted as they are written, so a list or a page reads a range
of keys found by bisection instead of sorting the whole resource on every request. A page that
stops short carries a continue token (:func:`encode_continue`) naming the resourceVersion the
list reads at and the last key handed out; the next page starts after that key
(:func:`decode_continue`). Everything here is synchronous and never a checkpoint.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import operator
from collections.abc import Callable, Iterable

import attrs

from ._errors import RequestRejected
from ._objects import Key, Obj

__all__ = ["Bucket", "encode_continue", "decode_continue"]

_namespace_of = operator.itemgetter(0)


@attrs.define(eq=False)
class Bucket:
    """The objects of one resource, with their keys kept in sorted order as they are written."""

    objects: dict[Key, Obj] = attrs.Factory(dict)
    keys: list[Key] = attrs.Factory(list)

    @classmethod
    def of(cls, objects: dict[Key, Obj]) -> Bucket:
        """A bucket holding ``objects`` (taken as they are, not copied)."""
        return cls(objects, sorted(objects))

    def put(self, key: Key, obj: Obj) -> None:
        if key not in self.objects:
            bisect.insort(self.keys, key)
        self.objects[key] = obj

    def pop(self, key: Key) -> None:
        if self.objects.pop(key, None) is not None:
            del self.keys[bisect.bisect_left(self.keys, key)]

    def span(self, namespace: str | None, after: Key | None) -> range:
        """Indexes into :attr:`keys` of the keys in ``namespace`` (every namespace when
        ``None``) that sort after ``after``."""
        lo, hi = 0, len(self.keys)
        if namespace is not None:
            lo = bisect.bisect_left(self.keys, namespace, key=_namespace_of)
            hi = bisect.bisect_right(self.keys, namespace, lo, key=_namespace_of)
        if after is not None:
            lo = max(lo, bisect.bisect_right(self.keys, after))
        return range(lo, max(lo, hi))

    def in_namespace(self, namespace: str) -> bool:
        return bool(self.span(namespace, None))

    def snapshot(self, namespace: str | None) -> list[tuple[Key, Obj]]:
        """``(key, object)`` pairs in ``namespace`` (or all), in key order, as of now."""
        return [(self.keys[i], self.objects[self.keys[i]]) for i in self.span(namespace, None)]

    def rewound(self, undo: Iterable[tuple[Key, Obj | None]]) -> Bucket:
        """A new bucket: this one with each ``(key, object)`` of ``undo`` put back in turn
        (``None``: the key absent), as a list at an earlier resourceVersion reads it."""
        objects = dict(self.objects)
        for key, obj in undo:
            if obj is None:
                objects.pop(key, None)
            else:
                objects[key] = obj
        return Bucket.of(objects)

    def page(
        self, namespace: str | None, after: Key | None, limit: int | None, matches: Callable[[Obj], bool] | None
    ) -> tuple[list[Key], int, int]:
        """``(keys, matched, span)``: the keys of at most ``limit`` objects (every one when
        ``None``) in ``namespace`` after ``after`` that ``matches`` accepts (all without it),
        in key order; how many matched, counting one past the page when it is cut short (the
        whole span without ``matches``); and how many keys the span holds. Without
        ``matches`` it costs a bisection plus the page's length; with it, matching stops at
        the first match after the page."""
        span = self.span(namespace, after)
        if matches is None:
            stop = span.stop if limit is None else min(span.stop, span.start + limit)
            return self.keys[span.start : stop], len(span), len(span)
        page: list[Key] = []
        matched = 0
        for i in span:
            key = self.keys[i]
            if matches(self.objects[key]):
                matched += 1
                if limit is not None and len(page) == limit:
                    break
                page.append(key)
        return page, matched, len(span)


def encode_continue(resource_version: int, last: Key) -> str:
    """The continue token of a page read at ``resource_version`` whose last key is ``last``."""
    return base64.urlsafe_b64encode(
        json.dumps({"rv": resource_version, "ns": last[0], "name": last[1]}).encode()
    ).decode()


def decode_continue(token: str) -> tuple[int, Key]:
    """``(resourceVersion, last key)`` of a continue token; raises :class:`RequestRejected`
    (400) for a malformed one."""
    try:
        state = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(state["rv"]), (str(state["ns"]), str(state["name"]))
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise RequestRejected(400, "BadRequest", "the continue token is malformed") from None
