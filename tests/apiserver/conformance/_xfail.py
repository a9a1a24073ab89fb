"""The steps the embedded server does not answer as the real one yet: step id -> reason.

Each entry marks its step ``xfail(strict=True)``: when a fix makes the step pass, the test
XPASSes and fails, so remove the entry with the fix. ``python -m tests.apiserver.conformance._report --stale``
lists the entries that pass now; ``python -m tests.apiserver.conformance._report`` prints every difference.
Details and where each fix belongs: GAPS.md.
"""

XFAIL: dict[str, str] = {
    "ssa.apply_cr_status": "ssa: the expectation has an Apply entry of mgr-a owning spec.size from a held-out step; the authored setup (setup.widget_size_7) sets size by a merge patch instead",
}
