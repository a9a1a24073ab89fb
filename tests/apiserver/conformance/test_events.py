"""Events: ``v1`` and ``events.k8s.io/v1`` as two views of one storage, their validation and
field selectors."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("event", "evmap"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
