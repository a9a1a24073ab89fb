from __future__ import annotations

import copy
import operator
import pickle

import pytest

from engine import ObjectRef, Trigger


def test_refs_with_the_same_fields_are_equal_and_hash_alike() -> None:
    a = ObjectRef("Widget", "w1", "ns", "example.com")
    b = ObjectRef(kind="Widget", name="w1", namespace="ns", group="example.com")
    assert a == b and not a != b
    assert hash(a) == hash(b)
    assert {a: 1}[b] == 1
    assert a != ObjectRef("Widget", "w1", "other", "example.com")
    assert a != ObjectRef("Widget", "w1", "ns")


def test_a_ref_never_equals_a_plain_tuple_of_its_fields() -> None:
    ref = ObjectRef("Widget", "w1", "ns")
    fields: tuple[object, ...] = ("Widget", "w1", "ns", "")
    assert ref != fields and fields != ref
    assert not ref == fields and not fields == ref  # noqa: SIM201
    assert {fields: 1}.get(ref) is None
    assert {ref: 1}.get(fields) is None  # type: ignore[call-overload]
    assert len({ref, fields}) == 2


def test_refs_order_by_kind_name_namespace_group_and_never_against_a_tuple() -> None:
    refs = [ObjectRef("B", "a", "ns"), ObjectRef("A", "z", "ns"), ObjectRef("A", "b", "ns")]
    assert sorted(refs) == [ObjectRef("A", "b", "ns"), ObjectRef("A", "z", "ns"), ObjectRef("B", "a", "ns")]
    assert ObjectRef("A", "b") <= ObjectRef("A", "b") and ObjectRef("A", "c") >= ObjectRef("A", "b")
    ref, fields = ObjectRef("A", "b"), ("A", "b", None, "")
    for compare in (operator.lt, operator.le, operator.gt, operator.ge):
        for left, right in ((ref, fields), (fields, ref)):
            with pytest.raises(TypeError, match=r"^'[<>]=?' not supported between instances of 'ObjectRef' and 'tuple'$"):
                compare(left, right)


def test_a_ref_is_frozen_and_survives_copy_and_pickle() -> None:
    ref = ObjectRef("Widget", "w1", None, "example.com")
    with pytest.raises(AttributeError):
        ref.name = "w2"  # type: ignore[misc]
    assert copy.copy(ref) == ref and copy.deepcopy(ref) == ref
    again = pickle.loads(pickle.dumps(ref))
    assert again == ref and type(again) is ObjectRef
    assert repr(ref) == "ObjectRef(kind='Widget', name='w1', namespace=None, group='example.com')"
    assert str(ref) == "Widget.example.com/w1"


def test_from_object_reads_kind_group_namespace_and_name() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "ns"}}
    assert ObjectRef.from_object(obj) == ObjectRef("Widget", "w1", "ns", "example.com")
    assert ObjectRef.from_object({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}) == ObjectRef(
        "ConfigMap", "c"
    )
    assert ObjectRef.from_object({"metadata": {"name": "x"}}, kind="K", group="g") == ObjectRef("K", "x", None, "g")


def test_triggers_are_equal_by_their_fields_and_never_equal_a_plain_tuple() -> None:
    ref = ObjectRef("Widget", "w1", "ns")
    trigger = Trigger(ref, 3, "changed", "r1", 1.5)
    assert trigger == Trigger(ref=ref, sequence=3, reason="changed", revision="r1", observed_at=1.5)
    assert hash(trigger) == hash(Trigger(ref, 3, "changed", "r1", 1.5))
    assert trigger != Trigger(ref, 4, "changed", "r1", 1.5)
    fields: tuple[object, ...] = (ref, 3, "changed", "r1", 1.5)
    assert trigger != fields and fields != trigger
    assert len({trigger, fields}) == 2
    with pytest.raises(TypeError, match=r"^'<' not supported between instances of 'Trigger' and 'Trigger'$"):
        trigger < trigger  # noqa: B015
    with pytest.raises(AttributeError):
        trigger.sequence = 5  # type: ignore[misc]
