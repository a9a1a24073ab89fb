"""Deletion without a controller manager: what the API server answers when an owner is deleted
(background, foreground, orphan), delete responses with finalizers and options,
``deletecollection``, dry run."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("gc", "delresp"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
