"""CRD structural schemas: validation (422 causes), pruning, defaulting, status
subresource validation, CEL rules, ``fieldValidation=Strict`` and its warnings."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("schema"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
