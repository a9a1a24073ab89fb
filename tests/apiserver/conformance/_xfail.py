"""The steps the embedded server does not answer as the real one yet: step id -> reason.

Each entry marks its step ``xfail(strict=True)``: when a fix makes the step pass, the test
XPASSes and fails, so remove the entry with the fix. ``python -m tests.apiserver.conformance._report --stale``
lists the entries that pass now; ``python -m tests.apiserver.conformance._report`` prints every difference.
Details and where each fix belongs: GAPS.md.
"""

XFAIL: dict[str, str] = {}
