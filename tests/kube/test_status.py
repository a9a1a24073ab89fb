"""Status conditions (engine.kube._runtime._status)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.kube import get_condition, set_condition

from .._secrets import SECRET_CASES


def test_last_transition_time_changes_only_with_the_status() -> None:
    conditions: list[dict[str, Any]] = []
    assert set_condition(conditions, "Ready", False, reason="Progressing", now="t1")
    assert set_condition(conditions, "Ready", False, reason="Failed", message="boom", now="t2")
    assert conditions[0]["lastTransitionTime"] == "t1"
    assert not set_condition(conditions, "Ready", False, reason="Failed", message="boom", now="t3")
    assert set_condition(conditions, "Ready", True, reason="Succeeded", now="t4")
    assert get_condition({"status": {"conditions": conditions}}, "Ready") == {
        "type": "Ready", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": "t4",
    }


@pytest.mark.parametrize(("text", "secret"), SECRET_CASES)
def test_no_kind_of_secret_reaches_a_condition_message(text: str, secret: str) -> None:
    conditions: list[dict[str, Any]] = []
    set_condition(conditions, "Ready", False, reason="ReconciliationFailed", message=f"RuntimeError: {text}")
    message = conditions[0]["message"]
    assert message.startswith("RuntimeError: ")
    assert secret not in message


def test_a_condition_message_fits_the_api_servers_limit() -> None:
    conditions: list[dict[str, Any]] = []
    set_condition(conditions, "Ready", False, reason="Failed", message="x" * 40_000)
    message = conditions[0]["message"]
    assert len(message.encode()) == 32768 and message.endswith("...")
