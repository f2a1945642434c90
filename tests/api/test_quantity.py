"""Tests of scheduler.api.quantity: exact parsing, rounding up, and refusals naming the field."""

from __future__ import annotations

from fractions import Fraction

import pytest

from scheduler.api.errors import InvalidInputError, QuantityError
from scheduler.api.quantity import (
    format_bytes,
    format_milli,
    parse_quantity,
    to_milli,
    to_units,
)

Ki, Mi, Gi = 2**10, 2**20, 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("2Gi", 2 * Gi),
        ("500M", 500 * 10**6),
        ("1e3", 1000),
        ("1E3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("1e+2", 100),
        ("0.5Ki", 512),
        ("1.5Mi", 3 * Mi // 2),
        ("+1", 1),
        ("-2", -2),
        (".5", Fraction(1, 2)),
        ("1.", 1),
        ("0", 0),
        ("5n", Fraction(5, 10**9)),
        ("3u", Fraction(3, 10**6)),
        ("1k", 1000),
        ("2G", 2 * 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        (" 250m ", Fraction(1, 4)),
        (3, 3),
        (1.5, Fraction(3, 2)),
        (0.1, Fraction(1, 10)),
    ],
    ids=lambda v: repr(v) if not isinstance(v, Fraction | int) else None,
)
def test_parse_accepts(text: object, expected: Fraction | int) -> None:
    got = parse_quantity(text)
    assert got == expected
    assert isinstance(got, Fraction)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1..5", "malformed quantity '1..5'"),
        ("12x", "malformed quantity '12x'"),
        ("--1", "malformed quantity '--1'"),
        ("", "malformed quantity ''"),
        ("Gi", "malformed quantity 'Gi'"),
        ("1Gi5", "malformed quantity '1Gi5'"),
        ("1K", "malformed quantity '1K'"),
        ("e3", "malformed quantity 'e3'"),
        ("1e", "malformed quantity '1e'"),
        ("0x10", "malformed quantity '0x10'"),
        ("1 Gi", "malformed quantity '1 Gi'"),
        (".", "malformed quantity '.'"),
        ("1e41", "out of range"),
        (True, "quantities must be numbers or strings, got True"),
        (None, "quantities must be numbers or strings, got None"),
        ([1], "quantities must be numbers or strings"),
        (float("inf"), "quantities must be finite"),
        (float("nan"), "quantities must be finite"),
    ],
    ids=[
        "double-dot",
        "bad-suffix",
        "double-sign",
        "empty",
        "suffix-only",
        "trailing-digits",
        "uppercase-k",
        "exponent-only",
        "dangling-exponent",
        "hex",
        "inner-space",
        "dot-only",
        "exponent-out-of-range",
        "bool",
        "none",
        "list",
        "inf",
        "nan",
    ],
)
def test_parse_refuses_naming_object_and_field(value: object, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(
            value, obj="Pod default/p", field="spec.containers[0].resources.requests.cpu"
        )
    text = str(info.value)
    assert text.startswith("Pod default/p: spec.containers[0].resources.requests.cpu: ")
    assert message in text
    assert "\n" not in text
    assert isinstance(info.value, InvalidInputError)
    assert info.value.obj == "Pod default/p"
    assert info.value.field == "spec.containers[0].resources.requests.cpu"


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("100m", 100),
        ("1", 1000),
        ("1.5", 1500),
        ("0.0001", 1),  # rounds up, as Quantity.MilliValue()
        ("0.0011", 2),
        ("1n", 1),
        ("250u", 1),
        ("1001u", 2),
        ("2e-3", 2),
        ("0", 0),
    ],
    ids=str,
)
def test_to_milli_rounds_up(text: str, milli: int) -> None:
    assert to_milli(parse_quantity(text)) == milli


@pytest.mark.parametrize(
    ("text", "units"),
    [
        ("1Gi", Gi),
        ("0.5Ki", 512),
        ("0.5", 1),  # rounds up, as Quantity.Value()
        ("100m", 1),
        ("1.0001", 2),
        ("1500m", 2),
        ("500M", 500_000_000),
        ("1e3", 1000),
        ("0", 0),
    ],
    ids=str,
)
def test_to_units_rounds_up(text: str, units: int) -> None:
    assert to_units(parse_quantity(text)) == units


@pytest.mark.parametrize(
    ("milli", "text"),
    [(1500, "1500m"), (2000, "2"), (0, "0"), (1, "1m")],
    ids=["fraction", "whole", "zero", "one-milli"],
)
def test_format_milli(milli: int, text: str) -> None:
    assert format_milli(milli) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(Gi, "1Gi"), (3 * Mi, "3Mi"), (1536 * Mi, "1536Mi"), (1000, "1000"), (0, "0"), (Ki, "1Ki")],
    ids=["gi", "mi", "not-whole-gi", "decimal", "zero", "ki"],
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text
