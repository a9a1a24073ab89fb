"""Limits and resourceVersion edges: request and object sizes, reads at a future resourceVersion."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("limits"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
