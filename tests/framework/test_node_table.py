"""NodeTable.free: the room a task may use, with nominations by priority (KEP-4832) within
a queue."""

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
    (uid ``nom``, of job ``j-nom`` in queue ``a``) of 1 CPU. Jobs ``j-a`` are of queue
    ``a``, ``j-b`` of queue ``b``."""
    nodes = [NodeInfo(name, allocatable=CPU_4) for name in ("n0", "n1", "n2")]
    t = NodeTable(nodes, queue_of={"j-nom": "a", "j-a": "a", "j-b": "b"})
    cpu = t.col["cpu"]
    t.idle[1, cpu] -= 1000
    t.releasing[1, cpu] += 1000
    t.nominate("n2", "nom", 5, t.request(ONE_CPU), add=True, job="j-nom")
    return t


@pytest.mark.parametrize(
    ("priority", "uid", "job", "releasing", "expected"),
    [
        (5, "x", "j-a", False, [4000, 3000, 3000]),  # equal priority: it keeps its room
        (9, "x", "j-a", False, [4000, 3000, 4000]),  # higher priority, same queue: may take it
        (9, "x", "j-b", False, [4000, 3000, 3000]),  # higher priority, another queue: may not
        (1, "nom", "j-nom", False, [4000, 3000, 4000]),  # the nominated task itself
        (5, "x", "j-a", True, [4000, 4000, 3000]),  # releasing room counts while preempting
    ],
    ids=["equal", "higher-same-queue", "higher-other-queue", "itself", "releasing"],
)
def test_free_counts_nominations_by_priority(
    priority: int, uid: str, job: str, releasing: bool, expected: list[int]
) -> None:
    t = table()
    cols = np.array([t.col["cpu"]])
    got = t.free(priority, uid, cols, releasing=releasing, job=job)
    assert got[:, 0].tolist() == expected
    rows = np.array([2, 0])
    free = t.free(priority, uid, cols, rows, releasing=releasing, job=job)
    assert free[:, 0].tolist() == [expected[2], expected[0]]
    by_row = [
        int(t.free_row(priority, uid, r, cols, releasing=releasing, job=job)[0]) for r in range(3)
    ]
    assert by_row == expected


@pytest.mark.parametrize(
    ("priority", "job", "expected"),
    [(9, "j-a", 3000), (11, "j-a", 4000), (1, "j-gang", 4000)],
    ids=["below-the-gang", "above-the-gang", "itself"],
)
def test_a_gang_member_holds_its_room_at_the_gangs_priority(
    priority: int, job: str, expected: int
) -> None:
    """On n2, member ``gm`` (priority 5) of gang ``j-gang`` (priority 10, queue ``a``) is
    nominated: a pod of its queue takes its room only above the gang's priority."""
    nodes = [NodeInfo(name, allocatable=CPU_4) for name in ("n0", "n1", "n2")]
    t = NodeTable(nodes, queue_of={"j-gang": "a", "j-a": "a"}, gang_priority={"j-gang": 10})
    t.nominate("n2", "gm", 5, t.request(ONE_CPU), add=True, job="j-gang")
    uid = "gm" if job == "j-gang" else "x"
    cols = np.array([t.col["cpu"]])
    assert int(t.free_row(priority, uid, 2, cols, job=job)[0]) == expected
