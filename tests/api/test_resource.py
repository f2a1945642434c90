"""Tests of scheduler.api.resource: exact integer vectors, their arithmetic and comparisons."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.errors import QuantityError
from scheduler.api.resource import ZERO, Resource, canonical_amount

Gi = 2**30


def R(**amounts: int) -> Resource:
    """``R(cpu=1000, gpu=1)``; ``gpu`` stands for ``nvidia.com/gpu``."""
    return Resource({("nvidia.com/gpu" if k == "gpu" else k): v for k, v in amounts.items()})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"cpu": "500m", "memory": "1Gi"}, R(cpu=500, memory=Gi)),
        ({"cpu": 2}, R(cpu=2000)),
        ({"cpu": "0.0001"}, R(cpu=1)),
        ({"memory": "0.5"}, R(memory=1)),
        ({"nvidia.com/gpu": "2"}, R(gpu=2)),
        ({"pods": 110}, R(pods=110)),
        ({"ephemeral-storage": "1Ki"}, R(**{"ephemeral-storage": 1024})),
        ({"cpu": "0"}, ZERO),
        ({}, ZERO),
        (None, ZERO),
    ],
    ids=[
        "cpu-memory",
        "int-cpu",
        "cpu-rounds-up",
        "bytes-round-up",
        "gpu",
        "pods",
        "ephemeral",
        "zero-dropped",
        "empty",
        "none",
    ],
)
def test_parse(raw: Any, expected: Resource) -> None:
    assert Resource.parse(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"cpu": "-1"}, "Node n1: status.allocatable.cpu: must not be negative, got '-1'"),
        ({"memory": "1..5"}, "Node n1: status.allocatable.memory: malformed quantity '1..5'"),
        (["cpu"], "Node n1: status.allocatable: must be a map of resource name to quantity"),
    ],
    ids=["negative", "malformed", "not-a-map"],
)
def test_parse_refuses(raw: Any, message: str) -> None:
    with pytest.raises(QuantityError) as info:
        Resource.parse(raw, obj="Node n1", field="status.allocatable")
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [("cpu", "1.5", 1500), ("memory", "1Mi", 2**20), ("nvidia.com/gpu", 1, 1), ("pods", "0.1", 1)],
    ids=["cpu-milli", "memory-bytes", "gpu-count", "count-rounds-up"],
)
def test_canonical_amount(name: str, value: object, expected: int) -> None:
    assert canonical_amount(name, value) == expected


@pytest.mark.parametrize(
    ("a", "op", "b", "expected"),
    [
        (R(cpu=1000), "+", R(cpu=500, memory=10), R(cpu=1500, memory=10)),
        (R(cpu=1000), "+", ZERO, R(cpu=1000)),
        (R(cpu=1000, memory=10), "-", R(cpu=1000), R(memory=10)),
        (R(cpu=1000), "-", R(cpu=1500), R(cpu=-500)),
        (R(cpu=1000), "-", R(memory=1), R(cpu=1000, memory=-1)),
        (R(cpu=3, memory=-2), "clamp", None, R(cpu=3)),
        (R(cpu=3, memory=1), "scale", 3, R(cpu=9, memory=3)),
        (R(cpu=3), "scale", 0, ZERO),
        (R(cpu=3, memory=1), "max", R(cpu=1, memory=4, gpu=1), R(cpu=3, memory=4, gpu=1)),
        (R(cpu=3, memory=1), "min", R(cpu=1, gpu=1), R(cpu=1)),
    ],
    ids=[
        "add",
        "add-zero",
        "sub-drops-zero",
        "sub-negative",
        "sub-new-name",
        "clamp",
        "scale",
        "scale-zero",
        "max",
        "min-missing-reads-zero",
    ],
)
def test_arithmetic(a: Resource, op: str, b: Any, expected: Resource) -> None:
    if op == "+":
        got = a + b
    elif op == "-":
        got = a - b
    elif op == "clamp":
        got = a.clamp()
    elif op == "scale":
        got = a.scale(b)
    elif op == "max":
        got = a.max(b)
    else:
        got = a.min(b)
    assert got == expected
    assert isinstance(got, Resource)


def test_arithmetic_leaves_operands_alone() -> None:
    a, b = R(cpu=1), R(cpu=2, memory=3)
    _ = a + b, a - b, a.max(b), a.min(b), a.scale(2), (a - b).clamp()
    assert a == R(cpu=1)
    assert b == R(cpu=2, memory=3)


@pytest.mark.parametrize(
    ("request_", "capacity", "fits", "short"),
    [
        (R(cpu=1000), R(cpu=1000, memory=1), True, []),
        (R(cpu=1001), R(cpu=1000), False, ["cpu"]),
        (R(cpu=1, memory=5), R(cpu=1, memory=4), False, ["memory"]),
        (R(gpu=1), R(cpu=8000, memory=Gi), False, ["nvidia.com/gpu"]),
        (R(cpu=9, memory=9, pods=1), R(pods=1), False, ["cpu", "memory"]),
        (ZERO, ZERO, True, []),
        (ZERO, R(cpu=-1), True, []),
        (R(cpu=1), R(cpu=-1), False, ["cpu"]),
    ],
    ids=[
        "fits",
        "cpu-short",
        "memory-short",
        "missing-name-reads-zero",
        "sorted-names",
        "zero-in-zero",
        "zero-in-negative",
        "negative-capacity",
    ],
)
def test_fits_in_and_insufficient(
    request_: Resource, capacity: Resource, fits: bool, short: list[str]
) -> None:
    assert request_.fits_in(capacity) is fits
    assert request_.insufficient(capacity) == short
    assert request_.fits_in(capacity.to_dict()) is fits  # any mapping will do


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        (R(cpu=1), Resource({"cpu": 1, "memory": 0}), True),
        (R(cpu=1, memory=2), Resource([("memory", 2), ("cpu", 1)]), True),
        (R(cpu=1), R(cpu=2), False),
        (R(cpu=1), R(cpu=1, memory=1), False),
        (ZERO, Resource(), True),
        (ZERO, R(cpu=1) - R(cpu=1), True),
    ],
    ids=[
        "zero-entry-dropped",
        "order-free",
        "amount-differs",
        "name-differs",
        "empty",
        "cancelled",
    ],
)
def test_equality_and_hash(a: Resource, b: Resource, equal: bool) -> None:
    assert (a == b) is equal
    assert (a != b) is not equal
    if equal:
        assert hash(a) == hash(b)
        assert len({a, b}) == 1


@pytest.mark.parametrize(
    ("res", "name", "inside", "amount"),
    [
        (R(cpu=1), "cpu", True, 1),
        (R(cpu=1), "memory", False, 0),
        (Resource({"cpu": 1, "memory": 0}), "memory", False, 0),
        (ZERO, "pods", False, 0),
    ],
    ids=["present", "absent", "zero-is-absent", "empty"],
)
def test_membership_and_lookup(res: Resource, name: str, inside: bool, amount: int) -> None:
    assert (name in res) is inside
    assert res[name] == amount
    assert res.get(name) == amount
    assert (name in list(res)) is inside


def test_mapping_protocol_and_predicates() -> None:
    r = R(cpu=1500, memory=Gi, gpu=2)
    assert len(r) == 3
    assert sorted(r) == ["cpu", "memory", "nvidia.com/gpu"]
    assert r.to_dict() == {"cpu": 1500, "memory": Gi, "nvidia.com/gpu": 2}
    assert r.get("pods", 7) == 7
    assert not r.is_zero()
    assert ZERO.is_zero()
    assert (R(cpu=1) - R(cpu=2)).any_negative()
    assert not r.any_negative()
    assert r.to_quantities() == {"cpu": "1500m", "memory": "1Gi", "nvidia.com/gpu": "2"}
    assert repr(r) == "Resource(cpu=1500m, memory=1Gi, nvidia.com/gpu=2)"
    assert R(cpu=2000).to_quantities() == {"cpu": "2"}
