"""``x-kubernetes-validations`` rules, evaluated with cel-python (``celpy``).

A :class:`Rule` is compiled once (programs are cached by expression text, so every served
definition that repeats a rule shares it) and evaluated with ``self`` bound to the value at the
rule's schema level and, for transition rules, ``oldSelf`` to the correlated old value. A failed
rule is a :class:`Failure` carrying the real server's message: the rule's ``message``, the
result of its ``messageExpression``, or ``failed rule: <rule>``; an evaluation error is worded as
the real server words it (``no such key: x evaluating rule: ...``).

What cel-python does not offer, and so is not supported here: the optional syntax (``self.?x``,
``optionalOldSelf``), Kubernetes' ``quantity``, ``url``, ``ip``/``cidr``, ``semver`` and
``format`` libraries, the regex ``find``/``findAll`` functions, the ``sets`` extension,
compile-time type checking (a rule that calls an unknown function or compares mismatched types
is rejected by the real server when the definition is written; here it fails when evaluated) and
the cost budget. Added on top of cel-python, from Kubernetes' string and list libraries:
``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``, ``replace``,
``split``, ``substring``, ``trim``, ``join``, ``isSorted``, ``sum``, ``min``, ``max``.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["Rule", "Failure", "evaluate_condition"]

logger = logging.getLogger("engine.apiserver.cel")

_OLD_SELF = re.compile(r"\boldSelf\b")


@functools.cache
def _celpy() -> Any:
    """cel-python's modules, imported on first use (importing them costs ~0.4s)."""
    import celpy
    import celpy.adapter
    import celpy.celparser
    import celpy.celtypes
    import celpy.evaluation

    return celpy


def _types() -> Any:
    return _celpy().celtypes


def _str(value: Any) -> Any:
    return _types().StringType(value)


def _index_of(target: Any, needle: Any, start: Any = None) -> Any:
    if isinstance(target, str):
        begin = int(start) if start is not None else 0
        return _types().IntType(target.find(str(needle), begin))
    try:
        return _types().IntType(list(target).index(needle))
    except ValueError:
        return _types().IntType(-1)


def _last_index_of(target: Any, needle: Any) -> Any:
    if isinstance(target, str):
        return _types().IntType(target.rfind(str(needle)))
    items = list(target)
    for i in range(len(items) - 1, -1, -1):
        if items[i] == needle:
            return _types().IntType(i)
    return _types().IntType(-1)


def _split(target: Any, sep: Any, limit: Any = None) -> Any:
    if limit is not None and int(limit) == 0:
        return _types().ListType([])
    parts = str(target).split(str(sep)) if str(sep) else list(str(target))
    if limit is not None and int(limit) > 0 and len(parts) > int(limit):
        parts = parts[: int(limit) - 1] + [str(sep).join(parts[int(limit) - 1 :])]
    return _types().ListType([_str(p) for p in parts])


def _substring(target: Any, start: Any, end: Any = None) -> Any:
    text = str(target)
    stop = len(text) if end is None else int(end)
    if not 0 <= int(start) <= stop <= len(text):
        raise ValueError(f"index out of range: {int(start)}")
    return _str(text[int(start) : stop])


def _replace(target: Any, old: Any, new: Any, count: Any = None) -> Any:
    return _str(str(target).replace(str(old), str(new), -1 if count is None else int(count)))


def _join(target: Any, sep: Any = "") -> Any:
    return _str(str(sep).join(str(x) for x in target))


def _is_sorted(target: Any) -> Any:
    items = list(target)
    return _types().BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1)))


def _sum(target: Any) -> Any:
    items = list(target)
    if not items:
        return _types().IntType(0)
    total = items[0]
    for item in items[1:]:
        total = total + item
    return total


def _extreme(pick: Callable[..., Any]) -> Callable[[Any], Any]:
    def choose(target: Any) -> Any:
        items = list(target)
        if not items:
            raise ValueError("min/max of an empty list")
        return pick(items)

    return choose


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "charAt": lambda s, i: _str(str(s)[int(i)] if int(i) < len(str(s)) else ""),
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": lambda s: _str("".join(c.lower() if c.isascii() else c for c in str(s))),
    "upperAscii": lambda s: _str("".join(c.upper() if c.isascii() else c for c in str(s))),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda s: _str(str(s).strip()),
    "join": _join,
    "isSorted": _is_sorted,
    "sum": _sum,
    "min": _extreme(min),
    "max": _extreme(max),
}

@functools.cache
def _environment() -> Any:
    return _celpy().Environment()


@functools.lru_cache(maxsize=4096)
def _program(expression: str) -> Any:
    """The compiled program for ``expression`` (cached: compile once per distinct rule);
    raises cel-python's ``CELParseError``."""
    env = _environment()
    return env.program(env.compile(expression), functions=_FUNCTIONS)


def _parse_error() -> type[Exception]:
    error: type[Exception] = _celpy().celparser.CELParseError
    return error


def _eval_error() -> type[Exception]:
    error: type[Exception] = _celpy().evaluation.CELEvalError
    return error


def _to_cel(value: Any) -> Any:
    return _celpy().adapter.json_to_cel(value)


def _error_text(exc: Exception) -> str:
    """A cel-python evaluation error in the words cel-go uses."""
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    message = str(args[0]) if args else str(exc)
    kind = args[1] if len(args) > 1 else None
    if kind is KeyError:
        found = re.search(r"'([^']*)'", message)
        return f"no such key: {found.group(1) if found else message}"
    if kind is ZeroDivisionError:
        return "modulus by zero" if "modulus" in message and "divide" not in message else "division by zero"
    if kind is IndexError:
        return "index out of bounds"
    if kind is TypeError or "no matching overload" in message:
        return "no such overload"
    return message.split("(in activation")[0].strip()


def evaluate_condition(expression: str, variables: dict[str, Any]) -> bool | str:
    """Evaluate a boolean ``expression`` (a webhook's ``matchConditions`` entry) with
    ``variables`` (JSON values) bound: its value, or why it has none, in cel-go's words."""
    try:
        program = _program(expression)
    except _parse_error() as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
        return f"compilation failed: ERROR: <input>: Syntax error: {first}"
    try:
        result = program.evaluate({name: _to_cel(value) for name, value in variables.items()})
    except _eval_error() as exc:
        return _error_text(exc)
    if not isinstance(result, _types().BoolType):
        return "no such overload"
    return bool(result)


@attrs.frozen
class Failure:
    """A rule that did not hold: the cause's reason and message."""

    reason: str
    message: str


def _normalize_field_path(path: str) -> str:
    path = path.strip()
    path = re.sub(r"\['((?:[^'\\]|\\.)*)'\]", lambda m: "[" + m.group(1).replace("\\'", "'") + "]", path)
    return path.removeprefix(".")


@attrs.frozen
class Rule:
    """One ``x-kubernetes-validations`` entry."""

    rule: str
    message: str = ""
    message_expression: str = ""
    reason: str = "FieldValueInvalid"
    field_path: str = ""
    """The rule's ``fieldPath``, normalized as the real server reports it (``spec.x``)."""
    uses_old_self: bool = False
    optional_old_self: bool = False

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Rule:
        """The rule described by one entry of ``x-kubernetes-validations``."""
        rule = str(spec.get("rule") or "")
        return cls(
            rule=rule,
            message=str(spec.get("message") or ""),
            message_expression=str(spec.get("messageExpression") or ""),
            reason=str(spec.get("reason") or "FieldValueInvalid"),
            field_path=_normalize_field_path(str(spec.get("fieldPath") or "")),
            uses_old_self=bool(_OLD_SELF.search(rule)),
            optional_old_self=bool(spec.get("optionalOldSelf")),
        )

    def compile_error(self) -> str | None:
        """Why the rule (or its message expression) does not compile, or ``None``."""
        for expression in (self.rule, self.message_expression):
            if not expression.strip():
                continue
            try:
                _program(expression)
            except _parse_error() as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else "syntax error"
                return f"compilation failed: ERROR: <input>: Syntax error: {first}"
        return None

    def _default_message(self) -> str:
        return self.message.strip() if self.message else f"failed rule: {self.rule.strip()}"

    def _error_string(self) -> str:
        return self.message.strip() if self.message else self.rule.strip()

    def check(self, value: Any, old: Any, *, has_old: bool) -> Failure | None:
        """Evaluate against ``value`` (``self``) and ``old`` (``oldSelf``); ``None`` when the
        rule holds or does not apply (a transition rule without an old value)."""
        if not self.rule.strip():
            return None
        if self.uses_old_self and not has_old:
            return None
        try:
            program = _program(self.rule)
        except _parse_error():
            return Failure("FieldValueInvalid", f"rule compile error: {self.compile_error()}")
        activation = {"self": _to_cel(value)}
        if self.uses_old_self:
            activation["oldSelf"] = _to_cel(old)
        try:
            result = program.evaluate(activation)
        except _eval_error() as exc:
            text = _error_text(exc)
            if text == "no such overload":
                return Failure(
                    "FieldValueInvalid",
                    f"'no such overload': call arguments did not match a supported operator, function or macro "
                    f"signature for rule: {self._error_string()}",
                )
            return Failure("FieldValueInvalid", f"{text} evaluating rule: {self._error_string()}")
        if isinstance(result, _types().BoolType) and bool(result):
            return None
        return Failure(self.reason, self._message(activation))

    def _message(self, activation: dict[str, Any]) -> str:
        if not self.message_expression:
            return self._default_message()
        try:
            text = _program(self.message_expression).evaluate(activation)
        except (_parse_error(), _eval_error()) as exc:
            logger.debug("messageExpression of rule %r failed: %s", self.rule, exc)
            return self._default_message()
        if not isinstance(text, str) or not text.strip() or "\n" in text:
            return self._default_message()
        return str(text).strip()
