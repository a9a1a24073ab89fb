"""engine.kube.lowlevel holds the rarely needed helpers; engine.kube still reaches them, warning."""

from __future__ import annotations

import pytest

import engine.kube
import engine.kube.lowlevel


def test_moved_names_are_reachable_from_engine_kube_with_a_deprecation_warning() -> None:
    for name in engine.kube.lowlevel.__all__:
        assert name not in vars(engine.kube)
        with pytest.warns(DeprecationWarning, match=rf"^engine\.kube\.{name} is deprecated: use engine\.kube\.lowlevel\.{name}$"):
            value = getattr(engine.kube, name)
        assert value is getattr(engine.kube.lowlevel, name)


def test_from_import_of_a_moved_name_warns() -> None:
    with pytest.warns(DeprecationWarning, match=r"^engine\.kube\.create_lease is deprecated: use engine\.kube\.lowlevel\.create_lease$"):
        from engine.kube import create_lease
    assert create_lease is engine.kube.lowlevel.create_lease


def test_unknown_names_still_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match=r"^module 'engine.kube' has no attribute 'no_such_name'$"):
        engine.kube.no_such_name  # noqa: B018
