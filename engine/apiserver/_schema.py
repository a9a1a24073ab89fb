"""CustomResourceDefinition schemas: the structural check, pruning, defaulting and validation.

A version's ``openAPIV3Schema`` is compiled once into a tree of :class:`SchemaNode` (when the
definition is served) and used on every write of its objects, in the order the real API server
uses it: unknown fields are pruned, ``default`` values are applied, then the object is validated.
Validation reproduces the answers of the real server (kube-openapi's validator as wrapped by
apiextensions-apiserver): one :class:`FieldError` per violation, with the real ``reason``,
``field`` and message wording, then the ``x-kubernetes-validations`` rules (CEL, see
:mod:`._cel`) unless a blocking error was found first.

Also here, for the definition itself: :func:`structural_errors`, the rules that make a schema
structural; a definition whose schema breaks them is rejected as the real server rejects it.

Simplified: ``anyOf``/``oneOf``/``allOf``/``not`` report their own failure and the first
alternative's errors (the real server picks the "best" failing alternative); the formats checked
are ``date-time``, ``date``, ``byte``, ``uuid``, ``ipv4``, ``ipv6``, ``cidr`` and ``int32``/
``int64`` (others pass); ``x-kubernetes-list-type`` ``map``/``set`` uniqueness is checked, but
``metadata`` of embedded resources is not validated.
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import decimal
import ipaddress
import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import attrs

from . import _cel

__all__ = [
    "FieldError",
    "SchemaNode",
    "CompiledSchema",
    "compile_schema",
    "structural_errors",
    "go_value",
    "go_float",
    "blocking",
    "check_object",
]

_MISSING: Any = object()


@attrs.frozen
class FieldError:
    """One violation, as the real server's ``field.Error``: a ``Status`` cause."""

    reason: str
    """``FieldValueInvalid``, ``FieldValueRequired``, ``FieldValueTypeInvalid``, ..."""
    field: str
    """The field path, such as ``spec.ports[0].port``; ``<nil>`` for none."""
    message: str
    """The error body, such as ``Required value`` or ``Invalid value: 3: ...``."""

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    @classmethod
    def required(cls, field: str, detail: str = "") -> FieldError:
        return cls("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))

    @classmethod
    def forbidden(cls, field: str, detail: str) -> FieldError:
        return cls("FieldValueForbidden", field, "Forbidden" + (f": {detail}" if detail else ""))

    @classmethod
    def invalid(cls, field: str, value: Any, detail: str, reason: str = "FieldValueInvalid") -> FieldError:
        return cls(reason, field, f"Invalid value: {go_value(value)}" + (f": {detail}" if detail else ""))

    @classmethod
    def invalid_unshown(cls, field: str, detail: str) -> FieldError:
        """``Invalid value: <detail>``: an invalid value the message leaves out, as 1.36 words a
        failed CEL rule on an object or a list."""
        return cls("FieldValueInvalid", field, f"Invalid value: {detail}")

    @classmethod
    def type_invalid(cls, field: str, value: Any, detail: str) -> FieldError:
        return cls.invalid(field, value, detail, "FieldValueTypeInvalid")

    @classmethod
    def not_supported(cls, field: str, value: Any, supported: list[str]) -> FieldError:
        detail = "supported values: " + ", ".join(json.dumps(v, ensure_ascii=False) for v in supported)
        return cls(
            "FieldValueNotSupported",
            field,
            f"Unsupported value: {go_value(value)}" + (f": {detail}" if supported else ""),
        )

    @classmethod
    def too_long(cls, field: str, max_length: int) -> FieldError:
        return cls("FieldValueTooLong", field, f"Too long: may not be more than {max_length} bytes")

    @classmethod
    def too_many(cls, field: str, actual: int, maximum: int) -> FieldError:
        noun = "item" if maximum == 1 else "items"
        return cls("FieldValueTooMany", field, f"Too many: {actual}: must have at most {maximum} {noun}")

    @classmethod
    def duplicate(cls, field: str, value: Any) -> FieldError:
        return cls("FieldValueDuplicate", field, f"Duplicate value: {go_value(value)}")


_BLOCKING = {
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
}


def blocking(errors: list[FieldError]) -> bool:
    """Whether ``errors`` stop CEL rules from being evaluated (as the real server decides)."""
    return any(e.reason in _BLOCKING for e in errors)


def go_float(f: float) -> str:
    """``f`` as Go's ``%v`` prints a float64."""
    if f != f or f in (float("inf"), float("-inf")):
        return {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}[repr(f)]
    if f == 0:
        return "0"
    d = decimal.Decimal(repr(f))
    exp = d.adjusted()
    digits = "".join(map(str, d.as_tuple().digits)).rstrip("0") or "0"
    sign = "-" if f < 0 else ""
    if exp < -4 or exp >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'+' if exp >= 0 else '-'}{abs(exp):02d}"
    return sign + format(abs(d).normalize(), "f")


def go_value(value: Any) -> str:
    """``value`` as kube-apiserver 1.36 prints a bad value in a field error: scalars as Go's
    ``%v`` and JSON strings, ``null``, objects and lists as compact JSON with sorted keys."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return compact_json(value)


def compact_json(value: Any) -> str:
    """``value`` as Go's ``encoding/json`` writes it: no spaces, map keys sorted."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


_NOT_CHECKED = FieldError.invalid(
    "<nil>",
    None,
    "some validation rules were not checked because the object was invalid; correct the existing errors to "
    "complete validation",
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _bound(value: Any, bound: float) -> str:
    if isinstance(value, int) and float(bound).is_integer():
        return str(int(bound))
    return go_float(float(bound))


def _is_date_time(s: str) -> bool:
    try:
        datetime.datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return "T" in s.upper() or " " in s


def _is_date(s: str) -> bool:
    try:
        datetime.date.fromisoformat(s)
    except ValueError:
        return False
    return True


def _is_byte(s: str) -> bool:
    try:
        base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _parses(parser: Callable[[str], object]) -> Callable[[str], bool]:
    def check(s: str) -> bool:
        try:
            parser(s)
        except ValueError:
            return False
        return True

    return check


_FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": _is_date_time,
    "datetime": _is_date_time,
    "date": _is_date,
    "byte": _is_byte,
    "uuid": _parses(uuid.UUID),
    "ipv4": _parses(ipaddress.IPv4Address),
    "ipv6": _parses(ipaddress.IPv6Address),
    "cidr": _parses(lambda s: ipaddress.ip_network(s, strict=False)),
}


@attrs.define(eq=False)
class SchemaNode:
    """One compiled level of a structural schema."""

    types: tuple[str, ...] = ()
    nullable: bool = False
    format: str = ""
    properties: dict[str, SchemaNode] = attrs.Factory(dict)
    additional: SchemaNode | None = None
    additional_allowed: bool | None = None
    items: SchemaNode | None = None
    required: tuple[str, ...] = ()
    enum: list[Any] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    exclusive_maximum: bool = False
    multiple_of: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str = ""
    pattern_re: re.Pattern[str] | None = None
    min_items: int | None = None
    max_items: int | None = None
    min_properties: int | None = None
    max_properties: int | None = None
    preserve_unknown: bool = False
    int_or_string: bool = False
    embedded: bool = False
    default: Any = _MISSING
    list_type: str = ""
    list_map_keys: tuple[str, ...] = ()
    map_type: str = ""
    all_of: tuple[SchemaNode, ...] = ()
    any_of: tuple[SchemaNode, ...] = ()
    one_of: tuple[SchemaNode, ...] = ()
    not_: SchemaNode | None = None
    rules: tuple[_cel.Rule, ...] = ()
    has_rules: bool = False
    """Whether this node or any node below it carries CEL rules."""

    @property
    def schema_type(self) -> str:
        """The declared type, as CEL errors name it (``object``, ``string``, or ``""``)."""
        return self.types[0] if len(self.types) == 1 else ""

    # ----- pruning -----

    def prune(self, value: Any, path: str, unknown: list[str], root: bool = False) -> None:
        """Remove fields the schema does not know from ``value`` in place, appending their paths
        to ``unknown``."""
        if isinstance(value, dict):
            keep_meta = root or self.embedded
            for key in list(value):
                child = self.properties.get(key)
                if child is None and self.additional is not None:
                    child = self.additional
                if child is not None:
                    child.prune(value[key], _join(path, key), unknown)
                elif keep_meta and key in ("apiVersion", "kind", "metadata"):
                    continue
                elif not self.preserve_unknown and self.additional_allowed is not True:
                    unknown.append(_join(path, key))
                    del value[key]
        elif isinstance(value, list) and self.items is not None:
            for i, item in enumerate(value):
                self.items.prune(item, f"{path}[{i}]", unknown)

    # ----- defaulting -----

    def apply_defaults(self, value: Any) -> None:
        """Apply ``default`` values in ``value`` in place, as the real server's defaulter does
        (also replacing ``null`` in non-nullable fields, and dropping such nulls without a
        default)."""
        if isinstance(value, dict):
            for key, child in self.properties.items():
                if key not in value or (value[key] is None and not child.nullable):
                    if child.default is not _MISSING:
                        value[key] = copy.deepcopy(child.default)
                    elif key in value:
                        del value[key]
            for key, item in list(value.items()):
                found = self.properties.get(key) or self.additional
                if found is None:
                    continue
                child = found
                if item is None and not child.nullable and key not in self.properties:
                    if child.default is not _MISSING:
                        value[key] = item = copy.deepcopy(child.default)
                child.apply_defaults(item)
        elif isinstance(value, list) and self.items is not None:
            for i, item in enumerate(value):
                if item is None and not self.items.nullable and self.items.default is not _MISSING:
                    value[i] = item = copy.deepcopy(self.items.default)
                self.items.apply_defaults(item)

    # ----- validation -----

    def validate(self, value: Any, name: str, prefix: str, old: Any = _MISSING) -> list[FieldError]:
        """The violations of ``value`` (named ``name`` in messages, reported under ``prefix``).

        ``old`` is the correlated old value on updates: a value equal to it is not validated
        (ratcheting, as the real server does since 1.30)."""
        if old is not _MISSING and value == old:
            return []
        errors: list[FieldError] = []
        field = _field(prefix, name)
        if value is None:
            if self.types and not self.nullable:
                errors.append(FieldError.type_invalid(field, "null", _type_fail(name, ",".join(self.types), "null")))
            errors.extend(self._check_enum(value, name, field))
            return errors
        vtype = _json_type(value)
        if self.types or self.format:
            self._check_type(value, vtype, name, field, errors)
        errors.extend(self._check_combinators(value, name, prefix, old))
        if isinstance(value, str):
            errors.extend(self._check_string(value, name, field))
        elif vtype in ("integer", "number"):
            errors.extend(self._check_number(value, name, field))
        elif isinstance(value, list):
            errors.extend(self._check_array(value, name, prefix, old))
        errors.extend(self._check_enum(value, name, field))
        if isinstance(value, dict):
            errors.extend(self._check_object(value, name, prefix, old))
        return errors

    def _check_type(self, value: Any, vtype: str, name: str, field: str, errors: list[FieldError]) -> None:
        types = self.types
        value_format = {"integer": "int64", "number": "float64"}.get(vtype, "")
        float_int = vtype == "number" and float(value).is_integer() and "integer" in types
        int_float = vtype == "integer" and "number" in types
        if (
            vtype not in ("string", "array")
            and self.format
            and not (vtype in types or value_format == self.format or float_int or int_float)
        ):
            errors.append(FieldError.type_invalid(field, value_format, _type_fail(name, self.format, value_format)))
        elif types and not (self.format and vtype in ("string", "array") and not {"number", "integer"} & set(types)):
            if not (vtype in types or float_int or int_float):
                errors.append(FieldError.type_invalid(field, vtype, _type_fail(name, ",".join(types), vtype)))

    def _check_combinators(self, value: Any, name: str, prefix: str, old: Any) -> list[FieldError]:
        errors: list[FieldError] = []
        label = f'"{name}" ' if name else ""
        if self.all_of:
            failed = [e for node in self.all_of for e in node.validate(value, name, prefix)]
            if failed:
                errors.append(
                    FieldError.invalid(_field(prefix, name), "", f"{label}must validate all the schemas (allOf)")
                )
                errors.extend(failed)
        if self.any_of:
            results = [node.validate(value, name, prefix) for node in self.any_of]
            if all(results):
                errors.append(
                    FieldError.invalid(_field(prefix, name), "", f"{label}must validate at least one schema (anyOf)")
                )
                errors.extend(results[0])
        if self.one_of:
            results = [node.validate(value, name, prefix) for node in self.one_of]
            passed = sum(1 for r in results if not r)
            if passed != 1:
                errors.append(
                    FieldError.invalid(
                        _field(prefix, name), "", f"{label}must validate one and only one schema (oneOf)"
                    )
                )
                if passed == 0:
                    errors.extend(results[0])
        if self.not_ is not None and not self.not_.validate(value, name, prefix):
            errors.append(FieldError.invalid(_field(prefix, name), "", f"{label}must not validate the schema (not)"))
        return errors

    def _check_string(self, value: str, name: str, field: str) -> list[FieldError]:
        errors: list[FieldError] = []
        if self.max_length is not None and len(value) > self.max_length:
            errors.append(FieldError.too_long(field, self.max_length))
        elif self.min_length is not None and len(value) < self.min_length:
            errors.append(
                FieldError.invalid(field, value, f"{name} in body should be at least {self.min_length} chars long")
            )
        elif self.pattern_re is not None and not self.pattern_re.search(value):
            errors.append(FieldError.invalid(field, value, f"{name} in body should match '{self.pattern}'"))
        check = _FORMATS.get(self.format)
        if check is not None and not check(value):
            errors.append(FieldError.type_invalid(field, value, _type_fail(name, self.format, value)))
        return errors

    def _check_number(self, value: float, name: str, field: str) -> list[FieldError]:
        errors: list[FieldError] = []
        if self.multiple_of is not None and self.multiple_of > 0:
            quotient = value / self.multiple_of
            if not float(quotient).is_integer():
                errors.append(
                    FieldError.invalid(
                        field, value, f"{name} in body should be a multiple of {_bound(value, self.multiple_of)}"
                    )
                )
        if self.minimum is not None:
            low = value <= self.minimum if self.exclusive_minimum else value < self.minimum
            if low:
                how = "greater than" if self.exclusive_minimum else "greater than or equal to"
                errors.append(
                    FieldError.invalid(field, value, f"{name} in body should be {how} {_bound(value, self.minimum)}")
                )
        if self.maximum is not None:
            high = value >= self.maximum if self.exclusive_maximum else value > self.maximum
            if high:
                how = "less than" if self.exclusive_maximum else "less than or equal to"
                errors.append(
                    FieldError.invalid(field, value, f"{name} in body should be {how} {_bound(value, self.maximum)}")
                )
        if self.format in ("int32", "int64") and isinstance(value, int):
            bits = 31 if self.format == "int32" else 63
            if not -(2**bits) <= value < 2**bits:
                errors.append(FieldError.invalid(field, value, f"{name} in body should be a valid {self.format}"))
        return errors

    def _check_array(self, value: list[Any], name: str, prefix: str, old: Any) -> list[FieldError]:
        errors: list[FieldError] = []
        if self.items is not None:
            olds = self._correlate_items(old)
            for i, item in enumerate(value):
                item_old = olds(item) if olds is not None else _MISSING
                errors.extend(self.items.validate(item, f"{name}[{i}]", prefix, item_old))
        field = _field(prefix, name)
        if self.min_items is not None and len(value) < self.min_items:
            errors.append(
                FieldError.invalid(field, len(value), f"{name} in body should have at least {self.min_items} items")
            )
        if self.max_items is not None and len(value) > self.max_items:
            errors.append(FieldError.too_many(field, len(value), self.max_items))
        if self.list_type == "set":
            seen: list[Any] = []
            for i, item in enumerate(value):
                if item in seen:
                    errors.append(FieldError.duplicate(f"{field}[{i}]", item))
                else:
                    seen.append(item)
        elif self.list_type == "map" and self.list_map_keys:
            keys_seen: list[tuple[Any, ...]] = []
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                key = tuple(item.get(k) for k in self.list_map_keys)
                if key in keys_seen:
                    shown = {k: v for k, v in zip(self.list_map_keys, key, strict=True)}
                    errors.append(FieldError.duplicate(f"{field}[{i}]", shown))
                else:
                    keys_seen.append(key)
        return errors

    def _correlate_items(self, old: Any) -> Callable[[Any], Any] | None:
        if not isinstance(old, list) or self.list_type != "map" or not self.list_map_keys:
            return None
        index = {}
        for item in old:
            if isinstance(item, dict):
                index[tuple(json.dumps(item.get(k)) for k in self.list_map_keys)] = item
        keys = self.list_map_keys

        def find(item: Any) -> Any:
            if not isinstance(item, dict):
                return _MISSING
            return index.get(tuple(json.dumps(item.get(k)) for k in keys), _MISSING)

        return find

    def _check_enum(self, value: Any, name: str, field: str) -> list[FieldError]:
        if not self.enum:
            return []
        for allowed in self.enum:
            if _enum_equal(value, allowed):
                return []
        supported = [a if isinstance(a, str) else compact_json(a) for a in self.enum]
        return [FieldError.not_supported(field, value, supported)]

    def _check_object(self, value: dict[str, Any], name: str, prefix: str, old: Any) -> list[FieldError]:
        field = _field(prefix, name)
        count = len(value)
        if self.min_properties is not None and count < self.min_properties:
            return [
                FieldError.invalid(
                    field, self.min_properties, f"{name} in body should have at least {self.min_properties} properties"
                )
            ]
        if self.max_properties is not None and count > self.max_properties:
            return [FieldError.too_many(field, count, self.max_properties)]
        errors: list[FieldError] = []
        olds = old if isinstance(old, dict) else {}
        if self.additional is not None:
            for key, item in value.items():
                if key not in self.properties:
                    errors.extend(self.additional.validate(item, f"{name}.{key}", prefix, olds.get(key, _MISSING)))
        elif self.additional_allowed is False:
            for key in value:
                if key not in self.properties:
                    errors.append(FieldError.invalid(field, key, f"{name}.{key} in body is a forbidden property"))
        for key, child in self.properties.items():
            if key in value:
                errors.extend(child.validate(value[key], _join(name, key), prefix, olds.get(key, _MISSING)))
        for key in self.required:
            if key not in value:
                errors.append(FieldError.required(_field(prefix, _join(name, key))))
        return errors

    # ----- CEL rules -----

    def evaluate_rules(self, value: Any, old: Any, path: str, errors: list[FieldError]) -> None:
        """Evaluate the ``x-kubernetes-validations`` rules on ``value`` and below, appending a
        :class:`FieldError` per failed rule; ``old`` is the correlated old value (``_MISSING``
        when there is none, so transition rules are skipped)."""
        if not self.has_rules or value is None:
            return
        unchanged = old is not _MISSING and value == old
        if self.rules:
            for rule in self.rules:
                if unchanged and not rule.uses_old_self:
                    continue
                failure = rule.check(value, None if old is _MISSING else old, has_old=old is not _MISSING)
                if failure is not None:
                    field = f"{path}.{rule.field_path}" if rule.field_path and path else (rule.field_path or path)
                    errors.append(_rule_error(failure, field or "<nil>", self.schema_type, value))
        if isinstance(value, dict):
            olds = old if isinstance(old, dict) else {}
            for key, item in value.items():
                child = self.properties.get(key)
                if child is not None:
                    child.evaluate_rules(item, olds.get(key, _MISSING), _join(path, key), errors)
                elif self.additional is not None:
                    self.additional.evaluate_rules(item, olds.get(key, _MISSING), f"{path}[{key}]", errors)
        elif isinstance(value, list) and self.items is not None:
            olds_find = self._correlate_items(old)
            for i, item in enumerate(value):
                item_old = olds_find(item) if olds_find is not None else _MISSING
                self.items.evaluate_rules(item, item_old, f"{path}[{i}]", errors)

    def walk(self, path: str) -> Iterator[tuple[str, SchemaNode]]:
        """Every node with its schema path (``properties[spec].items``...), this one first."""
        yield path, self
        for key, child in self.properties.items():
            yield from child.walk(f"{path}.properties[{key}]")
        if self.additional is not None:
            yield from self.additional.walk(f"{path}.additionalProperties")
        if self.items is not None:
            yield from self.items.walk(f"{path}.items")


def _rule_error(failure: _cel.Failure, field: str, schema_type: str, value: Any) -> FieldError:
    """A failed rule's error as 1.36 words it: the value of ``self`` shown when it is a scalar,
    left out when it is an object or a list."""
    if failure.reason == "FieldValueForbidden":
        return FieldError.forbidden(field, failure.message)
    if failure.reason == "FieldValueRequired":
        return FieldError.required(field, failure.message)
    if failure.reason == "FieldValueDuplicate":
        return FieldError.duplicate(field, schema_type)
    if isinstance(value, (dict, list)):
        return FieldError.invalid_unshown(field, failure.message)
    return FieldError.invalid(field, value, failure.message)


def _enum_equal(value: Any, allowed: Any) -> bool:
    if isinstance(value, bool) or isinstance(allowed, bool):
        return value is allowed if isinstance(value, bool) and isinstance(allowed, bool) else False
    if isinstance(value, (int, float)) and isinstance(allowed, (int, float)):
        return bool(value == allowed)
    return bool(value == allowed) and type(value) is type(allowed)


def _type_fail(name: str, type_name: str, value: str) -> str:
    return f"{name} in body must be of type {type_name}: {json.dumps(value, ensure_ascii=False)}"


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _field(prefix: str, name: str) -> str:
    if not name or name == ".":
        return prefix or "<nil>"
    name = name.removeprefix(".")
    return f"{prefix}.{name}" if prefix else name


def _compile(raw: Any) -> SchemaNode:
    if not isinstance(raw, dict):
        return SchemaNode()
    node = SchemaNode()
    type_ = raw.get("type")
    if isinstance(type_, str) and type_:
        node.types = (type_,)
    elif isinstance(type_, list):
        node.types = tuple(str(t) for t in type_)
    node.int_or_string = bool(raw.get("x-kubernetes-int-or-string"))
    if node.int_or_string and not node.types:
        node.types = ("integer", "string")
    node.nullable = bool(raw.get("nullable"))
    node.format = str(raw.get("format") or "")
    props = raw.get("properties")
    if isinstance(props, dict):
        node.properties = {str(k): _compile(v) for k, v in props.items()}
    additional = raw.get("additionalProperties")
    if isinstance(additional, dict):
        node.additional = _compile(additional)
    elif isinstance(additional, bool):
        node.additional_allowed = additional
    if isinstance(raw.get("items"), dict):
        node.items = _compile(raw["items"])
    node.required = tuple(str(r) for r in raw.get("required") or ())
    if isinstance(raw.get("enum"), list):
        node.enum = list(raw["enum"])
    for attr, key in (("minimum", "minimum"), ("maximum", "maximum"), ("multiple_of", "multipleOf")):
        if isinstance(raw.get(key), (int, float)) and not isinstance(raw.get(key), bool):
            setattr(node, attr, raw[key])
    node.exclusive_minimum = bool(raw.get("exclusiveMinimum"))
    node.exclusive_maximum = bool(raw.get("exclusiveMaximum"))
    for attr, key in (
        ("min_length", "minLength"),
        ("max_length", "maxLength"),
        ("min_items", "minItems"),
        ("max_items", "maxItems"),
        ("min_properties", "minProperties"),
        ("max_properties", "maxProperties"),
    ):
        if isinstance(raw.get(key), int) and not isinstance(raw.get(key), bool):
            setattr(node, attr, raw[key])
    if isinstance(raw.get("pattern"), str) and raw["pattern"]:
        node.pattern = raw["pattern"]
        try:
            node.pattern_re = re.compile(raw["pattern"])
        except re.error:
            node.pattern_re = None
    node.preserve_unknown = bool(raw.get("x-kubernetes-preserve-unknown-fields"))
    node.embedded = bool(raw.get("x-kubernetes-embedded-resource"))
    if "default" in raw:
        node.default = copy.deepcopy(raw["default"])
    node.list_type = str(raw.get("x-kubernetes-list-type") or "")
    node.list_map_keys = tuple(str(k) for k in raw.get("x-kubernetes-list-map-keys") or ())
    node.map_type = str(raw.get("x-kubernetes-map-type") or "")
    node.all_of = tuple(_compile(s) for s in raw.get("allOf") or ())
    node.any_of = tuple(_compile(s) for s in raw.get("anyOf") or () if not _is_int_or_string_branch(raw, s))
    node.one_of = tuple(_compile(s) for s in raw.get("oneOf") or ())
    if isinstance(raw.get("not"), dict):
        node.not_ = _compile(raw["not"])
    rules = raw.get("x-kubernetes-validations")
    if isinstance(rules, list):
        node.rules = tuple(_cel.Rule.from_spec(r) for r in rules if isinstance(r, dict))
    node.has_rules = bool(node.rules) or any(
        c.has_rules for c in (*node.properties.values(), node.additional, node.items) if c is not None
    )
    return node


def _is_int_or_string_branch(raw: dict[str, Any], branch: Any) -> bool:
    return bool(raw.get("x-kubernetes-int-or-string")) and isinstance(branch, dict) and set(branch) == {"type"}


@attrs.frozen(eq=False)
class CompiledSchema:
    """A version's ``openAPIV3Schema``, compiled once and used on every write."""

    root: SchemaNode

    @property
    def status(self) -> SchemaNode | None:
        """The schema of ``status`` (what the status subresource validates), if declared."""
        return self.root.properties.get("status")

    def prune_and_default(self, obj: dict[str, Any]) -> list[str]:
        """Prune unknown fields and apply defaults in place; returns the pruned fields' paths."""
        unknown: list[str] = []
        self.root.prune(obj, "", unknown, root=True)
        self.root.apply_defaults(obj)
        return sorted(unknown)

    def validate(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[FieldError]:
        """Schema violations of the whole object (everything but ``metadata``, ``apiVersion``
        and ``kind``)."""
        body = {k: v for k, v in obj.items() if k not in ("metadata", "apiVersion", "kind")}
        old_body: Any = _MISSING
        if old is not None:
            old_body = {k: v for k, v in old.items() if k not in ("metadata", "apiVersion", "kind")}
        root = attrs.evolve(
            self.root,
            properties={k: v for k, v in self.root.properties.items() if k not in ("metadata", "apiVersion", "kind")},
            rules=(),
        )
        return root.validate(body, "", "", old_body)

    def validate_status(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
        """Violations of ``status`` alone, as the status subresource reports them."""
        status = self.status
        if status is None or "status" not in obj:
            return []
        previous = old.get("status", _MISSING) if old is not None else _MISSING
        return status.validate(obj["status"], "", "status", previous)

    def evaluate_rules(self, obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
        """Failures of the ``x-kubernetes-validations`` rules, the whole object as the root's
        ``self``."""
        errors: list[FieldError] = []
        self.root.evaluate_rules(obj, _MISSING if old is None else old, "", errors)
        return errors

    @property
    def has_rules(self) -> bool:
        """Whether any level carries CEL rules (the real server then reports unchecked rules)."""
        return self.root.has_rules


def compile_schema(openapi: Any) -> CompiledSchema:
    """Compile a version's ``openAPIV3Schema``; never fails (see :func:`structural_errors`)."""
    return CompiledSchema(_compile(openapi))


def check_object(
    schema: CompiledSchema, obj: dict[str, Any], old: dict[str, Any] | None, *, status_only: bool
) -> list[FieldError]:
    """Schema validation then CEL rules, with the real server's blocking rule between them."""
    errors = schema.validate_status(obj, old) if status_only else schema.validate(obj, old)
    if schema.has_rules:
        if blocking(errors):
            errors.append(_NOT_CHECKED)
        else:
            errors.extend(schema.evaluate_rules(obj, old))
    return errors


# ----- the structural check, for the definition itself -----

_LEVEL_TEXT = {
    "root": "must not be empty at the root",
    "item": "must not be empty for specified array items",
    "field": "must not be empty for specified object fields",
}


def structural_errors(openapi: Any, path: str) -> list[FieldError]:
    """What makes ``openapi`` non-structural (or otherwise unacceptable), as the real server
    words it, sorted as it sorts them; ``path`` is where the schema sits in the definition."""
    errors: list[FieldError] = []
    if not isinstance(openapi, dict):
        return [FieldError.required(path, "schemas are required")]
    _structural(openapi, "root", path, errors)
    errors.sort(key=str)
    if not errors:
        errors.extend(_default_errors(openapi, path))
        errors.extend(_rule_compile_errors(openapi, path))
    return errors


def _structural(raw: dict[str, Any], level: str, path: str, errors: list[FieldError]) -> None:
    type_ = raw.get("type")
    if type_ == "array" and not isinstance(raw.get("items"), dict):
        errors.append(FieldError.required(f"{path}.items", "must be specified"))
    if isinstance(raw.get("items"), dict):
        _structural(raw["items"], "item", f"{path}.items", errors)
    for key, prop in (raw.get("properties") or {}).items():
        if isinstance(prop, dict):
            _structural(prop, "field", f"{path}.properties[{key}]", errors)
    additional = raw.get("additionalProperties")
    if additional is not None and additional is not False:
        if level == "root":
            errors.append(FieldError.forbidden(f"{path}.additionalProperties", "must not be used at the root"))
        if isinstance(additional, dict):
            _structural(additional, "field", f"{path}.additionalProperties", errors)
            if raw.get("properties"):
                errors.append(
                    FieldError.forbidden(
                        f"{path}.additionalProperties", "additionalProperties and properties are mutual exclusive"
                    )
                )
    if raw.get("x-kubernetes-int-or-string") and raw.get("x-kubernetes-preserve-unknown-fields"):
        errors.append(
            FieldError.invalid(
                f"{path}.x-kubernetes-preserve-unknown-fields",
                True,
                "must be false if x-kubernetes-int-or-string is true",
            )
        )
    for combinator in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(raw.get(combinator) or ()):
            if isinstance(sub, dict) and not _is_int_or_string_branch(raw, sub):
                _nested(sub, f"{path}.{combinator}[{i}]", errors)
    if isinstance(raw.get("not"), dict):
        _nested(raw["not"], f"{path}.not", errors)
    embedded = bool(raw.get("x-kubernetes-embedded-resource"))
    if embedded and type_ != "object":
        if not type_:
            errors.append(
                FieldError.required(f"{path}.type", "must be object if x-kubernetes-embedded-resource is true")
            )
        else:
            errors.append(
                FieldError.invalid(f"{path}.type", type_, "must be object if x-kubernetes-embedded-resource is true")
            )
    elif (
        not type_ and not raw.get("x-kubernetes-int-or-string") and not raw.get("x-kubernetes-preserve-unknown-fields")
    ):
        errors.append(FieldError.required(f"{path}.type", _LEVEL_TEXT[level]))
    if level == "root" and type_ and type_ != "object":
        errors.append(FieldError.invalid(f"{path}.type", type_, "must be object at the root"))
    props = raw.get("properties") or {}
    if level == "root" and isinstance(props.get("metadata"), dict):
        metadata = props["metadata"]
        if metadata.get("type") not in (None, "object"):
            errors.append(
                FieldError.invalid(f"{path}.properties[metadata].type", metadata.get("type"), "must be object")
            )
        extra = set(metadata) - {"type", "properties", "description"}
        names = set(metadata.get("properties") or {})
        if extra or not names <= {"name", "generateName"}:
            errors.append(
                FieldError.forbidden(
                    f"{path}.properties[metadata]",
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                )
            )
    if level == "root":
        for key in ("kind", "apiVersion"):
            if isinstance(props.get(key), dict) and props[key].get("type") != "string":
                errors.append(
                    FieldError.invalid(f"{path}.properties[{key}].type", props[key].get("type", ""), "must be string")
                )
    if isinstance(raw.get("pattern"), str):
        try:
            re.compile(raw["pattern"])
        except re.error as exc:
            errors.append(
                FieldError.invalid(
                    f"{path}.pattern", raw["pattern"], f"must be a valid regular expression, but isn't: {exc}"
                )
            )


_NESTED_FORBIDDEN = (
    ("type", "must be empty to be structural"),
    ("additionalProperties", "must be undefined to be structural"),
    ("default", "must be undefined to be structural"),
    ("title", "must be empty to be structural"),
    ("description", "must be empty to be structural"),
    ("nullable", "must be false to be structural"),
    ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
    ("x-kubernetes-embedded-resource", "must be false to be structural"),
    ("x-kubernetes-int-or-string", "must be false to be structural"),
    ("x-kubernetes-list-map-keys", "must be empty to be structural"),
    ("x-kubernetes-list-type", "must be undefined to be structural"),
    ("x-kubernetes-map-type", "must be undefined to be structural"),
    ("x-kubernetes-validations", "must be empty to be structural"),
)


def _nested(raw: dict[str, Any], path: str, errors: list[FieldError]) -> None:
    for key, text in _NESTED_FORBIDDEN:
        if raw.get(key) not in (None, False, "", [], {}):
            errors.append(FieldError.forbidden(f"{path}.{key}", text))
    for key, prop in (raw.get("properties") or {}).items():
        if isinstance(prop, dict):
            _nested(prop, f"{path}.properties[{key}]", errors)
    if isinstance(raw.get("items"), dict):
        _nested(raw["items"], f"{path}.items", errors)


def _default_errors(openapi: dict[str, Any], path: str) -> list[FieldError]:
    """A ``default`` must validate against its own schema level."""
    errors: list[FieldError] = []
    root = _compile(openapi)
    for schema_path, node in root.walk(path):
        if node.default is _MISSING or schema_path == path:
            continue
        value = copy.deepcopy(node.default)
        unknown: list[str] = []
        node.prune(value, "", unknown)
        node.apply_defaults(value)
        for error in node.validate(value, "", f"{schema_path}.default"):
            errors.append(error)
    return errors


def _rule_compile_errors(openapi: dict[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    for schema_path, node in _compile(openapi).walk(path):
        for i, rule in enumerate(node.rules):
            problem = rule.compile_error()
            if problem is not None:
                errors.append(
                    FieldError.invalid(f"{schema_path}.x-kubernetes-validations[{i}].rule", rule.rule, problem)
                )
    return errors
