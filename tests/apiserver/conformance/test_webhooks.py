"""Admission webhook configurations, a webhook that cannot be reached under each failure
policy, and a CRD's conversion stanza (expectations from documentation and source, not from a
recording: see ``_script.WEBHOOK_STEPS``)."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("webhook"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
