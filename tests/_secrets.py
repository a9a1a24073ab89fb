"""Secrets of each kind the engine must never let out, embedded in realistic error text.

Each case is ``(text, secret)``: ``text`` is what a reconciler, a plugin or a library might put
in an exception message; ``secret`` must not appear anywhere it is shown.
"""

from __future__ import annotations

import pytest

PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7-KEYBODY"

CASES: dict[str, tuple[str, str]] = {
    "token": (
        "GET /api/v1/pods failed with headers {'Authorization': 'Bearer abc.def'}; retry with Bearer abc.def",
        "abc.def",
    ),
    "proxy-password": ("proxy http://alice:hunter2-PASS@proxy.local:3128 refused the CONNECT", "hunter2-PASS"),
    "client-key": (
        f"cannot load the client key\n-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\n"
        "from the kubeconfig",
        PEM_BODY,
    ),
    "exec-env-var": (
        "exec plugin env [{'name': 'AWS_SECRET_ACCESS_KEY', 'value': 'wJalr-ENV-VALUE'}] "
        "exported as AWS_SECRET_ACCESS_KEY=wJalr-ENV-VALUE",
        "wJalr-ENV-VALUE",
    ),
}

SECRET_CASES = [pytest.param(text, secret, id=name) for name, (text, secret) in CASES.items()]
"""Parametrize a test with ``@pytest.mark.parametrize(("text", "secret"), SECRET_CASES)``."""

SECRET_TEXTS = tuple(text for text, _ in CASES.values())
ALL_SECRETS = tuple(secret for _, secret in CASES.values())
