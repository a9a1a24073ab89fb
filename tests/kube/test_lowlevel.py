"""engine.kube.lowlevel holds the rarely needed helpers, apart from the engine.kube face."""

from __future__ import annotations

import pytest

import engine.kube
import engine.kube.lowlevel


def test_lowlevel_names_are_not_in_the_engine_kube_face() -> None:
    for name in engine.kube.lowlevel.__all__:
        assert name not in vars(engine.kube) and name not in dir(engine.kube)
        with pytest.raises(AttributeError):
            getattr(engine.kube, name)


def test_unknown_names_still_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'engine.kube' has no attribute 'no_such_name'$"):
        engine.kube.no_such_name  # noqa: B018


def test_resource_versions_are_read_as_numbers_in_one_place() -> None:
    from engine.kube.lowlevel import resource_version_number, resource_version_of

    assert resource_version_of({"metadata": {"resourceVersion": "42"}}) == "42"
    assert [resource_version_of(o) for o in ({}, {"metadata": None}, {"metadata": {"resourceVersion": 42}},
                                             {"metadata": {"resourceVersion": ""}})] == [None] * 4
    assert resource_version_number("42") == 42
    assert [resource_version_number(v) for v in (None, "", "abc", "-1", "4.2", "٤٢")] == [None] * 6
