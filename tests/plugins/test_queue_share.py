"""A queue's share (allocated / deserved, the largest over its resources), against
Volcano's own table: capacity_test.go's Test_updateQueueAttrShare, all 17 cases
(tests/conformance/index.yaml names this module for each).

Volcano gives 1 to every queue with no deserved share (a best-effort queue), whatever it
holds, and to a queue that deserves zero and holds something. Sluice gives 1 where the
queue holds nothing and deserves nothing (it has all it deserves: 12 of the 17 cases
agree), and infinity where it holds what it deserves none of (5 cases). The second test
shows why: a queue that deserves nothing and holds pods is the first a reclaim takes
from, before a queue that deserves what it holds; at 1, as Volcano has it, it would be
after queues above their shares, and (at exactly its share) no victim at all.
"""

from __future__ import annotations

import math

import pytest

from scheduler.api import labels as L
from scheduler.plugins.proportion import dominant_share
from tests import simulated
from tests.builders import node, pod, queue

GI = 1 << 30
INF = math.inf


def res(cpu: float = 0, memory_gi: float = 0) -> dict[str, int]:
    """Volcano's BuildResourceList(cpu, memory) in Sluice's units (millicores, bytes)."""
    return {k: v for k, v in (("cpu", round(cpu * 1000)), ("memory", round(memory_gi * GI))) if v}


# (Volcano's case name, deserved, allocated, Volcano's share, Sluice's share). The request
# of each case is left out: neither share reads it (Volcano's case "request should not
# affect share calculation").
CASES = [
    ("best-effort queue with allocated resources", {}, res(1, 1), 1.0, INF),
    ("best-effort queue with pending requests only (no allocated)", {}, {}, 1.0, 1.0),
    ("best-effort queue with both allocated and request", {}, res(1, 1), 1.0, INF),
    ("best-effort queue completely idle", {}, {}, 1.0, 1.0),
    ("queue with deserved but no allocated", res(2, 2), {}, 0.0, 0.0),
    ("queue with deserved, allocated < deserved (CPU dimension)", res(2, 2), res(1, 1), 0.5, 0.5),
    ("queue with deserved, allocated = deserved", res(2, 2), res(2, 2), 1.0, 1.0),
    ("queue with deserved, allocated > deserved (CPU dimension)", res(2, 2), res(3, 2), 1.5, 1.5),
    ("queue with deserved, memory is dominant resource", res(2, 4), res(1, 3), 0.75, 0.75),
    ("queue with deserved, CPU is dominant resource", res(2, 4), res(1.5, 2), 0.75, 0.75),
    ("queue with deserved, allocated exceeds on both dimensions", res(2, 2), res(3, 3), 1.5, 1.5),
    (
        "queue with deserved, request should not affect share calculation",
        res(2, 2),
        res(1, 1),
        0.5,
        0.5,
    ),
    ("queue with deserved but zero values", {"cpu": 0, "memory": 0}, res(1, 1), 1.0, INF),
    ("queue with deserved, allocated is zero", res(2, 2), {}, 0.0, 0.0),
    ("best-effort queue with only CPU allocated", {}, res(1, 0), 1.0, INF),
    ("best-effort queue with only memory allocated", {}, res(0, 1), 1.0, INF),
    ("best-effort queue with only CPU request (no allocated)", {}, {}, 1.0, 1.0),
]


@pytest.mark.parametrize(
    ("deserved", "allocated", "volcano", "sluice"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_queue_share_against_volcanos_table(
    deserved: dict[str, int], allocated: dict[str, int], volcano: float, sluice: float
) -> None:
    assert dominant_share(allocated, deserved) == sluice
    if sluice != volcano:
        # the only cases that differ: the queue holds something it deserves none of
        assert any(n > 0 and deserved.get(r, 0) <= 0 for r, n in allocated.items())


def test_the_table_is_volcanos_whole_table() -> None:
    assert len(CASES) == 17
    assert sum(c[3] != c[4] for c in CASES) == 5


def test_a_queue_holding_what_it_deserves_none_of_is_reclaimed_from_first() -> None:
    """One node of 5 CPU, full: ``free`` deserves no CPU (an explicit 0) and runs two 1-CPU
    pods; ``over`` deserves 2 and runs three; ``starved`` deserves 2 and waits with one.
    Ranked by share, ``free`` (infinite) gives before ``over`` (1.5): its pod goes. With
    Volcano's share (1 for ``free``), ``over`` would be the queue furthest above its
    share and ``free``, at exactly 1, would not be above its share at all: ``over``
    would lose a pod it deserves while ``free`` kept two it deserves none of."""
    objects = [
        node("n1", cpu="5"),
        queue("free", deserved={"cpu": "0"}),
        queue("over", deserved={"cpu": "2"}),
        queue("starved", deserved={"cpu": "2"}),
        *(
            pod(f"free-{i}", cpu="1", memory=None, node="n1", labels={L.QUEUE_LABEL: "free"})
            for i in range(2)
        ),
        *(
            pod(f"over-{i}", cpu="1", memory=None, node="n1", labels={L.QUEUE_LABEL: "over"})
            for i in range(3)
        ),
        pod("starved-0", cpu="1", memory=None, labels={L.QUEUE_LABEL: "starved"}),
    ]
    sim = simulated.simulate(objects)
    assert [e.split("/")[1].split("-")[0] for e in sim.result.evictions] == ["free"]
    assert sim.result.bindings == {"default/starved-0": "n1"}
