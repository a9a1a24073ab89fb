"""Where the target differs from the recording, step by step: ``python -m tests.apiserver.conformance._report``.

Runs the whole script once (against the embedded server, or the kubeconfig's cluster when
``ENGINE_CONFORMANCE_KUBECONFIG`` is set) and prints, for every step that differs from the
recording of the target's version, the differences by JSON path; ``--stale`` lists the ``_xfail.XFAIL`` entries that now pass (remove
them) and the failing steps that have none; ``--reasons`` prints a draft ``XFAIL`` entry for each
failing step (a starting point for a precise reason, not a replacement for one).
"""

from __future__ import annotations

import re
import sys

from ._normalize import differences
from ._runner import run_script
from ._xfail import XFAIL

_PHRASES: list[tuple[str, str]] = [
    (r"metadata\.generation: unexpected", "generation on a type that has none"),
    (r"metadata\.generation: expected", "generation counted differently"),
    (r"managedFields.*\.\.: missing", "managedFields lack the '.' entries"),
    (r"managedFields", "managedFields differ"),
    (r'details\.group: unexpected ""', 'Status details carry group ""'),
    (r"details\.kind: expected", "Status details kind differs"),
    (r"details\.causes: missing", "no causes in Status details"),
    (r"causes\[\d+\]\.reason", "cause reason differs"),
    (r"details\.name: unexpected", "Status details carry a name"),
    (r"items\[\d+\]\.(apiVersion|kind): unexpected", "list items carry apiVersion/kind"),
    (r"(list|checks)\.names", "different objects listed"),
    (r"\.extra: unexpected|f:extra", "unknown fields not pruned"),
    (r"checks\.", "checked fields differ"),
    (r"object\.spec: missing", "spec missing"),
    (r"deprecated", "events.k8s.io fields missing"),
]


def draft_reason(step_name: str, lines: list[str], expected: dict[str, object], actual: dict[str, object]) -> str:
    group = step_name.split(".")[0]
    if "error" in actual:
        return f"{group}: the step could not run ({actual['error']})"
    if expected.get("status") != actual.get("status") or expected.get("kind") != actual.get("kind"):
        return (
            f"{group}: answers {actual.get('status')} {actual.get('kind')}, "
            f"the real server {expected.get('status')} {expected.get('kind')}"
        )
    phrases: list[str] = []
    for line in lines:
        for pattern, phrase in _PHRASES:
            if re.search(pattern, line):
                if phrase not in phrases:
                    phrases.append(phrase)
                break
        else:
            phrase = line.split(":")[0]
            if phrase not in phrases:
                phrases.append(phrase)
    return f"{group}: " + "; ".join(phrases[:4])


def main(argv: list[str]) -> int:
    transcript = run_script()
    failing = {}
    for step in transcript.steps:
        expected, actual = transcript.expected(step.name), transcript.actual(step.name)
        if expected != actual:
            failing[step.name] = (expected, actual, differences(expected, actual))
    if "--stale" in argv:
        for name in XFAIL:
            if name not in failing:
                print(f"passes now, remove from XFAIL: {name}")
        for name in failing:
            if name not in XFAIL:
                print(f"fails without an XFAIL entry: {name}")
        return 0
    if "--reasons" in argv:
        for name, (expected, actual, lines) in failing.items():
            print(f"    {name!r}: {draft_reason(name, lines, expected, actual)!r},")
        return 0
    print(
        f"{len(failing)} of {len(transcript.steps)} steps differ on the {transcript.target} "
        f"({transcript.server_version}) from kube-apiserver {transcript.version}"
    )
    for name, (_, _, lines) in failing.items():
        print(f"\n{name}")
        for line in lines:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
