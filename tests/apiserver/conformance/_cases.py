"""Turns the script's steps into pytest cases, with the xfail markers of ``_xfail.XFAIL``."""

from __future__ import annotations

import os
from typing import Any

import pytest

from ._normalize import differences
from ._runner import KUBECONFIG_ENV, Transcript
from ._script import RECORDINGS, steps
from ._xfail import XFAIL


def cases(*groups: str) -> list[Any]:
    """One case per step of these recording groups (``cm``, ``schema``...), in script order,
    each the step's name: the expectations come from the transcript, of the target's version.

    The xfail markers describe the embedded server: against a cluster (``ENGINE_CONFORMANCE_KUBECONFIG``)
    every step is expected to pass, which is how the expectations themselves are checked."""
    embedded = not os.environ.get(KUBECONFIG_ENV)
    known = {step.group for step in steps()}
    unknown = set(groups) - known
    assert not unknown, f"no steps in groups {unknown}"
    out = []
    for step in steps():
        if step.group not in groups:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=XFAIL[step.name])] if embedded and step.name in XFAIL else []
        out.append(pytest.param(step.name, id=step.name, marks=marks))
    return out


def check(transcript: Transcript, name: str) -> None:
    """The target answered step ``name`` as the real server of its version did (after normalization)."""
    expected, actual = transcript.expected(name), transcript.actual(name)
    if actual != expected:
        lines = differences(expected, actual)
        pytest.fail(
            f"{name} on the {transcript.target} ({transcript.server_version}) differs from kube-apiserver "
            f"{transcript.version} ({RECORDINGS[transcript.version].name}):\n  " + "\n  ".join(lines)
        )
