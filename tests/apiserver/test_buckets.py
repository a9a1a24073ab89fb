"""Buckets (engine.apiserver._buckets): key order, pages, rewinding and continue tokens, unit-tested
(lists over HTTP are covered in test_api.py and test_storage.py)."""

from __future__ import annotations

import pytest

from engine.apiserver import RequestRejected
from engine.apiserver._buckets import Bucket, decode_continue, encode_continue


def _bucket() -> Bucket:
    bucket = Bucket()
    for ns, name in [("b", "y"), ("a", "z"), ("b", "x"), ("a", "w"), ("c", "v")]:
        bucket.put((ns, name), {"metadata": {"namespace": ns, "name": name}, "n": len(bucket.keys)})
    return bucket


def test_keys_stay_sorted_and_spans_select_a_namespace_after_a_key() -> None:
    bucket = _bucket()
    assert bucket.keys == [("a", "w"), ("a", "z"), ("b", "x"), ("b", "y"), ("c", "v")]
    bucket.pop(("b", "x"))
    bucket.pop(("b", "nothing"))
    assert bucket.keys == [("a", "w"), ("a", "z"), ("b", "y"), ("c", "v")]
    assert [bucket.keys[i] for i in bucket.span("a", ("a", "w"))] == [("a", "z")]
    assert [key for key, _ in bucket.snapshot("c")] == [("c", "v")]
    assert bucket.in_namespace("b") and not bucket.in_namespace("d")


def test_a_page_is_cut_at_its_limit_and_counts_what_matched() -> None:
    bucket = _bucket()
    assert bucket.page(None, None, 2, None) == ([("a", "w"), ("a", "z")], 5, 5)
    assert bucket.page(None, ("a", "z"), None, None) == ([("b", "x"), ("b", "y"), ("c", "v")], 3, 3)
    odd = bucket.page(None, None, 1, lambda obj: obj["n"] % 2 == 1)
    assert odd == ([("a", "w")], 2, 5), "matching stops at the first match after the page"


def test_rewinding_puts_back_older_objects_and_removes_added_ones() -> None:
    bucket = _bucket()
    before = {"metadata": {"namespace": "a", "name": "w"}, "n": -1}
    old = bucket.rewound([(("c", "v"), None), (("a", "w"), before)])
    assert old.keys == [("a", "w"), ("a", "z"), ("b", "x"), ("b", "y")]
    assert old.objects[("a", "w")] is before and bucket.objects[("a", "w")]["n"] == 3


def test_continue_tokens_round_trip_and_malformed_ones_are_refused() -> None:
    assert decode_continue(encode_continue(42, ("ns", "name"))) == (42, ("ns", "name"))
    for token in ("not base64!", encode_continue(1, ("a", "b"))[:-4], "e30="):
        with pytest.raises(RequestRejected, match=r"^the continue token is malformed$"):
            decode_continue(token)
