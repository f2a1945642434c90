"""CEL device selectors, compiled once per expression (layer 0).

Kubernetes selects devices with CEL expressions over ``device.driver``,
``device.attributes["domain"].id`` and ``device.capacity["domain"].id``. Sluice evaluates
them with the ``common-expression-language`` package (Python bindings of a CEL
interpreter written in Rust), measured against ``cel-python`` on the selectors of
kube's own tests (``bench/cel_libraries.py``): both pass the same cases, and it evaluates
a selector in about 1.5 µs against 420 µs once a device's variables are built.

Kubernetes' CEL library is partly rebuilt here as ordinary functions: ``quantity``,
``isQuantity``, ``semver``, ``isSemver``, and on quantities and versions
``isGreaterThan``, ``isLessThan``, ``compareTo``, plus ``add``, ``sub``, ``asInteger``,
``asApproximateFloat``, ``isInteger``, ``sign`` (quantities) and ``major``, ``minor``,
``patch`` (versions); and the cel-go string and list extensions the package ships
(``split``, ``lowerAscii``, ``join``...). A quantity or a version is a CEL map with one
key (``__quantity__`` holding the exact value as a fraction, ``__semver__`` the
version), so ``==`` compares them by value. What differs from kube-scheduler: types are
not checked when compiling (an expression that yields a non-bool fails when evaluated,
saying so); ``cel.bind`` is not available; a missing attribute domain is an error in
``has()`` as anywhere else (kube reads it as an empty map there).

:class:`SelectorCache` compiles each expression once and keeps its error; the
:class:`~scheduler.api.dra.inventory.Inventory` builds each device's variables once.
The ``cel`` module is imported on first use: clusters without DRA never load it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from scheduler.api.dra.model import Device, Version
from scheduler.api.errors import QuantityError
from scheduler.api.quantity import parse_quantity

_QUANTITY = "__quantity__"
_SEMVER = "__semver__"
_SEMVER_PATTERN = re.compile(
    r"^v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$"
)


class SelectorError(Exception):
    """A selector that does not compile, or that fails on a device (message for users)."""


# Kubernetes CEL library: quantities and versions -----------------------------------------


def _quantity_value(q: Fraction) -> dict[str, str]:
    text = str(q.numerator) if q.denominator == 1 else f"{q.numerator}/{q.denominator}"
    return {_QUANTITY: text}


def quantity_of(q: Fraction) -> dict[str, str]:
    """The CEL value of the quantity ``q``."""
    return _quantity_value(q)


def _as_fraction(value: object) -> Fraction:
    if isinstance(value, Mapping) and _QUANTITY in value:
        return Fraction(str(value[_QUANTITY]))
    raise ValueError(f"expected a quantity, got {value!r}")


def _parse_semver(text: str, normalize: bool = False) -> tuple[int, int, int, str]:
    if normalize:
        text = text.removeprefix("v")
        parts = text.split("-", 1)[0].split("+", 1)[0].split(".")
        while len(parts) < 3:
            parts.append("0")
        core = ".".join(str(int(p)) if p.isdigit() else p for p in parts)
        rest = text[len(text.split("-", 1)[0].split("+", 1)[0]) :]
        text = core + rest
    m = _SEMVER_PATTERN.match(text)
    if m is None or text.startswith("v"):
        raise ValueError(f"invalid semantic version {text!r}")
    return int(m[1]), int(m[2]), int(m[3]), m[4] or ""


def version_of(v: Version) -> dict[str, str]:
    """The CEL value of the version attribute ``v``."""
    return {_SEMVER: v.text}


SemverKey = tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]


def _semver_key(value: object) -> SemverKey:
    if not (isinstance(value, Mapping) and _SEMVER in value):
        raise ValueError(f"expected a semver, got {value!r}")
    major, minor, patch, pre = _parse_semver(str(value[_SEMVER]))
    # A release sorts after its pre-releases; identifiers compare numerically when numeric.
    ids = tuple((0, int(p)) if p.isdigit() else (1, p) for p in pre.split(".")) if pre else ()
    return (major, minor, patch, 0 if pre else 1, ids)


def _compare(a: object, b: object) -> int:
    if isinstance(a, Mapping) and _QUANTITY in a:
        x, y = _as_fraction(a), _as_fraction(b)
    else:
        x, y = _semver_key(a), _semver_key(b)  # type: ignore[assignment]
    return (x > y) - (x < y)


def _quantity(text: str) -> dict[str, str]:
    try:
        return _quantity_value(parse_quantity(text))
    except QuantityError as exc:
        raise ValueError(f"invalid quantity {text!r}") from exc


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _semver(text: str, normalize: bool = False) -> dict[str, str]:
    major, minor, patch, pre = _parse_semver(text, normalize)
    return {_SEMVER: f"{major}.{minor}.{patch}" + (f"-{pre}" if pre else "")}


def _is_semver(text: str, normalize: bool = False) -> bool:
    try:
        _parse_semver(text, normalize)
    except ValueError:
        return False
    return True


def _as_integer(q: object) -> int:
    f = _as_fraction(q)
    if f.denominator != 1 or abs(f) >= 2**63:
        raise ValueError(f"quantity {q!r} is not an integer in 64 bits")
    return f.numerator


def _part(index: int) -> Callable[[object], int]:
    def part(v: object) -> int:
        return _semver_key(v)[:3][index]

    return part


KUBERNETES_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "semver": _semver,
    "isSemver": _is_semver,
    "isGreaterThan": lambda a, b: _compare(a, b) > 0,
    "isLessThan": lambda a, b: _compare(a, b) < 0,
    "compareTo": _compare,
    "add": lambda a, b: _quantity_value(
        _as_fraction(a) + (Fraction(b) if isinstance(b, int) else _as_fraction(b))
    ),
    "sub": lambda a, b: _quantity_value(
        _as_fraction(a) - (Fraction(b) if isinstance(b, int) else _as_fraction(b))
    ),
    "asInteger": _as_integer,
    "asApproximateFloat": lambda q: float(_as_fraction(q)),
    "isInteger": lambda q: _as_fraction(q).denominator == 1 and abs(_as_fraction(q)) < 2**63,
    "sign": lambda q: (_as_fraction(q) > 0) - (_as_fraction(q) < 0),
    "major": _part(0),
    "minor": _part(1),
    "patch": _part(2),
}
"""The functions of Kubernetes' CEL library that device selectors use, by name."""


# Compiling and evaluating ------------------------------------------------------------------


def _cel() -> Any:
    """The ``cel`` module (imported on first use: it takes about 0.4 s)."""
    return importlib.import_module("cel")


@dataclass(frozen=True, slots=True)
class Selector:
    """One compiled expression, or why it does not compile (``error``)."""

    expression: str
    program: Any = None
    error: str = ""

    def matches(self, context: Any) -> bool:
        """Does the device of ``context`` (from :func:`device_context`) match? Raises
        SelectorError when the expression fails on it or yields no bool."""
        try:
            out = self.program.execute(context)
        except Exception as exc:  # the library raises KeyError, RuntimeError, ValueError
            text = str(exc)
            if isinstance(exc, KeyError):
                text = f"no such key: {text.strip(repr(''))}"
            raise SelectorError(f"CEL runtime error: {text}") from exc
        if not isinstance(out, bool):
            raise SelectorError(f"must evaluate to bool, not {type(out).__name__}")
        return out


class SelectorCache:
    """Compiled selectors by expression: each compiled once, its error kept. Long-lived
    (the cache keeps one with its inventory); not thread-safe."""

    def __init__(self) -> None:
        self._compiled: dict[str, Selector] = {}

    def get(self, expression: str) -> Selector:
        found = self._compiled.get(expression)
        if found is None:
            found = self._compile(expression)
            self._compiled[expression] = found
        return found

    @staticmethod
    def _compile(expression: str) -> Selector:
        try:
            program = _cel().compile(expression)
        except Exception as exc:  # ValueError for a syntax error
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return Selector(expression, error=f"CEL compile error: {first}")
        return Selector(expression, program)


def _attribute_value(value: object) -> object:
    if isinstance(value, Version):
        return version_of(value)
    if isinstance(value, tuple):
        return [_attribute_value(v) for v in value]
    return value


def _nested(flat: Mapping[str, object], convert: Callable[[Any], object]) -> dict[str, Any]:
    out: dict[str, dict[str, object]] = {}
    for name, value in flat.items():
        domain, _, ident = name.rpartition("/")
        out.setdefault(domain, {})[ident] = convert(value)
    return out


def device_context(device: Device) -> Any:
    """The CEL variables of ``device`` (``device.driver``, ``.attributes``, ``.capacity``),
    with the functions selectors may call: built once per device and reused."""
    cel = _cel()
    variables = {
        "device": {
            "driver": device.id.driver,
            "attributes": _nested(device.attributes, _attribute_value),
            "capacity": _nested(device.capacity, quantity_of),
            "allowMultipleAllocations": False,
        }
    }
    context = cel.Context(variables=variables)
    cel.stdlib.add_stdlib_to_context(context)
    for name, fn in KUBERNETES_FUNCTIONS.items():
        context.add_function(name, fn)
    return context
