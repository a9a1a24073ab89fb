"""Exceptions raised by :mod:`engine.testing`.

::

    EngineError                    (engine._errors)
    ├── HarnessError               a test harness was misused, or asked for what its target lacks
    │   └── WaitTimeout            a wait ended at its timeout (also an AssertionError)
    └── EnvTestError               a real control plane (etcd, kube-apiserver) did not start

Messages state the rule that was broken; they never contain key material or tokens.
"""

from __future__ import annotations

from engine._errors import EngineError

__all__ = ["EnvTestError", "HarnessError", "WaitTimeout"]


class HarnessError(EngineError):
    """A test harness was used outside its lifecycle, or asked for something its target lacks
    (fault injection or the server object against a real API server)."""


class WaitTimeout(HarnessError, AssertionError):
    """A wait of the test harness did not see its condition within its timeout.

    It is an ``AssertionError`` too, so pytest reports it as a failed expectation; the message
    says what was awaited and the last state seen.
    """


class EnvTestError(EngineError):
    """A real control plane could not be started: binaries missing, or not ready in time."""
