"""The 64-bit key space that replicas divide: FNV-1a hashes of object uids and ranges of them.

The hash and the range semantics are those of Kubernetes' sharded list and watch (KEP-5866):
an object's key is the 64-bit FNV-1a hash of the UTF-8 bytes of its ``metadata.uid`` (or of
its namespace), and a range ``[start, end)`` holds the keys ``start <= key < end``; ``end`` may
be ``2**64``. :meth:`KeyRanges.selector` renders a set of ranges as the ``shardSelector`` query
parameter in the canonical form a 1.36 server echoes in ``metadata.shardInfo.selector``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

import attrs

__all__ = ["KEY_SPACE", "fnv1a64", "KeyRange", "KeyRanges"]

KEY_SPACE = 1 << 64
"""The number of keys: keys are ``0 <= key < KEY_SPACE``."""

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = KEY_SPACE - 1

UID_FIELD = "object.metadata.uid"
NAMESPACE_FIELD = "object.metadata.namespace"


def fnv1a64(text: str) -> int:
    """The 64-bit FNV-1a hash of ``text``'s UTF-8 bytes (Go's ``hash/fnv.New64a``)."""
    h = _FNV_OFFSET
    for byte in text.encode():
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def _hex(value: int) -> str:
    return f"0x{value:016x}"


@attrs.frozen(order=True)
class KeyRange:
    """The keys ``start <= key < end`` of the key space; never empty."""

    start: int
    """The first key in the range."""
    end: int
    """One past the last key; at most :data:`KEY_SPACE`."""

    def __attrs_post_init__(self) -> None:
        if not 0 <= self.start < self.end <= KEY_SPACE:
            raise ValueError(f"a key range needs 0 <= start < end <= 2**64, got [{self.start:#x}, {self.end:#x})")

    def __contains__(self, key: object) -> bool:
        return isinstance(key, int) and self.start <= key < self.end

    @property
    def size(self) -> int:
        """How many keys the range holds."""
        return self.end - self.start

    def shard_range(self, field: str = UID_FIELD) -> str:
        """This range as one ``shardRange(...)`` call of a ``shardSelector``."""
        return f"shardRange({field}, '{_hex(self.start)}', '{_hex(self.end)}')"

    def __str__(self) -> str:
        return f"[{_hex(self.start)}, {_hex(self.end)})"


def _start(r: KeyRange) -> int:
    return r.start


def _bounds(r: KeyRange) -> tuple[int, int]:
    return (r.start, r.end)


def _merge(ranges: Iterable[KeyRange]) -> tuple[KeyRange, ...]:
    merged: list[KeyRange] = []
    for r in sorted(ranges, key=_bounds):
        if merged and r.start <= merged[-1].end:
            last = merged.pop()
            merged.append(KeyRange(last.start, max(last.end, r.end)))
        else:
            merged.append(r)
    return tuple(merged)


@attrs.frozen
class KeyRanges:
    """A set of key ranges, kept sorted and merged; may be empty (owns nothing)."""

    ranges: tuple[KeyRange, ...] = attrs.field(converter=_merge)
    """The disjoint, non-adjacent ranges in ascending order."""

    @classmethod
    def everything(cls) -> KeyRanges:
        """The whole key space."""
        return cls((KeyRange(0, KEY_SPACE),))

    @classmethod
    def nothing(cls) -> KeyRanges:
        """No key at all."""
        return cls(())

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, int):
            return False
        ranges: tuple[KeyRange, ...] = self.ranges
        i = bisect.bisect_right(ranges, key, key=_start) - 1
        return i >= 0 and key < ranges[i].end

    def __iter__(self) -> Iterator[KeyRange]:
        return iter(self.ranges)

    def __bool__(self) -> bool:
        return bool(self.ranges)

    def contains_uid(self, uid: str) -> bool:
        """Whether the object with this ``metadata.uid`` falls in these ranges."""
        return fnv1a64(uid) in self

    @property
    def size(self) -> int:
        """How many keys the ranges hold together."""
        return sum(r.size for r in self.ranges)

    @property
    def share(self) -> float:
        """The fraction of the key space these ranges hold (0.0 to 1.0)."""
        return self.size / KEY_SPACE

    def __or__(self, other: KeyRanges) -> KeyRanges:
        return KeyRanges(self.ranges + other.ranges)

    def __sub__(self, other: KeyRanges) -> KeyRanges:
        result: list[KeyRange] = []
        cut = other.ranges
        k = 0
        for r in self.ranges:
            start = r.start
            while k < len(cut) and cut[k].end <= start:
                k += 1
            m = k
            while m < len(cut) and cut[m].start < r.end:
                if cut[m].start > start:
                    result.append(KeyRange(start, cut[m].start))
                start = max(start, cut[m].end)
                m += 1
            if start < r.end:
                result.append(KeyRange(start, r.end))
        return KeyRanges(result)

    def __and__(self, other: KeyRanges) -> KeyRanges:
        return self - (self - other)

    def selector(self, field: str = UID_FIELD) -> str:
        """These ranges as a ``shardSelector`` value, canonical as a 1.36 server echoes it.

        Raises ``ValueError`` for empty ranges: an empty ``shardSelector`` means *no filter*
        to the server, so owning nothing cannot be said with the parameter.
        """
        if not self.ranges:
            raise ValueError("empty key ranges have no shardSelector (an empty selector selects everything)")
        return " || ".join(r.shard_range(field) for r in self.ranges)

    def __str__(self) -> str:
        return " ".join(str(r) for r in self.ranges) or "(none)"
