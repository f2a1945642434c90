"""An OpenAPI v3 schema validator, as the API server runs it on custom objects (layer 0,
schema).

:func:`apply_defaults` and :func:`validate` implement the subset of OpenAPI v3.0 (with the
Kubernetes ``x-kubernetes-*`` extensions) that CRD schemas use. Causes are
:class:`~scheduler.api.errors.FieldCause` values whose path and message read like the API
server's, e.g. ``spec.minMember: Invalid value: -1: spec.minMember in body should be
greater than or equal to 0``. Pure Python, no I/O.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Final, TypeGuard

from scheduler.api.errors import FieldCause

#: The pattern Kubernetes puts on every int-or-string resource quantity in a CRD schema.
QUANTITY_PATTERN: Final = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_TYPES: Final = ("array", "boolean", "integer", "number", "object", "string")
_COMBINATORS: Final = ("allOf", "anyOf", "oneOf", "not")
_ROOT_FIELDS: Final = frozenset({"apiVersion", "kind", "metadata"})
_NOT_DECLARED: Final = "field not declared in schema"
_DATE_TIME: Final = re.compile(
    r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt ]"
    r"([01][0-9]|2[0-3]):[0-5][0-9](:([0-5][0-9]|60)(\.[0-9]+)?)?"
    r"([Zz]|[+-]([01][0-9]|2[0-3]):?[0-5][0-9])?",
    re.ASCII,
)
DNS_SUBDOMAIN: Final = re.compile(
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII
)
DNS_SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)


# --------------------------------------------------------------------------------------------
# The catalog


# --------------------------------------------------------------------------------------------
# Defaulting


def apply_defaults(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of ``obj`` with the schema's ``default`` values filled in.

    As the API server does on create: a field that is absent, or null while not ``nullable``,
    gets its default; defaulting then continues inside it, through ``properties``,
    ``additionalProperties`` and ``items``. Nodes whose value has the wrong type are left as
    they are (validation reports them). ``obj`` and ``schema`` are not changed; the result
    shares nothing with them. Mappings come back as dicts and sequences as lists.
    """
    copied = _thaw(obj)
    if not isinstance(copied, dict):
        return {}
    _fill_defaults(copied, schema)
    return copied


def _thaw(value: Any) -> Any:
    """A deep copy made of plain dicts and lists (``copy.deepcopy`` fails on mapping proxies)."""
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(item) for item in value]
    return value


def _fill_defaults(value: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(value, dict):
        properties = schema.get("properties")
        declared: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        for key, child in declared.items():
            if not isinstance(child, Mapping):
                continue
            absent = key not in value or (value[key] is None and child.get("nullable") is not True)
            if absent and "default" in child:
                value[key] = _thaw(child["default"])
            if key in value:
                _fill_defaults(value[key], child)
        additional = schema.get("additionalProperties")
        if isinstance(additional, Mapping):
            for key, item in value.items():
                if key not in declared:
                    _fill_defaults(item, additional)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for item in value:
                _fill_defaults(item, items)


# --------------------------------------------------------------------------------------------
# Validation


def validate(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> tuple[FieldCause, ...]:
    """Every way ``obj`` breaks ``schema``, sorted by field path (indices in numeric order).

    ``obj`` is a whole API object: ``apiVersion``, ``kind`` and ``metadata`` at its top are
    allowed whether the schema declares them or not, and the fields inside ``metadata`` are
    never reported as undeclared (the API server validates ObjectMeta on its own).

    Supported: ``type`` (object, array, string, integer, number, boolean; an integral number
    is an integer), ``nullable``, ``properties``, ``required``, ``additionalProperties``
    (true, false or a schema), ``items``, ``minimum``/``maximum`` with the OpenAPI v3.0
    boolean ``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``,
    ``minLength``/``maxLength``, ``pattern`` (on strings only), ``enum``,
    ``minItems``/``maxItems``, ``format: date-time`` (a loose RFC 3339 check; other formats
    are ignored), ``allOf``/``anyOf``/``oneOf``/``not``, ``x-kubernetes-int-or-string`` and
    ``x-kubernetes-preserve-unknown-fields``. A field that is not declared, where neither
    ``additionalProperties`` nor preserve-unknown-fields allows it, is a cause
    (``spec.minMembr: field not declared in schema``), as with strict field validation.

    Messages are the API server's: ``spec.minMember: Invalid value: -1: spec.minMember in
    body should be greater than or equal to 0``, ``spec.levels: Required value``. Never
    raises on a bad object; a node under a type error is not looked into further.
    """
    checker = _Validator(whole_object=True)
    try:
        checker.node(obj, schema, "", strict=True)
    except RecursionError:
        checker.causes.append(
            FieldCause("<root>", "Internal error: the object is nested too deeply")
        )
    return _sorted_unique(checker.causes)


class _Validator:
    """One validation run; collects causes instead of stopping at the first."""

    def __init__(self, *, whole_object: bool) -> None:
        self.whole_object = whole_object
        self.causes: list[FieldCause] = []

    def node(self, value: Any, schema: Mapping[str, Any], path: str, *, strict: bool) -> None:
        """Check ``value`` at ``path``; ``strict`` reports undeclared fields."""
        if value is None and schema.get("nullable") is True:
            return
        types = _declared_types(schema)
        if types and not any(_has_type(value, expected) for expected in types):
            actual = _json_type(value)
            self.causes.append(
                _invalid(
                    path,
                    actual,
                    f"{_subject(path)} must be of type {','.join(types)}: {_go_quote(actual)}",
                )
            )
            return
        enum = schema.get("enum")
        if isinstance(enum, list) and not any(_json_equal(value, allowed) for allowed in enum):
            self.causes.append(_unsupported(path, value, enum))
        if isinstance(value, str):
            self._string(value, schema, path)
        elif _is_number(value):
            self._number(value, schema, path)
        elif isinstance(value, list | tuple):
            self._array(value, schema, path, strict=strict)
        elif isinstance(value, Mapping):
            self._object(value, schema, path, strict=strict)
        self._combinators(value, schema, path)

    def _string(self, value: str, schema: Mapping[str, Any], path: str) -> None:
        min_length = schema.get("minLength")
        if _is_int(min_length) and len(value) < min_length:
            self.causes.append(
                _invalid(
                    path,
                    value,
                    f"{_subject(path)} should be at least {min_length} chars long",
                )
            )
        max_length = schema.get("maxLength")
        if _is_int(max_length) and len(value) > max_length:
            unit = "byte" if max_length == 1 else "bytes"
            self.causes.append(
                FieldCause(_name(path), f"Too long: may not be more than {max_length} {unit}")
            )
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            compiled = _compile(pattern)
            if compiled is not None and compiled.search(value) is None:
                self.causes.append(
                    _invalid(path, value, f"{_subject(path)} should match '{pattern}'")
                )
        if schema.get("format") == "date-time" and _DATE_TIME.fullmatch(value) is None:
            self.causes.append(
                _invalid(
                    path,
                    value,
                    f"{_subject(path)} must be of type date-time: {_go_quote(value)}",
                )
            )

    def _number(self, value: float, schema: Mapping[str, Any], path: str) -> None:
        subject = _subject(path)
        maximum = schema.get("maximum")
        if _is_number(maximum):
            exclusive = schema.get("exclusiveMaximum") is True
            if value > maximum or (exclusive and value == maximum):
                relation = "less than" if exclusive else "less than or equal to"
                self.causes.append(
                    _invalid(path, value, f"{subject} should be {relation} {_go_float(maximum)}")
                )
        elif _is_number(schema.get("exclusiveMaximum")):
            bound = schema["exclusiveMaximum"]
            if value >= bound:
                self.causes.append(
                    _invalid(path, value, f"{subject} should be less than {_go_float(bound)}")
                )
        minimum = schema.get("minimum")
        if _is_number(minimum):
            exclusive = schema.get("exclusiveMinimum") is True
            if value < minimum or (exclusive and value == minimum):
                relation = "greater than" if exclusive else "greater than or equal to"
                self.causes.append(
                    _invalid(path, value, f"{subject} should be {relation} {_go_float(minimum)}")
                )
        elif _is_number(schema.get("exclusiveMinimum")):
            bound = schema["exclusiveMinimum"]
            if value <= bound:
                self.causes.append(
                    _invalid(path, value, f"{subject} should be greater than {_go_float(bound)}")
                )
        multiple_of = schema.get("multipleOf")
        if _is_number(multiple_of) and multiple_of > 0:
            if isinstance(value, int) and isinstance(multiple_of, int):
                ok = value % multiple_of == 0
            else:
                quotient = value / multiple_of
                ok = math.isfinite(quotient) and float(quotient).is_integer()
            if not ok:
                self.causes.append(
                    _invalid(
                        path,
                        value,
                        f"{subject} should be a multiple of {_go_float(multiple_of)}",
                    )
                )

    def _array(
        self, value: Sequence[Any], schema: Mapping[str, Any], path: str, *, strict: bool
    ) -> None:
        min_items = schema.get("minItems")
        if _is_int(min_items) and len(value) < min_items:
            self.causes.append(
                _invalid(
                    path,
                    len(value),
                    f"{_subject(path)} should have at least {min_items} items",
                )
            )
        max_items = schema.get("maxItems")
        if _is_int(max_items) and len(value) > max_items:
            noun = "item" if max_items == 1 else "items"
            self.causes.append(
                FieldCause(
                    _name(path), f"Too many: {len(value)}: must have at most {max_items} {noun}"
                )
            )
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                self.node(item, items, f"{path}[{index}]", strict=strict)

    def _object(
        self, value: Mapping[Any, Any], schema: Mapping[str, Any], path: str, *, strict: bool
    ) -> None:
        properties = schema.get("properties")
        declared: Mapping[str, Any] = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        if isinstance(required, list):
            for key in required:
                if key not in value:
                    self.causes.append(_required(_child(path, str(key))))
        additional = schema.get("additionalProperties")
        open_ended = (
            not strict
            or additional is True
            or schema.get("x-kubernetes-preserve-unknown-fields") is True
            or (self.whole_object and path == "metadata")
        )
        for key, item in value.items():
            where = _child(path, str(key))
            child = declared.get(key) if isinstance(key, str) else None
            if isinstance(child, Mapping):
                self.node(item, child, where, strict=strict)
            elif isinstance(additional, Mapping):
                self.node(item, additional, where, strict=strict)
            elif open_ended or (self.whole_object and path == "" and key in _ROOT_FIELDS):
                continue
            else:
                self.causes.append(FieldCause(where, _NOT_DECLARED))

    def _combinators(self, value: Any, schema: Mapping[str, Any], path: str) -> None:
        subject = _subject(path)
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for branch in all_of:
                if isinstance(branch, Mapping):
                    self.node(value, branch, path, strict=False)
        any_of = schema.get("anyOf")
        if isinstance(any_of, list) and any_of:
            failures = [self._trial(value, branch, path) for branch in any_of]
            if all(failures):
                self.causes.append(
                    _invalid(path, value, f"{subject} must validate at least one schema (anyOf)")
                )
                for causes in failures:
                    self.causes.extend(causes)
        one_of = schema.get("oneOf")
        if isinstance(one_of, list) and one_of:
            passing = sum(1 for branch in one_of if not self._trial(value, branch, path))
            if passing != 1:
                self.causes.append(
                    _invalid(
                        path,
                        value,
                        f"{subject} must validate one and only one schema (oneOf)",
                    )
                )
        negated = schema.get("not")
        if isinstance(negated, Mapping) and not self._trial(value, negated, path):
            self.causes.append(
                _invalid(path, value, f"{subject} must not validate the schema (not)")
            )

    def _trial(self, value: Any, branch: Any, path: str) -> list[FieldCause]:
        """The causes ``branch`` alone finds in ``value``; a non-schema branch always fails."""
        if not isinstance(branch, Mapping):
            return [FieldCause(_name(path), "Internal error: a branch is not a schema")]
        trial = _Validator(whole_object=self.whole_object)
        trial.node(value, branch, path, strict=False)
        return trial.causes


def _declared_types(schema: Mapping[str, Any]) -> tuple[str, ...]:
    if schema.get("x-kubernetes-int-or-string") is True:
        return ("integer", "string")
    declared = schema.get("type")
    if isinstance(declared, str) and declared:
        return (declared,)
    return ()


def _json_type(value: Any) -> str:
    """The JSON type name of a decoded value, as the API server names it in messages."""
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
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list | tuple):
        return "array"
    return type(value).__name__


def _has_type(value: Any, expected: str) -> bool:
    actual = _json_type(value)
    if actual == expected:
        return True
    if expected == "number":
        return actual == "integer"
    if expected == "integer" and actual == "number":
        return math.isfinite(value) and float(value).is_integer()
    return False


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_equal(left: Any, right: Any) -> bool:
    """Equality of decoded JSON values: ``True`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, Mapping) and isinstance(right, Mapping):
        return left.keys() == right.keys() and all(_json_equal(left[k], right[k]) for k in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    return type(left) is type(right) and bool(left == right)


@functools.lru_cache(maxsize=256)
def _compile(pattern: str) -> re.Pattern[str] | None:
    """The compiled pattern, or None if it is not a valid regular expression."""
    try:
        return re.compile(pattern)
    except re.error:
        return None


# --------------------------------------------------------------------------------------------
# Causes, worded as the API server words them (k8s.io/apimachinery field.Error)


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _name(path: str) -> str:
    return path or "<root>"


def _subject(path: str) -> str:
    """How a message names the value: ``spec.x in body``, or ``body`` for the whole of it."""
    return f"{path} in body" if path else "body"


def _invalid(path: str, value: Any, detail: str) -> FieldCause:
    return FieldCause(_name(path), f"Invalid value: {_go_value(value)}: {detail}")


def _required(path: str, detail: str = "") -> FieldCause:
    return FieldCause(_name(path), f"Required value: {detail}" if detail else "Required value")


def _unsupported(path: str, value: Any, allowed: Iterable[Any]) -> FieldCause:
    quoted = ", ".join(
        _go_quote(item if isinstance(item, str) else json.dumps(item)) for item in allowed
    )
    return FieldCause(
        _name(path), f"Unsupported value: {_go_value(value)}: supported values: {quoted}"
    )


def _go_quote(text: str) -> str:
    """Close to Go's ``%q``: a double-quoted string with JSON escapes."""
    return json.dumps(text, ensure_ascii=False)


def _go_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: numbers and booleans bare, the rest quoted."""
    if value is None:
        return '"null"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    if isinstance(value, str):
        return _go_quote(value)
    try:
        return json.dumps(_thaw(value), sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _go_float(number: float) -> str:
    """A number as Go's ``%v`` prints a float64: ``0``, ``1.5``, ``1e+06``, ``1e-05``."""
    number = float(number)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    if number == 0:
        return "-0" if math.copysign(1.0, number) < 0 else "0"
    sign = "-" if number < 0 else ""
    parts = Decimal(repr(abs(number))).normalize().as_tuple()
    digits = "".join(map(str, parts.digits))
    assert isinstance(parts.exponent, int)  # finite, checked above
    point = len(digits) + parts.exponent
    exponent = point - 1
    if exponent < -4 or exponent >= 6:
        mantissa = digits[0] + (f".{digits[1:]}" if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return f"{sign}{digits}{'0' * (point - len(digits))}"
    return f"{sign}{digits[:point]}.{digits[point:]}"


def _sorted_unique(causes: Iterable[FieldCause]) -> tuple[FieldCause, ...]:
    """Causes without duplicates, by path (``[10]`` after ``[9]``) then message."""
    unique = dict.fromkeys(causes)
    return tuple(sorted(unique, key=lambda cause: (_natural(cause.field), cause.message)))


def _natural(path: str) -> tuple[tuple[int, str], ...]:
    return tuple(
        (int(part), "") if part.isascii() and part.isdigit() else (-1, part)
        for part in re.split(r"([0-9]+)", path)
    )
