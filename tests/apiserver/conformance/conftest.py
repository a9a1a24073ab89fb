from __future__ import annotations

import pytest

from ._runner import Transcript, run_script


@pytest.fixture(scope="session")
def transcript() -> Transcript:
    """The whole script, run once against the target (see ``_runner``)."""
    return run_script()
