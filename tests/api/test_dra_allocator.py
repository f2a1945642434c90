"""The structured allocator: selectors, counts, All, firstAvailable, matchAttribute, pool
generations, devices in use; one table, each row a cluster, claims and the expected
devices (or the reason)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from scheduler.api.dra.allocator import allocate
from scheduler.api.dra.codec import (
    claim_from_object,
    device_class_from_object,
    slice_from_object,
)
from scheduler.api.dra.inventory import Inventory
from tests.dra_builders import (
    claim,
    device,
    device_class,
    first_available,
    gpus,
    request,
    resource_slice,
)

A100 = 'device.attributes["gpu.example.com"].model == "a100"'
BIG = 'device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("40Gi"))'


def inventory(
    slices: Sequence[dict[str, Any]], classes: Sequence[dict[str, Any]] = ()
) -> Inventory:
    return Inventory(
        {s["metadata"]["name"]: slice_from_object(s) for s in slices},
        {c["metadata"]["name"]: device_class_from_object(c) for c in (classes or [device_class()])},
    )


MIXED = [
    resource_slice(
        "n1",
        [
            device("gpu-0", model="h100", memory="80Gi", numa=0),
            device("gpu-1", model="a100", memory="40Gi", numa=0),
            device("gpu-2", model="a100", memory="80Gi", numa=1),
            device("gpu-3", model="a100", memory="80Gi", numa=1),
        ],
        node="n1",
    )
]

CASES = [
    pytest.param(
        MIXED, [claim("c", request(count=2))], (), [["gpu-0", "gpu-1"]], id="count-2-first-devices"
    ),
    pytest.param(
        MIXED, [claim("c", request(count=5))], (), "no matching device", id="count-above-node"
    ),
    pytest.param(
        MIXED, [claim("c", request(selectors=[A100]))], (), [["gpu-1"]], id="selector-string"
    ),
    pytest.param(
        MIXED,
        [claim("c", request(count=2, selectors=[A100, BIG]))],
        (),
        [["gpu-2", "gpu-3"]],
        id="selector-quantity",
    ),
    pytest.param(
        MIXED,
        [claim("c", request(all_devices=True, selectors=[A100]))],
        (),
        [["gpu-1", "gpu-2", "gpu-3"]],
        id="all-matching",
    ),
    pytest.param(
        MIXED, [claim("c", request(all_devices=True))], ("gpu-3",), "in use", id="all-one-in-use"
    ),
    pytest.param(
        MIXED,
        [claim("c", request(count=2))],
        ("gpu-0", "gpu-1"),
        [["gpu-2", "gpu-3"]],
        id="skips-in-use",
    ),
    pytest.param(
        MIXED,
        [claim("c", request(count=2))],
        ("gpu-0", "gpu-1", "gpu-2"),
        "matching devices are in use",
        id="in-use-resolvable",
    ),
    pytest.param(
        MIXED,
        [
            claim(
                "c",
                request("a", count=1),
                request("b", count=1),
                match_attribute="gpu.example.com/numa",
            )
        ],
        (),
        [["gpu-0", "gpu-1"]],
        id="match-attribute-numa0",
    ),
    pytest.param(
        MIXED,
        [
            claim(
                "c",
                request("a", count=1),
                request("b", count=1),
                match_attribute="gpu.example.com/numa",
            )
        ],
        ("gpu-1",),
        [["gpu-2", "gpu-3"]],
        id="match-attribute-backtracks",
    ),
    pytest.param(
        MIXED,
        [claim("c", request(count=3), match_attribute="gpu.example.com/numa")],
        (),
        "constraints not satisfied",
        id="match-attribute-impossible",
    ),
    pytest.param(
        MIXED,
        [claim("c", first_available("gpu", request("big", count=4), request("small", count=2)))],
        ("gpu-0",),
        [["gpu-1", "gpu-2"]],
        id="first-available-second",
    ),
    pytest.param(
        MIXED,
        [claim("c", first_available("gpu", request("big", count=4), request("small", count=2)))],
        (),
        [["gpu-0", "gpu-1", "gpu-2", "gpu-3"]],
        id="first-available-first",
    ),
    pytest.param(
        MIXED,
        [claim("c1", request(count=3)), claim("c2", request(count=1, selectors=[A100]))],
        (),
        [["gpu-0", "gpu-1", "gpu-2"], ["gpu-3"]],
        id="two-claims-distinct-devices",
    ),
    pytest.param(
        MIXED,
        [claim("c1", request(count=1, selectors=[A100])), claim("c2", request(count=3))],
        (),
        [["gpu-1"], ["gpu-0", "gpu-2", "gpu-3"]],
        id="two-claims-first-fit",
    ),
    pytest.param(
        [
            resource_slice("old", gpus(4), node="n1", pool="p", generation=1),
            resource_slice("new", gpus(1), node="n1", pool="p", generation=2),
        ],
        [claim("c", request(count=2))],
        (),
        "no matching device",
        id="newest-generation-only",
    ),
    pytest.param(
        [resource_slice("part", gpus(4), node="n1", pool="p", count=2)],
        [claim("c", request(count=1))],
        (),
        "no matching device",
        id="incomplete-pool",
    ),
    pytest.param(
        [resource_slice("net", [device("nic-0"), device("nic-1")], all_nodes=True, pool="fabric")],
        [claim("c", request(count=2))],
        (),
        [["nic-0", "nic-1"]],
        id="all-nodes-slice",
    ),
    pytest.param(
        [resource_slice("rack", gpus(2), node_selector={"rack": "r1"}, pool="r1")],
        [claim("c", request(count=1))],
        (),
        [["gpu-0"]],
        id="node-selector-slice",
    ),
    pytest.param(
        [resource_slice("rack", gpus(2), node_selector={"rack": "r2"}, pool="r2")],
        [claim("c", request(count=1))],
        (),
        "no matching device",
        id="node-selector-slice-elsewhere",
    ),
    pytest.param(
        MIXED,
        [
            claim(
                "c", request(count=1, selectors=['device.attributes["gpu.example.com"].model == '])
            )
        ],
        (),
        "CEL compile error",
        id="compile-error",
    ),
    pytest.param(
        MIXED,
        [
            claim(
                "c",
                request(count=1, selectors=['device.attributes["other.example.com"].model == "x"']),
            )
        ],
        (),
        "no such key",
        id="runtime-error",
    ),
]


@pytest.mark.parametrize(("slices", "claims", "in_use", "expected"), CASES)
def test_allocate(
    slices: list[dict[str, Any]],
    claims: list[dict[str, Any]],
    in_use: tuple[str, ...],
    expected: list[list[str]] | str,
) -> None:
    inv = inventory(slices)
    node_devices = inv.node_devices("n1", {"rack": "r1"})
    busy = {i for i in node_devices if inv.devices[i].id.device in in_use}
    infos = [claim_from_object(c) for c in claims]
    out = allocate(inv, "n1", node_devices, lambda i: i not in busy, infos)
    if isinstance(expected, str):
        assert out.allocations is None
        assert expected in out.reason
    else:
        assert out.allocations is not None, out.reason
        got = [[r.id.device for r in a.results] for a in out.allocations]
        assert got == expected


def test_allocation_pins_node_and_names_requests() -> None:
    inv = inventory(MIXED)
    c = claim_from_object(
        claim("c", first_available("gpu", request("big", count=4), request("small", count=1)))
    )
    out = allocate(inv, "n1", inv.node_devices("n1", {}), lambda i: i != 0, [c])
    assert out.allocations is not None
    (a,) = out.allocations
    assert a.node_name == "n1" and a.allows("n1", {}) and not a.allows("n2", {})
    assert [r.request for r in a.results] == ["gpu/small"]


def test_class_config_goes_into_the_allocation() -> None:
    cls = device_class()
    cls["spec"]["config"] = [{"opaque": {"driver": "gpu.example.com", "parameters": {"mode": "x"}}}]
    inv = inventory(MIXED, [cls])
    out = allocate(
        inv, "n1", inv.node_devices("n1", {}), lambda i: True, [claim_from_object(claim("c"))]
    )
    assert out.allocations is not None
    assert out.allocations[0].config == (
        {
            "source": "FromClass",
            "requests": ["gpu"],
            "opaque": {"driver": "gpu.example.com", "parameters": {"mode": "x"}},
        },
    )
