"""The recording's normalization, applied to live answers so that they compare with it.

The recording (``data/real-kube-apiserver-1.32.json``, see ``data/README.md``) stores a
*projection* of each answer (status, kind, the object, the ``Status`` fields, list names, Table
columns and cells, watch events, derived checks) with run-specific values replaced by
placeholders. :func:`project` computes the same projection of a live answer, and
:class:`Bindings` unifies the placeholders: the first time ``uid-7`` meets a live uid, the two
are bound, and from then on that uid must appear wherever the recording has ``uid-7`` (and only
there). ``rv-N`` works the same way for resourceVersions, ``gen-<5 chars>`` for generated names.
Requests go the other way (:meth:`Bindings.denormalize`): placeholders become the live values.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import re
from collections.abc import Callable
from typing import Any

UID = re.compile(r"^uid-\d+$")
UID_IN_TEXT = re.compile(r"\buid-\d+\b")
RV = re.compile(r"^rv-\d+$")
GENERATED = re.compile(r"^(?P<prefix>.*)<(?P<n>\d+) chars>$")
FILLER = re.compile(r"^<(?P<n>\d+) (?P<c>.)>$")
TIMESTAMP = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
AGE = re.compile(r"^(\d+[smhdy])+$|^<invalid>$|^<unknown>$")
FAR_FUTURE = "999999999999"


class Unbound(Exception):
    """A request needs a placeholder that no earlier answer has bound."""


class Bindings:
    """Placeholder <-> live value bindings of one run (see the module docstring)."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.uids: dict[str, str] = {}
        self.uid_tokens: dict[str, str] = {}
        self.rvs: dict[str, str] = {}
        self.rv_tokens: dict[str, str] = {}
        self.names: dict[str, str] = {}
        self.vars: dict[str, str] = {}

    # ----- binding -----

    def _bind(self, forward: dict[str, str], back: dict[str, str], token: str, value: str) -> bool:
        if token in forward or value in back:
            return forward.get(token) == value and back.get(value) == token
        forward[token] = value
        back[value] = token
        return True

    def bind_uid(self, token: str, value: str) -> bool:
        return self._bind(self.uids, self.uid_tokens, token, value)

    def bind_rv(self, token: str, value: str) -> bool:
        """Bind ``rv-N`` to a live resourceVersion, which must also keep the recording's order:
        ``rv-N`` ranks the resourceVersion among the run's, so a live value bound to ``rv-N``
        is above every one bound to a lower rank and below every one bound to a higher rank."""
        if token not in self.rvs and value not in self.rv_tokens and not self._in_order(token, value):
            return False
        return self._bind(self.rvs, self.rv_tokens, token, value)

    def _in_order(self, token: str, value: str) -> bool:
        try:
            rank, live = int(token.split("-")[1]), int(value)
            return all(
                (int(t.split("-")[1]) < rank) == (int(v) < live) for t, v in self.rvs.items() if t.split("-")[1] != str(rank)
            )
        except ValueError:
            return True

    # ----- requests: placeholders -> live values -----

    def denormalize(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self._text(k): self.denormalize(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.denormalize(v) for v in value]
        if isinstance(value, str):
            return self._text(value)
        return value

    def _text(self, text: str) -> str:
        if text.startswith("$"):
            if text[1:] not in self.vars:
                raise Unbound(f"variable {text} is not set")
            return self.vars[text[1:]]
        if RV.match(text):
            if text not in self.rvs:
                raise Unbound(f"{text} was never bound to a live resourceVersion")
            return self.rvs[text]
        if text == "<ts>":
            return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        if text == "<far-future>":
            return FAR_FUTURE
        if text == "<list-rv>":
            return self.vars["list-rv"]
        filler = FILLER.match(text)
        if filler:
            return filler["c"] * int(filler["n"])
        text = text.replace("{run}", self.run)
        text = UID_IN_TEXT.sub(lambda m: self.uids.get(m[0], _fake_uid(m[0])), text)
        for token, name in self.names.items():
            text = text.replace(token, name)
        return text

    # ----- answers: live values -> placeholders -----

    def normalize(self, expected: Any, actual: Any) -> Any:
        """``actual`` with the live values that match ``expected``'s placeholders replaced by
        them (binding new placeholders on the way), the run token by ``{run}`` and every bound
        uid, wherever it appears (also inside ``k:{"uid":...}`` keys), by its placeholder."""
        return self._scrub(self._unify(expected, actual))

    def _unify(self, expected: Any, actual: Any) -> Any:
        if isinstance(expected, dict) and isinstance(actual, dict):
            return {k: self._unify(expected[k], v) if k in expected else v for k, v in actual.items()}
        if isinstance(expected, list) and isinstance(actual, list):
            return [self._unify(e, a) for e, a in zip(expected, actual, strict=False)] + actual[len(expected) :]
        if not isinstance(expected, str) or not isinstance(actual, str):
            return actual
        if UID.match(expected):
            return expected if self.bind_uid(expected, actual) else actual
        if RV.match(expected):
            return expected if self.bind_rv(expected, actual) else actual
        matcher = _PLACEHOLDERS.get(expected)
        if matcher is not None:
            return expected if matcher(actual) else actual
        generated = GENERATED.match(expected)
        if generated and "{run}" not in expected:
            prefix, n = generated["prefix"], int(generated["n"])
            if re.fullmatch(re.escape(prefix) + f"[a-z0-9]{{{n}}}", actual):
                self.names.setdefault(expected, actual)
                return expected if self.names[expected] == actual else actual
        return actual

    def _scrub(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self._scrub_text(k): self._scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._scrub(v) for v in value]
        if isinstance(value, str):
            return self._scrub_text(value)
        return value

    def _scrub_text(self, text: str) -> str:
        if self.run in text:
            text = text.replace(self.run, "{run}")
        if text in self.uid_tokens:
            return self.uid_tokens[text]
        if '"uid"' in text or "uid" in text:
            for uid, token in self.uid_tokens.items():
                if uid in text:
                    text = text.replace(uid, token)
        return text


def _fake_uid(token: str) -> str:
    return f"00000000-0000-4000-8000-{int(token.split('-')[1]):012d}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


_PLACEHOLDERS: dict[str, Callable[[str], bool]] = {
    "<ts>": lambda s: bool(TIMESTAMP.match(s)),
    "<age>": lambda s: bool(AGE.match(s)),
    "<allocated>": _is_ip,
    "<present>": bool,
    "<token>": bool,
}


# ----- projection of a live answer into the recording's shape -----


def project(expected: dict[str, Any], status: int, headers: Any, body: Any, elapsed: float) -> dict[str, Any]:
    """The parts of a live answer that the recording kept, in its shape (see ``data/README.md``).

    Which parts: those the recorded answer ``expected`` has, plus always ``status`` and ``kind``.
    """
    obj = body if isinstance(body, dict) else {}
    out: dict[str, Any] = {"status": status, "kind": obj.get("kind")}
    if "content_type" in expected:
        out["content_type"] = headers.get("content-type", "").split(";")[0].strip()
    if "apiVersion" in expected:
        out["apiVersion"] = obj.get("apiVersion")
    if "object" in expected:
        out["object"] = body
        _sort_managed_fields(body)
    if "status_obj" in expected:
        out["status_obj"] = _status(obj)
    if "checks" in expected:
        out["checks"] = _checks(expected["checks"], obj)
    if "list" in expected:
        for item in obj.get("items") or []:
            _sort_managed_fields(item)
        out["list"] = _list(obj, with_items="items" in expected["list"])
    if "table" in expected:
        out["table"] = _table(obj)
    if "warnings" in expected:
        warnings = [_warning_text(w) for w in headers.get_list("warning")]
        out["warnings"] = {"count": len(warnings), "message": " | ".join(sorted(warnings))}
    if "elapsed" in expected:
        out["elapsed"] = "1.5s-10s" if 1.5 <= elapsed <= 10 else f"{elapsed:.2f}s"
    return out


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    out = {k: obj.get(k) for k in ("status", "reason", "code", "message")}
    if "details" in obj:
        out["details"] = obj["details"]
    return out


def _warning_text(header: str) -> str:
    match = re.match(r'^\d{3} \S+ "(?P<text>(?:[^"\\]|\\.)*)"', header)
    return json.loads(f'"{match["text"]}"') if match else header


def _list(obj: dict[str, Any], *, with_items: bool) -> dict[str, Any]:
    items = obj.get("items") or []
    meta = obj.get("metadata") or {}
    rv = meta.get("resourceVersion")
    item_rvs = [(i.get("metadata") or {}).get("resourceVersion") for i in items]
    rv_ge: bool | None = None
    if items and rv:
        try:
            rv_ge = all(int(rv) >= int(r) for r in item_rvs if r)
        except ValueError:
            rv_ge = False
    out: dict[str, Any] = {
        "names": [(i.get("metadata") or {}).get("name") for i in items],
        "resourceVersion": "<present>" if rv else rv,
        "rv_ge_items": rv_ge,
        "continue": bool(meta.get("continue")),
        "remainingItemCount": meta.get("remainingItemCount"),
    }
    if with_items:
        out["items"] = items
    return out


def _table(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    rows = []
    for row in obj.get("rows") or []:
        inner = row.get("object") or {}
        rows.append(
            {
                "cells": row.get("cells"),
                "object": {
                    "kind": inner.get("kind"),
                    "apiVersion": inner.get("apiVersion"),
                    "name": (inner.get("metadata") or {}).get("name"),
                    "has_spec": "spec" in inner,
                },
            }
        )
    return {
        "columnDefinitions": [
            {k: c.get(k) for k in ("name", "type", "format", "priority")} for c in obj.get("columnDefinitions") or []
        ],
        "rows": rows,
        "resourceVersion": "<present>" if meta.get("resourceVersion") else meta.get("resourceVersion"),
        "continue": bool(meta.get("continue")),
    }


def _sub(obj: dict[str, Any], key: str) -> dict[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, dict) else {}


def _condition(obj: dict[str, Any], kind: str) -> Any:
    for condition in _sub(obj, "status").get("conditions") or []:
        if condition.get("type") == kind:
            return condition.get("status")
    return None


def _resource(obj: dict[str, Any], name: str) -> Any:
    for resource in obj.get("resources") or []:
        if resource.get("name") == name:
            return {
                "namespaced": resource.get("namespaced"),
                "kind": resource.get("kind"),
                "verbs": sorted(resource.get("verbs") or []),
                "shortNames": resource.get("shortNames"),
            }
    return None


def _group(obj: dict[str, Any], name: str) -> Any:
    for group in obj.get("groups") or []:
        if group.get("name") == name:
            return {"present": True, "preferred": (group.get("preferredVersion") or {}).get("version")}
    return {"present": False, "preferred": None}


_CHECKS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "Established": lambda o: _condition(o, "Established"),
    "NamesAccepted": lambda o: _condition(o, "NamesAccepted"),
    "acceptedNames": lambda o: _sub(o, "status").get("acceptedNames"),
    "storedVersions": lambda o: _sub(o, "status").get("storedVersions"),
    "name": lambda o: _sub(o, "metadata").get("name"),
    "group": lambda o: _sub(o, "spec").get("group"),
    "phase": lambda o: _sub(o, "status").get("phase"),
    "deletionTimestamp": lambda o: "deletionTimestamp" in _sub(o, "metadata"),
    "deleting": lambda o: "deletionTimestamp" in _sub(o, "metadata"),
    "spec.finalizers": lambda o: _sub(o, "spec").get("finalizers"),
    "finalizers": lambda o: _sub(o, "spec").get("finalizers"),
    "conditions": lambda o: _sub(o, "status").get("conditions") or [],
    "apiVersion": lambda o: o.get("apiVersion"),
    "has_data": lambda o: "data" in o,
    "labels": lambda o: _sub(o, "metadata").get("labels"),
    "generation": lambda o: _sub(o, "metadata").get("generation"),
    "observedGeneration": lambda o: _sub(o, "status").get("observedGeneration"),
    "status_keys": lambda o: sorted(_sub(o, "status")),
    "replicas": lambda o: _sub(o, "spec").get("replicas"),
    "allowed": lambda o: _sub(o, "status").get("allowed"),
    "denied": lambda o: _sub(o, "status").get("denied"),
    "names": lambda o: [(i.get("metadata") or {}).get("name") for i in o.get("items") or []],
    "groupVersion": lambda o: o.get("groupVersion"),
}


def _checks(expected: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, want in expected.items():
        if key == "has_keys":
            out[key] = {k: k in obj for k in want}
        elif isinstance(want, dict) and "preferred" in want:
            out[key] = _group(obj, key)
        elif (isinstance(want, dict) and "verbs" in want) or (want is None and "/" in key):
            out[key] = _resource(obj, key)
        elif key in _CHECKS:
            out[key] = _CHECKS[key](obj)
        else:
            raise KeyError(f"no extractor for the recorded check {key!r}")
    return out


def comparable(response: dict[str, Any]) -> dict[str, Any]:
    """The contract part of a projected answer: without human-readable messages, causes sorted."""
    out = json.loads(json.dumps(response))
    status = out.get("status_obj")
    if isinstance(status, dict):
        status.pop("message", None)
        details = status.get("details")
        if isinstance(details, dict) and isinstance(details.get("causes"), list):
            for cause in details["causes"]:
                cause.pop("message", None)
                cause.setdefault("field", None)  # the recording projects an absent field as null
            details["causes"].sort(key=lambda c: (str(c.get("field")), str(c.get("reason"))))
    return out


def _sort_managed_fields(obj: Any) -> None:
    # As the recording: entries sorted by manager, operation and subresource (the server orders
    # them by operation and time, which a replay cannot reproduce to the second).
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if isinstance(metadata, dict) and isinstance(metadata.get("managedFields"), list):
        metadata["managedFields"].sort(
            key=lambda e: (str(e.get("manager")), str(e.get("operation")), str(e.get("subresource", "")))
        )


def project_watch(http_status: int, events: list[dict[str, Any]], error: str | None) -> dict[str, Any]:
    shown = []
    for event in events:
        if event.get("type") == "BOOKMARK":
            continue
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        shown.append(
            {
                "type": event.get("type"),
                "kind": obj.get("kind"),
                "name": meta.get("name"),
                "resourceVersion": meta.get("resourceVersion"),
                "labels": meta.get("labels"),
                "data": obj.get("data"),
                "deletionTimestamp": meta.get("deletionTimestamp"),
            }
        )
    return {
        "watch": {
            "http_status": http_status,
            "types": [e["type"] for e in shown],
            "events": shown,
            "bookmark_seen": any(e.get("type") == "BOOKMARK" for e in events),
            "error": error,
        }
    }


def differences(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` differs from ``expected``, one line per difference, by JSON path."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[str] = []
        for key in sorted(set(expected) | set(actual), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in actual:
                out.append(f"{where}: missing (expected {_short(expected[key])})")
            elif key not in expected:
                out.append(f"{where}: unexpected {_short(actual[key])}")
            else:
                out.extend(differences(expected[key], actual[key], where))
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            line
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
            for line in differences(e, a, f"{path}[{i}]")
        ]
    if expected == actual and type(expected) is type(actual):
        return []
    return [f"{path}: expected {_short(expected)}, got {_short(actual)}"]


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."
