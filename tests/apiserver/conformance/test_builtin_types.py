"""Built-in types a GitOps user applies: ``apps/v1`` Deployments (scale subresource, status),
``v1`` Services, ServiceAccounts (TokenRequest), RBAC, SelfSubjectAccessReview."""

from __future__ import annotations

import pytest

from ._cases import cases, check
from ._runner import Transcript


@pytest.mark.parametrize("step", cases("apps", "svc", "rbac"))
def test_step(transcript: Transcript, step: str) -> None:
    check(transcript, step)
