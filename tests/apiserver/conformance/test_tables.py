"""``as=Table`` answers: built-in columns, a CRD's ``additionalPrinterColumns``, ``includeObject``."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("table"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
