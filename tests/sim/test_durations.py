"""Go-style durations, rates and KIND=VALUE lists."""

from __future__ import annotations

import pytest

from scheduler.api.errors import ConfigError
from scheduler.sim.durations import parse_duration, parse_kind_map, parse_rate
from scheduler.sim.faults import CALL_KINDS


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("2.5", 2.5),
        ("10ms", 0.01),
        ("3s", 3.0),
        ("1m30s", 90.0),
        ("1.5h", 5400.0),
        ("250us", 0.00025),
        ("250\u00b5s", 0.00025),
        ("100ns", 1e-7),
        ("1h2m3s4ms", 3723.004),
        (" +5s ", 5.0),
        (".5s", 0.5),
        ("0s", 0.0),
    ],
    ids=[
        "zero",
        "bare-seconds",
        "ms",
        "s",
        "m-and-s",
        "fractional-h",
        "us",
        "micro-sign",
        "ns",
        "compound",
        "blanks-and-plus",
        "leading-dot",
        "zero-s",
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("-3s", "must not be negative"),
        ("3", None),
        ("3x", "expected a number with a unit"),
        ("s", "expected a number with a unit"),
        ("1m30", "expected a number with a unit"),
        ("1..5s", "expected a number with a unit"),
        ("3 s", "expected a number with a unit"),
    ],
    ids=["empty", "negative", "valid-control", "unknown-unit", "no-number", "trailing-number",
         "two-dots", "inner-blank"],
)  # fmt: skip
def test_parse_duration_errors(text: str, message: str | None) -> None:
    if message is None:
        assert parse_duration(text) == 3.0
        return
    with pytest.raises(ValueError, match=message) as info:
        parse_duration(text)
    assert "\n" not in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", 0.0), ("1", 1.0), ("0.05", 0.05), (" 1.0 ", 1.0)],
    ids=["zero", "one", "fraction", "blanks"],
)
def test_parse_rate(text: str, expected: float) -> None:
    assert parse_rate(text) == expected


@pytest.mark.parametrize(
    "text", ["1.5", "-0.1", "nan", "x", ""], ids=["above-1", "negative", "nan", "word", "empty"]
)
def test_parse_rate_errors(text: str) -> None:
    with pytest.raises(ValueError, match=r"rate"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "parse", "expected"),
    [
        ("delete=3s,bind=10ms", parse_duration, {"delete": 3.0, "bind": 0.01}),
        ("bind=0.1,evict=0.05", parse_rate, {"bind": 0.1, "evict": 0.05}),
        ("", parse_duration, {}),
        (" patch = 1s , ", parse_duration, {"patch": 1.0}),
        ("create=0", parse_rate, {"create": 0.0}),
    ],
    ids=["latencies", "rates", "empty", "blanks-trailing-comma", "zero"],
)
def test_parse_kind_map(text: str, parse: object, expected: dict[str, float]) -> None:
    assert parse_kind_map(text, parse_value=parse, allowed=CALL_KINDS) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "flag", "parse", "field", "message"),
    [
        ("bind", "--api-latency", parse_duration, "bind", "expected KIND=VALUE"),
        ("=3s", "--api-latency", parse_duration, "=3s", "expected KIND=VALUE"),
        ("schedule=3s", "--api-latency", parse_duration, "schedule",
         "unknown kind; one of bind, delete, evict, patch, create"),
        ("bind=1s,bind=2s", "--api-latency", parse_duration, "bind", "given more than once"),
        ("bind=fast", "--api-latency", parse_duration, "bind", "invalid duration 'fast'"),
        ("bind=1.5", "--api-failures", parse_rate, "bind", "must be within [0, 1]"),
        ("evict=-1", "--api-failures", parse_rate, "evict", "must be within [0, 1]"),
    ],
    ids=["no-equals", "no-kind", "unknown-kind", "duplicate", "bad-duration", "rate-above-1",
         "rate-negative"],
)  # fmt: skip
def test_parse_kind_map_errors(
    text: str, flag: str, parse: object, field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_kind_map(text, parse_value=parse, allowed=CALL_KINDS, flag=flag)  # type: ignore[arg-type]
    err = info.value
    assert err.obj == flag
    assert err.field == field
    assert message in err.message
    assert "\n" not in str(err)
    assert str(err).startswith(f"{flag}: {field}: ")
