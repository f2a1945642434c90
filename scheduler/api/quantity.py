"""Kubernetes quantities, parsed exactly (layer 0).

``parse_quantity("1.5Gi")`` returns an exact :class:`fractions.Fraction`; the callers
turn it into integer units: :func:`to_milli` for CPU (as ``Quantity.MilliValue()``,
rounding up) and :func:`to_units` for everything else (as ``Quantity.Value()``, rounding
up). Malformed input raises :class:`QuantityError` naming the object and the field.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from scheduler.api.errors import QuantityError

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_PATTERN = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<bin>[KMGTPE]i)|[eE](?P<exp>[+-]?[0-9]+)|(?P<dec>[numkMGTPE]?))$"
)


def parse_quantity(value: object, *, obj: str = "", field: str = "") -> Fraction:
    """Parse ``value`` (a string, or an int/float as YAML gives them) into an exact Fraction.

    Accepts what the API server accepts: ``100m``, ``1.5``, ``2Gi``, ``500M``, ``1e3``,
    ``0.5Ki``, ``+1``, ``-2``. Raises QuantityError naming ``obj`` and ``field`` otherwise.
    """
    if isinstance(value, bool):
        raise QuantityError(obj, field, f"quantities must be numbers or strings, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(obj, field, f"quantities must be finite, got {value!r}")
        return Fraction(repr(value))
    if not isinstance(value, str):
        raise QuantityError(obj, field, f"quantities must be numbers or strings, got {value!r}")
    m = _PATTERN.match(value.strip())
    if m is None:
        raise QuantityError(
            obj,
            field,
            f"malformed quantity {value!r}; "
            "expected a number with an optional suffix such as 100m, 2Gi, 1e3",
        )
    number = Fraction(m["num"])
    if m["bin"]:
        number *= _BINARY[m["bin"]]
    elif m["exp"] is not None:
        exp = int(m["exp"])
        if abs(exp) > 40:
            raise QuantityError(obj, field, f"quantity {value!r} is out of range")
        number *= Fraction(10) ** exp
    else:
        number *= _DECIMAL[m["dec"] or ""]
    return -number if m["sign"] == "-" else number


def to_milli(q: Fraction) -> int:
    """Milli-units, rounded up as ``Quantity.MilliValue()`` does (``0.0001`` CPU is 1m)."""
    return math.ceil(q * 1000)


def to_units(q: Fraction) -> int:
    """Whole units, rounded up as ``Quantity.Value()`` does (``0.5Ki`` is 512)."""
    return math.ceil(q)


def format_milli(milli: int) -> str:
    """Milli-CPU for people: ``1500`` -> ``"1500m"``, ``2000`` -> ``"2"``."""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def format_bytes(n: int) -> str:
    """Bytes for people, in the largest binary suffix that divides them exactly."""
    for suffix, size in reversed(_BINARY.items()):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)
