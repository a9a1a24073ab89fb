"""The JSONPath subset a CustomResourceDefinition's ``additionalPrinterColumns`` use.

Supported: ``.field`` and ``['field']``, list indexes ``[0]`` (negative too), ``[*]`` and
``.*``, ``..field`` (recursive descent) and filters ``[?(@.a.b == "x")]`` with ``==``, ``!=``,
``<``, ``<=``, ``>``, ``>=`` against a string, number or boolean literal, or ``[?(@.a)]``
(exists). Missing keys give no result, as the real server's column paths (``AllowMissingKeys``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["JsonPathError", "compile_path"]


class JsonPathError(ValueError):
    """A path outside the supported subset."""


Step = Callable[[Any], Iterator[Any]]

_NAME = re.compile(r"[A-Za-z0-9_\-/]+")
_FILTER = re.compile(
    r"^\?\(\s*@(?P<path>(?:\.[A-Za-z0-9_\-/]+|\[['\"][^'\"]*['\"]\])*)\s*"
    r"(?:(?P<op>==|!=|<=|>=|<|>)\s*(?P<literal>.+?))?\s*\)$"
)


def _field(name: str) -> Step:
    def step(value: Any) -> Iterator[Any]:
        if isinstance(value, dict) and name in value:
            yield value[name]

    return step


def _wildcard(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        yield from value.values()
    elif isinstance(value, list):
        yield from value


def _index(i: int) -> Step:
    def step(value: Any) -> Iterator[Any]:
        if isinstance(value, list) and -len(value) <= i < len(value):
            yield value[i]

    return step


def _descend(name: str) -> Step:
    def step(value: Any) -> Iterator[Any]:
        stack = [value]
        while stack:
            current = stack.pop(0)
            if isinstance(current, dict):
                if name in current:
                    yield current[name]
                stack.extend(current.values())
            elif isinstance(current, list):
                stack.extend(current)

    return step


def _literal(text: str) -> Any:
    text = text.strip()
    if text[:1] in ("'", '"') and text[-1:] == text[:1]:
        return text[1:-1]
    try:
        return json.loads(text)
    except ValueError:
        raise JsonPathError(f"unsupported filter literal {text!r}") from None


def _compare(left: Any, op: str, right: Any) -> bool:
    if op == "==":
        return bool(left == right)
    if op == "!=":
        return bool(left != right)
    if isinstance(left, bool) or isinstance(right, bool):
        return False
    if isinstance(left, (int, float)) and isinstance(right, (int, float)):
        pass
    elif not (isinstance(left, str) and isinstance(right, str)):
        return False
    return bool({"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[op])


def _filter(expression: str) -> Step:
    m = _FILTER.match(expression)
    if m is None:
        raise JsonPathError(f"unsupported filter {expression!r}")
    inner = _compile_steps(m["path"]) if m["path"] else []
    op = m["op"]
    literal = _literal(m["literal"]) if op else None

    def step(value: Any) -> Iterator[Any]:
        items = value if isinstance(value, list) else list(value.values()) if isinstance(value, dict) else []
        for item in items:
            found = list(_run(inner, item))
            if op is None:
                if found:
                    yield item
            elif found and _compare(found[0], op, literal):
                yield item

    return step


def _bracket(text: str) -> Step:
    if text == "*":
        return _wildcard
    if text.startswith("?"):
        return _filter(text)
    if text[:1] in ("'", '"') and text[-1:] == text[:1]:
        return _field(text[1:-1])
    try:
        return _index(int(text))
    except ValueError:
        raise JsonPathError(f"unsupported index {text!r}") from None


def _closing(path: str, start: int) -> int:
    depth, quote = 0, ""
    for i in range(start, len(path)):
        ch = path[i]
        if quote:
            if ch == quote:
                quote = ""
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i
    raise JsonPathError(f"unbalanced brackets in {path!r}")


def _compile_steps(path: str) -> list[Step]:
    steps: list[Step] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if path.startswith("..", i):
            m = _NAME.match(path, i + 2)
            if m is None:
                raise JsonPathError(f"unsupported recursive descent in {path!r}")
            steps.append(_descend(m.group()))
            i = m.end()
        elif ch == ".":
            if path.startswith(".*", i):
                steps.append(_wildcard)
                i += 2
                continue
            m = _NAME.match(path, i + 1)
            if m is None:
                raise JsonPathError(f"unsupported field in {path!r}")
            steps.append(_field(m.group()))
            i = m.end()
        elif ch == "[":
            end = _closing(path, i)
            steps.append(_bracket(path[i + 1 : end].strip()))
            i = end + 1
        else:
            raise JsonPathError(f"unexpected {ch!r} in {path!r}")
    return steps


def _run(steps: list[Step], value: Any) -> Iterator[Any]:
    values = [value]
    for step in steps:
        values = [out for v in values for out in step(v)]
    yield from values


def compile_path(path: str) -> Callable[[Any], list[Any]]:
    """A function giving every value ``path`` (``.spec.replicas``, optionally in braces) finds in
    an object; raises :class:`JsonPathError` for a path outside the subset."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1].strip()
    if text.startswith("$"):
        text = text[1:]
    steps = _compile_steps(text)
    return lambda obj: list(_run(steps, obj))
