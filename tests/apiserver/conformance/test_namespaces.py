"""Namespace lifecycle: ``spec.finalizers``, ``Terminating``, 403 in a terminating namespace,
``/finalize``."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("cleanup", "ns2", "nslife"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
