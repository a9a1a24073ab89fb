"""Basics: discovery, ConfigMap CRUD and patches, CRDs and custom resources, list and
watch selectors, finalizers, delete preconditions, server-side apply, Leases."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("discovery", "cm", "crd", "cr", "list", "watch", "fin", "del", "ssa", "lease"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
