"""NodeTable.free: the room a task may use, with nominations by priority (KEP-4832)."""

from __future__ import annotations

import numpy as np
import pytest

from scheduler.api.node import NodeInfo
from scheduler.api.resource import Resource
from scheduler.framework.node_table import NodeTable

CPU_4 = Resource.parse({"cpu": "4", "memory": "1Gi", "pods": "10"}, obj="Node n", field="x")
ONE_CPU = Resource.parse({"cpu": "1"}, obj="Pod p", field="x")


def table() -> NodeTable:
    """Three nodes of 4 CPU: n1 has 1 CPU releasing; n2 has a nomination of priority 5
    (uid ``nom``) of 1 CPU."""
    nodes = [NodeInfo(name, allocatable=CPU_4) for name in ("n0", "n1", "n2")]
    t = NodeTable(nodes)
    cpu = t.col["cpu"]
    t.idle[1, cpu] -= 1000
    t.releasing[1, cpu] += 1000
    t.nominate("n2", "nom", 5, t.request(ONE_CPU), add=True)
    return t


@pytest.mark.parametrize(
    ("priority", "uid", "releasing", "expected"),
    [
        (5, "x", False, [4000, 3000, 3000]),  # equal priority: the nomination keeps its room
        (9, "x", False, [4000, 3000, 4000]),  # higher priority: it may take it
        (1, "nom", False, [4000, 3000, 4000]),  # the nominated task itself
        (5, "x", True, [4000, 4000, 3000]),  # releasing room counts while preempting
    ],
)
def test_free_counts_nominations_by_priority(
    priority: int, uid: str, releasing: bool, expected: list[int]
) -> None:
    t = table()
    cols = np.array([t.col["cpu"]])
    assert t.free(priority, uid, cols, releasing=releasing)[:, 0].tolist() == expected
    rows = np.array([2, 0])
    free = t.free(priority, uid, cols, rows, releasing=releasing)
    assert free[:, 0].tolist() == [expected[2], expected[0]]
    by_row = [int(t.free_row(priority, uid, r, cols, releasing=releasing)[0]) for r in range(3)]
    assert by_row == expected
