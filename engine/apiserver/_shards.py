"""The ``shardSelector`` of sharded list and watch (KEP-5866), as kube-apiserver 1.36 reads it.

The selector is a CEL-shaped expression that the real server parses (cel-go, no macros) but
never evaluates: the syntax tree must be ``shardRange(<field>, '<start>', '<end>')`` calls
joined by ``||`` (any nesting, any parentheses). ``<field>`` is ``object.metadata.uid`` or
``object.metadata.namespace`` (the same in every range), the bounds are string literals of a
lowercase ``0x`` and 16 lowercase hex digits, or ``0x10000000000000000`` (2**64), and every
range has ``start < end``. An object matches when the FNV-1a 64 hash of the UTF-8 bytes of its
field (``""`` for the namespace of a cluster-scoped object) is in one of the ranges.

Every failure is :class:`ShardSelectorError`, whose message is exactly the real server's
(``invalid shard selector: ...``, answered as an HTTP 500 ``Status`` without ``reason``).
:func:`parse_shard_selector` is only called when the ``ShardedListAndWatch`` feature gate is
on: with it off the parameter is ignored, malformed or not, as the real server does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from .._keyspace import KEY_SPACE, NAMESPACE_FIELD, UID_FIELD, KeyRange, KeyRanges, fnv1a64
from ._errors import RequestRejected

__all__ = [
    "FEATURE_GATES",
    "SHARDED_LIST_AND_WATCH",
    "ShardSelector",
    "ShardSelectorError",
    "check_feature_gates",
    "parse_shard_selector",
    "shard_selector_of",
]

SHARDED_LIST_AND_WATCH = "ShardedListAndWatch"
"""The feature gate of server-side sharded list and watch (alpha in 1.36, off by default)."""

FEATURE_GATES: Mapping[str, bool] = {SHARDED_LIST_AND_WATCH: False}
"""The feature gates the embedded server knows, with their defaults."""

_FIELDS = (UID_FIELD, NAMESPACE_FIELD)

# cel-go's ast.ExprKind numbers, which the real server prints in its messages.
_CALL, _IDENT, _LIST, _LITERAL, _MAP, _SELECT, _STRUCT = 1, 3, 4, 5, 6, 7, 8


def check_feature_gates(gates: Mapping[str, bool]) -> dict[str, bool]:
    """``gates`` over the defaults; raises ``ValueError`` naming an unknown gate."""
    unknown = sorted(set(gates) - set(FEATURE_GATES))
    if unknown:
        raise ValueError(f"unrecognized feature gate: {unknown[0]} (known: {', '.join(FEATURE_GATES)})")
    return {**FEATURE_GATES, **{k: bool(v) for k, v in gates.items()}}


class ShardSelectorError(RequestRejected):
    """A ``shardSelector`` the server refuses: HTTP 500 with the real server's message."""

    def __init__(self, detail: str) -> None:
        super().__init__(500, "", f"invalid shard selector: {detail}")


@attrs.frozen
class ShardSelector:
    """A parsed ``shardSelector``: ranges of one field's hash, in request order."""

    field: str
    """``object.metadata.uid`` or ``object.metadata.namespace``."""
    ranges: tuple[KeyRange, ...]
    """The ranges as requested (duplicates and overlaps kept; an object matches once)."""
    _union: KeyRanges = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(lambda self: KeyRanges(self.ranges), takes_self=True)
    )

    @property
    def canonical(self) -> str:
        """The selector as the real server echoes it in ``metadata.shardInfo.selector``."""
        return " || ".join(r.shard_range(self.field) for r in self.ranges)

    def key(self, obj: Mapping[str, Any]) -> int:
        """The hash of ``obj``'s field."""
        meta = obj.get("metadata") or {}
        value = meta.get("uid") if self.field == UID_FIELD else meta.get("namespace")
        return fnv1a64(value if isinstance(value, str) else "")

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj``'s hash falls in one of the ranges."""
        return self.key(obj) in self._union


def shard_selector_of(query_values: Mapping[str, Sequence[str]], enabled: bool) -> ShardSelector | None:
    """The request's selector (its first ``shardSelector`` value), or ``None`` when the gate is
    off, the parameter is absent or empty. Raises :class:`ShardSelectorError`."""
    if not enabled:
        return None
    values = query_values.get("shardSelector") or ()
    if not values or values[0] == "":
        return None
    return parse_shard_selector(values[0])


# ----- a CEL parser, as far as the selector needs one -----


@attrs.frozen
class _Expr:
    kind: int
    function: str = ""
    args: tuple[_Expr, ...] = ()
    target: _Expr | None = None
    name: str = ""
    value: object = None
    type_name: str = ""


_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>[rR]?(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<bytes>[bB][rR]?(?:'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*"))
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)[uU]?)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|[-+*/%!<>?:.,()\[\]{}])
    """,
    re.VERBOSE,
)

_EOF = "<EOF>"
_STARTS = "'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER"
_STARTS_OR_CLOSE = _STARTS.replace("'(', ", "'(', ')', ")
_BINARY = [("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%")]
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?", "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


_MAX_RECURSION = 250
"""cel-go's default parser recursion limit; deeper nesting is refused as a parse error (here
when Python's own stack gives out first)."""


def _syntax(detail: str) -> ShardSelectorError:
    return ShardSelectorError(f"CEL parse error: Syntax error: {detail}")


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _syntax(f"token recognition error at: '{text[pos]}'")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None
        if kind != "space":
            out.append((kind, m.group()))
    out.append(("eof", _EOF))
    return out


def _unquote(token: str) -> str:
    raw = token[0] in "rR"
    body = token[1:] if raw else token
    quote = 3 if body[:3] in ("'''", '"""') else 1
    body = body[quote:-quote]
    if raw:
        return body
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), body)


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos]

    def take(self) -> tuple[str, str]:
        token = self.tokens[self.pos]
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return token

    def expect(self, text: str) -> None:
        if self.peek()[1] != text:
            raise _syntax(f"missing '{text}' at '{self.peek()[1]}'")
        self.take()

    def parse(self) -> _Expr:
        expr = self.ternary()
        if self.peek()[0] != "eof":
            raise _syntax(f"mismatched input '{self.peek()[1]}' expecting {_EOF}")
        return expr

    def ternary(self) -> _Expr:
        cond = self.binary(0)
        if self.peek()[1] != "?":
            return cond
        self.take()
        yes = self.binary(0)
        self.expect(":")
        no = self.ternary()
        return _Expr(_CALL, "_?_:_", (cond, yes, no))

    def binary(self, level: int) -> _Expr:
        if level == len(_BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek()[1] in _BINARY[level] and self.peek()[0] in ("op", "ident"):
            op = self.take()[1]
            right = self.binary(level + 1)
            function = "@in" if op == "in" else f"_{op}_"
            left = _Expr(_CALL, function, (left, right))
        return left

    def unary(self) -> _Expr:
        op = self.peek()[1]
        if op in ("!", "-") and self.peek()[0] == "op":
            self.take()
            return _Expr(_CALL, f"{op}_", (self.unary(),))
        return self.member()

    def member(self) -> _Expr:
        expr = self.primary()
        while True:
            op = self.peek()[1]
            if op == ".":
                self.take()
                kind, name = self.take()
                if kind != "ident":
                    raise _syntax(f"no viable alternative at input '.{name}'")
                if self.peek()[1] == "(":
                    self.take()
                    expr = _Expr(_CALL, name, self.arguments(")"), target=expr)
                else:
                    expr = _Expr(_SELECT, name=name, target=expr)
            elif op == "[":
                self.take()
                index = self.ternary()
                self.expect("]")
                expr = _Expr(_CALL, "_[_]", (expr, index))
            else:
                return expr

    def arguments(self, close: str) -> tuple[_Expr, ...]:
        args: list[_Expr] = []
        if self.peek()[1] == close:
            self.take()
            return ()
        if self.peek()[0] == "eof" and close == ")":
            raise _syntax(f"mismatched input '{_EOF}' expecting {{{_STARTS_OR_CLOSE}}}")
        while True:
            args.append(self.ternary())
            if self.peek()[1] == ",":
                self.take()
                continue
            self.expect(close)
            return tuple(args)

    def primary(self) -> _Expr:
        kind, text = self.take()
        if kind == "ident":
            if text in ("true", "false"):
                return _Expr(_LITERAL, value=text == "true", type_name="bool")
            if text == "null":
                return _Expr(_LITERAL, value=None, type_name="null_type")
            if self.peek()[1] == "(":
                self.take()
                return _Expr(_CALL, text, self.arguments(")"))
            return _Expr(_IDENT, name=text)
        if kind == "string":
            return _Expr(_LITERAL, value=_unquote(text), type_name="string")
        if kind == "bytes":
            return _Expr(_LITERAL, value=_unquote(text[1:]), type_name="bytes")
        if kind == "number":
            if text[-1] in "uU":
                return _Expr(_LITERAL, value=int(text[:-1], 0), type_name="uint64")
            if re.fullmatch(r"0x[0-9a-fA-F]+|\d+", text):
                return _Expr(_LITERAL, value=int(text, 0), type_name="int64")
            return _Expr(_LITERAL, value=float(text), type_name="double")
        if text == "(":
            expr = self.ternary()
            self.expect(")")
            return expr
        if text == "[":
            return _Expr(_LIST, args=self.arguments("]"))
        if text == "{":
            depth = 1
            while depth and self.peek()[0] != "eof":
                t = self.take()[1]
                depth += {"{": 1, "}": -1}.get(t, 0)
            if depth:
                raise _syntax(f"missing '}}' at '{_EOF}'")
            return _Expr(_MAP)
        raise _syntax(f"mismatched input '{text}' expecting {{{_STARTS}}}")


# ----- the walk the real server does over the syntax tree -----


def parse_shard_selector(text: str) -> ShardSelector:
    """Parse a non-empty ``shardSelector`` value; raises :class:`ShardSelectorError` with the
    message a 1.36 server answers."""
    if not text.strip():
        raise ShardSelectorError("empty shard selector is not allowed; omit the parameter for unfiltered lists")
    try:
        root = _Parser(text).parse()
    except RecursionError:
        raise _syntax(f"expression recursion limit exceeded: {_MAX_RECURSION}") from None
    found: list[tuple[str, KeyRange]] = []
    _walk(root, found)
    field = found[0][0]
    for other, _ in found[1:]:
        if other != field:
            raise ShardSelectorError(f'all shard ranges must use the same field, got "{field}" and "{other}"')
    return ShardSelector(field, tuple(r for _, r in found))


def _walk(root: _Expr, found: list[tuple[str, KeyRange]]) -> None:
    """Collect the ranges of ``root``'s ``||`` tree in request order (without recursion: a
    scale-out replica's selector chains hundreds of ranges)."""
    pending = [root]
    while pending:
        expr = pending.pop()
        if expr.kind != _CALL:
            raise ShardSelectorError(
                f"unexpected expression kind {expr.kind}; expected shardRange() call or || operator"
            )
        if expr.function == "_||_":
            pending.extend(reversed(expr.args))
            continue
        found.append(_range(expr))


def _range(expr: _Expr) -> tuple[str, KeyRange]:
    if expr.function != "shardRange" or expr.target is not None:
        raise ShardSelectorError(f'unsupported function "{expr.function}"; only shardRange() and || are allowed')
    if len(expr.args) != 3:
        raise ShardSelectorError(f"shardRange() requires exactly 3 arguments, got {len(expr.args)}")
    field = _field_path(expr.args[0])
    if field not in _FIELDS:
        raise ShardSelectorError(f'unsupported field path "{field}"; supported: {", ".join(_FIELDS)}')
    start_text, start = _bound(expr.args[1], "hexStart")
    end_text, end = _bound(expr.args[2], "hexEnd")
    if not start < end:
        raise ShardSelectorError(f"shard range start {start_text} must be less than end {end_text}")
    return field, KeyRange(start, end)


def _field_path(expr: _Expr) -> str:
    parts: list[str] = []
    node: _Expr | None = expr
    while node is not None and node.kind == _SELECT:
        parts.append(node.name)
        node = node.target
    if node is None or node.kind != _IDENT:
        raise ShardSelectorError(
            f"shardRange() first argument: expected field path (e.g. object.metadata.uid), got expression kind {expr.kind}"
        )
    parts.append(node.name)
    return ".".join(reversed(parts))


def _bound(expr: _Expr, name: str) -> tuple[str, int]:
    if expr.kind != _LITERAL or expr.type_name != "string":
        what = expr.type_name if expr.kind == _LITERAL else f"expression kind {expr.kind}"
        raise ShardSelectorError(f"{name} must be a string literal, got {what}")
    text = expr.value
    assert isinstance(text, str)
    if not text.startswith("0x"):
        raise ShardSelectorError(f"{name} must have '0x' prefix, got \"{text}\"")
    digits = text[2:]
    if not digits:
        raise ShardSelectorError(f"{name}: hex value is required after '0x'")
    if len(digits) > 17:
        raise ShardSelectorError(f'{name}: hex value too long ({len(digits)} chars, max 17): "{digits}"')
    for char in digits:
        if char not in "0123456789abcdef":
            raise ShardSelectorError(f'{name}: invalid hex character "{char}" in "{text}"')
    if len(digits) == 17:
        if int(digits, 16) != KEY_SPACE:
            raise ShardSelectorError(f"{name}: 17-digit hex value must be '0x10000000000000000' (2^64), got \"{text}\"")
    elif len(digits) != 16:
        raise ShardSelectorError(
            f'{name} must be a 0x-prefixed 16-digit hex value, got "{text}" (did you mean "0x{digits.zfill(16)}"?)'
        )
    return text, int(digits, 16)
