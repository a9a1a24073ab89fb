"""What a Bundle and a Source must hold, checked by the plugin itself.

The CRDs' schemas make a real API server reject most malformed objects at admission, but
schemas can be bypassed (an older CRD, ``x-kubernetes-preserve-unknown-fields``, a server that
does not validate), so the reconciler parses every object it acts on through here and reports
what is wrong instead of failing on it. Nothing here raises anything but :class:`InvalidSpec`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ._crds import DEFAULT_INTERVAL

__all__ = [
    "BundleSpec",
    "InvalidSpec",
    "SourceSpec",
    "dependency_names",
    "find_cycle",
    "mapping",
    "parse_bundle_spec",
    "parse_duration",
    "parse_source_spec",
    "source_name",
]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_JSON_TYPES = ((bool, "boolean"), (str, "string"), (int, "number"), (float, "number"), (list, "array"))


class InvalidSpec(ValueError):
    """An object's spec breaks a rule no retry can fix; the message lists every broken rule."""


def parse_duration(value: str | None, default: float) -> float:
    """Parse a Go-style duration (``"1m30s"``, ``"500ms"``) into seconds."""
    if value is None or value == "":
        return default
    text = str(value).strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or pos == 0:
        raise ValueError(f"invalid duration {value!r} (use e.g. 30s, 5m, 1h30m, 500ms)")
    return total


def mapping(value: Any) -> Mapping[str, Any]:
    """``value`` if it is a mapping, else an empty one (for code that must never raise)."""
    return value if isinstance(value, Mapping) else {}


def _describe(value: Any) -> str:
    """``value`` as a schema would name it: ``object``, ``string 'yes'``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "object"
    for cls, name in _JSON_TYPES:
        if isinstance(value, cls):
            if name == "array":
                return name
            shown = repr(value)
            return f"{name} {shown if len(shown) <= 40 else shown[:37] + '...'}"
    return type(value).__name__


def _name_of(value: Any) -> str | None:
    """The non-empty ``name`` of a reference object, or ``None``."""
    name = mapping(value).get("name")
    return name if isinstance(name, str) and name else None


def source_name(bundle: Mapping[str, Any]) -> str | None:
    """The name of the Source a Bundle refers to, or ``None`` if it names none. Never raises."""
    return _name_of(mapping(bundle.get("spec")).get("sourceRef"))


def dependency_names(bundle: Mapping[str, Any]) -> list[str]:
    """The names in a Bundle's ``dependsOn`` that are well formed (others are skipped). Never
    raises: used on other Bundles of the cache, whose specs may be anything."""
    depends_on = mapping(bundle.get("spec")).get("dependsOn")
    if not isinstance(depends_on, list):
        return []
    return [name for name in map(_name_of, depends_on) if name is not None]


@attrs.frozen
class BundleSpec:
    """A Bundle's spec once checked, defaults filled in."""

    source: str
    """The name of the Source, in the Bundle's namespace."""
    depends_on: tuple[str, ...]
    """Names of Bundles in the same namespace that must be Ready first (no duplicates)."""
    interval: float
    timeout: float
    health_check_wait: float
    prune: bool


def _duration(spec: Mapping[str, Any], field: str, default: float, errors: list[str], *, positive: bool) -> float:
    value = spec.get(field)
    if value is None:
        return default
    if not isinstance(value, str):
        errors.append(f"spec.{field} must be a duration string such as 30s or 5m, got {_describe(value)}")
        return default
    try:
        seconds = parse_duration(value, default)
    except ValueError as exc:
        errors.append(f"spec.{field}: {exc}")
        return default
    if positive and seconds <= 0:
        errors.append(f"spec.{field} must be greater than 0, got {value!r}")
    return seconds


def parse_bundle_spec(bundle: Mapping[str, Any]) -> BundleSpec:
    """Check a Bundle's spec and return it parsed.

    Raises :class:`InvalidSpec` naming every field that is missing or has the wrong type or
    value (``spec.sourceRef is required; spec.prune must be a boolean, got string 'yes'``).
    """
    errors: list[str] = []
    spec = bundle.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidSpec("spec is required" if spec is None else f"spec must be an object, got {_describe(spec)}")

    source = ""
    ref = spec.get("sourceRef")
    if ref is None:
        errors.append("spec.sourceRef is required")
    elif not isinstance(ref, Mapping):
        errors.append(f"spec.sourceRef must be an object such as {{name: my-source}}, got {_describe(ref)}")
    else:
        name = ref.get("name")
        if not isinstance(name, str) or not name:
            errors.append(f"spec.sourceRef.name must be a non-empty string, got {_describe(name)}")
        else:
            source = name
        kind = ref.get("kind", "Source")
        if kind != "Source":
            errors.append(f"spec.sourceRef.kind must be 'Source', got {_describe(kind)}")

    depends_on: list[str] = []
    deps = spec.get("dependsOn")
    if deps is not None and not isinstance(deps, list):
        errors.append(f"spec.dependsOn must be a list such as [{{name: other-bundle}}], got {_describe(deps)}")
    for i, dep in enumerate(deps if isinstance(deps, list) else ()):
        name = _name_of(dep)
        if name is None:
            what = "an object such as {name: other-bundle}" if not isinstance(dep, Mapping) else "an object with a non-empty string name"
            errors.append(f"spec.dependsOn[{i}] must be {what}, got {_describe(dep)}")
        elif name not in depends_on:
            depends_on.append(name)

    interval = _duration(spec, "interval", parse_duration(DEFAULT_INTERVAL, 600.0), errors, positive=True)
    timeout = _duration(spec, "timeout", 300.0, errors, positive=True)
    wait = _duration(spec, "healthCheckWait", 0.0, errors, positive=False)

    prune = spec.get("prune", True)
    if not isinstance(prune, bool):
        errors.append(f"spec.prune must be a boolean, got {_describe(prune)}")
        prune = True

    if errors:
        raise InvalidSpec("; ".join(errors))
    return BundleSpec(
        source=source, depends_on=tuple(depends_on), interval=interval, timeout=timeout,
        health_check_wait=wait, prune=prune,
    )


@attrs.frozen
class SourceSpec:
    """A Source's spec once checked."""

    revision: str
    artifact: tuple[Mapping[str, Any], ...]
    """The manifests, each with ``apiVersion``, ``kind`` and ``metadata.name``."""


def parse_source_spec(source: Mapping[str, Any]) -> SourceSpec:
    """Check a Source's spec and return it parsed; raises :class:`InvalidSpec` naming every
    broken rule."""
    spec = source.get("spec")
    if not isinstance(spec, Mapping):
        raise InvalidSpec("spec is required" if spec is None else f"spec must be an object, got {_describe(spec)}")
    errors: list[str] = []
    revision = spec.get("revision")
    if not isinstance(revision, str) or not revision:
        errors.append(f"spec.revision must be a non-empty string, got {_describe(revision)}")
    artifact = spec.get("artifact")
    if artifact is not None and not isinstance(artifact, list):
        errors.append(f"spec.artifact must be a list of manifests, got {_describe(artifact)}")
    manifests = artifact if isinstance(artifact, list) else []
    for i, manifest in enumerate(manifests):
        doc = mapping(manifest)
        if not all(isinstance(v, str) and v for v in (
                doc.get("apiVersion"), doc.get("kind"), mapping(doc.get("metadata")).get("name"))):
            errors.append(f"spec.artifact[{i}] must be a manifest with apiVersion, kind and metadata.name")
    if errors:
        raise InvalidSpec("; ".join(errors))
    return SourceSpec(revision=str(revision), artifact=tuple(manifests))


def find_cycle(start: str, depends_on: Callable[[str], list[str]]) -> list[str] | None:
    """The shortest dependency path from ``start`` back to itself (``[a, b, a]``), or ``None``.

    ``depends_on(name)`` gives the names a Bundle depends on (empty for one that does not
    exist). Cycles that do not pass through ``start`` are not its to report.
    """
    parents: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        following = []
        for name in frontier:
            for dep in depends_on(name):
                if dep == start:
                    path = [name]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if dep not in seen:
                    seen.add(dep)
                    parents[dep] = name
                    following.append(dep)
        frontier = following
    return None
