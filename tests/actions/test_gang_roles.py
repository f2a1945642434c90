"""A gang's role minimums are placed before any surplus member (issue 38 point 2), by
every action that places a gang: allocate (tests/scenarios/gang_roles_before_surplus_*),
backfill, and the victim search of preempt and reclaim; whatever order the gang's pods
were created in.

The gang: a PodGroup of minMember 3 with minTaskMember {ps: 1, worker: 2}, three workers
and one ps pod, created one a second in the order of the case, on a node with room for
three pods once the actions have done their work. Placed in creation order, three workers
took the room, the ps pod found none, and the gang never started.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import labels as L
from scheduler.config import SchedulerConfiguration
from tests import simulated
from tests.builders import node, pod, pod_group, queue

Obj = dict[str, Any]
ROLES = {"ps": 1, "worker": 2}

ORDERS = {
    "workers-before-ps": ["worker-0", "worker-1", "worker-2", "ps-0"],
    "ps-before-workers": ["ps-0", "worker-0", "worker-1", "worker-2"],
    "interleaved": ["worker-0", "ps-0", "worker-1", "worker-2"],
}


def gang(
    order: list[str], *, cpu: str | None, priority: int = 0, queue_name: str = ""
) -> list[Obj]:
    """The PodGroup ``train`` and its four pods, one arriving each second in ``order``."""
    out: list[Obj] = [
        pod_group("train", min_member=3, queue=queue_name or None, min_task_member=ROLES)
    ]
    for i, name in enumerate(order):
        out.append(
            pod(
                name,
                cpu=cpu,
                memory=None,
                group="train",
                role=name.split("-")[0],
                priority=priority,
                annotations={"sim.sluice.dev/arrival": f"{i}s"},
                terminationGracePeriodSeconds=0,
            )
        )
    return out


def backfill_world(order: list[str]) -> list[Obj]:
    """Best-effort pods (no requests) on a node of three pod slots: backfill places them."""
    return [node("n1", cpu="4", pods=3), *gang(order, cpu=None)]


def preempt_world(order: list[str]) -> list[Obj]:
    """A node of 3 CPU full with three low-priority pods; the gang (1 CPU a pod) of
    priority 100 preempts them."""
    low = [pod(f"low-{i}", cpu="1", memory=None, node="n1", priority=1) for i in range(3)]
    return [node("n1", cpu="3"), *low, *gang(order, cpu="1", priority=100)]


def reclaim_world(order: list[str]) -> list[Obj]:
    """Queue ``b`` (deserving nothing) fills a node of 3 CPU; the gang of queue ``a``
    (deserving 3 CPU) reclaims it."""
    held = [
        pod(f"b-{i}", cpu="1", memory=None, node="n1", labels={L.QUEUE_LABEL: "b"})
        for i in range(3)
    ]
    queues = [queue("a", deserved={"cpu": "3"}), queue("b", deserved={"cpu": "0"})]
    return [node("n1", cpu="3"), *queues, *held, *gang(order, cpu="1", queue_name="a")]


WORLDS = {"backfill": backfill_world, "preempt": preempt_world, "reclaim": reclaim_world}


@pytest.mark.parametrize("order", list(ORDERS), ids=list(ORDERS))
@pytest.mark.parametrize("path", list(WORLDS), ids=list(WORLDS))
def test_role_minimums_go_before_the_surplus(path: str, order: str) -> None:
    sim = simulated.simulate(WORLDS[path](ORDERS[order]), config=SchedulerConfiguration())
    placed = sorted(
        p for p in sim.result.bindings if p.split("/")[1].split("-")[0] in ("ps", "worker")
    )
    assert "default/ps-0" in placed, (sim.result.bindings, sim.result.pending)
    assert len(placed) == 3, (sim.result.bindings, sim.result.pending)
    assert sim.result.pod_groups["default/train"] == "Running"
