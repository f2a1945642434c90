"""scheduler/sim/emulator/wire.py: what the emulator's reads and writes share of a request
(the seam between its routing and its handlers). The same checks over HTTP are in
test_emulator.py."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.sim.emulator.resource_catalog import BUILTIN_RESOURCES
from scheduler.sim.emulator.responses import HttpError
from scheduler.sim.emulator.wire import Target, incoming, truthy

PODS = next(r for r in BUILTIN_RESOURCES if r.name == "pods" and r.group == "")
NODES = next(r for r in BUILTIN_RESOURCES if r.name == "nodes" and r.group == "")


@pytest.mark.parametrize(
    ("target", "body", "name", "expected"),
    [
        (Target(PODS, "ns"), {}, "", {"kind": "Pod", "apiVersion": "v1", "namespace": "ns"}),
        (Target(PODS, "ns"), {"metadata": {"name": "a"}}, "a", {"name": "a", "namespace": "ns"}),
        (Target(NODES, None), {"metadata": {}}, "n", {"kind": "Node", "name": "n"}),
        (Target(PODS, "ns"), {"kind": "Node"}, "", "do not match the resource"),
        (Target(PODS, "ns"), {"metadata": {"name": "b"}}, "a", "does not match the name"),
        (Target(PODS, "ns"), {"metadata": {"namespace": "x"}}, "", "does not match the namespace"),
        (Target(PODS, "ns"), {"metadata": []}, "", "metadata must be an object"),
    ],
    ids=[
        "completed",
        "named",
        "cluster-scoped",
        "other-kind",
        "other-name",
        "other-namespace",
        "bad-metadata",
    ],
)
def test_a_written_object_is_checked_against_its_path(
    target: Target, body: dict[str, Any], name: str, expected: Any
) -> None:
    if isinstance(expected, str):
        with pytest.raises(HttpError, match=expected):
            incoming(target, body, name)
        return
    out = incoming(target, body, name)
    seen = {**out, **out["metadata"]}
    assert {k: seen.get(k) for k in expected} == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("1", True), ("True", True), ("false", False), ("", False), (None, False)],
    ids=["true", "one", "title", "false", "empty", "absent"],
)
def test_a_switch_of_the_query(value: str | None, expected: bool) -> None:
    assert truthy(value) is expected
