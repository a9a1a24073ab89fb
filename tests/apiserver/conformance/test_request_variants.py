"""Request variants: metadata-only reads (``as=PartialObjectMetadata``) and field selectors
(supported, unsupported, CRD ``selectableFields``, on watches)."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("meta", "fsel"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
