"""What users see back: PodGroup and Queue status, FailedScheduling events."""

from __future__ import annotations

import re

import pytest
from harness import Cluster, NodeSpec, condition, node_of, quantity, wait_for

pytestmark = pytest.mark.anyio


async def test_pod_group_and_queue_status(cluster: Cluster, start_scheduler) -> None:
    await cluster.create_nodes(1, NodeSpec(cpu="4", memory="8Gi"))
    queue = await cluster.create_queue("team-a", weight=1)
    await start_scheduler()
    await cluster.create_pod_group("job", min_member=2, queue=queue)
    members = ["job-0", "job-1"]
    await cluster.create_pods(members, cpu="500m", memory="1Gi", group="job")
    await wait_for(lambda: cluster.all_running(members), timeout=30, what="members Running")

    async def pod_group_running() -> dict | None:
        pg = await cluster.get_pod_group("job")
        status = (pg or {}).get("status") or {}
        ok = status.get("phase") == "Running" and status.get("running") == 2
        return status if ok else None

    status = await wait_for(pod_group_running, timeout=30, what="PodGroup phase Running, running 2")
    scheduled = [c for c in status.get("conditions") or () if c.get("type") == "Scheduled"]
    assert scheduled and scheduled[0]["status"] == "True", status
    assert scheduled[0].get("lastTransitionTime")

    async def queue_allocated() -> dict | None:
        q = await cluster.get_queue(queue)
        st = (q or {}).get("status") or {}
        alloc = st.get("allocated") or {}
        if "cpu" in alloc and quantity(alloc["cpu"]) == quantity("1"):
            return st
        return None

    qs = await wait_for(queue_allocated, timeout=30, what=f"Queue {queue} allocated cpu 1")
    assert quantity(qs["allocated"]["memory"]) == quantity("2Gi"), qs
    assert qs.get("running") == 1, qs  # one PodGroup running in the queue
    assert qs.get("state") == "Open", qs


async def test_failed_scheduling_event_and_condition(cluster: Cluster, start_scheduler) -> None:
    await cluster.create_nodes(2, NodeSpec(cpu="1"))
    await start_scheduler()
    await cluster.create_pod("too-big", cpu="4")

    async def failed_scheduling() -> list[dict]:
        return [
            e
            for e in await cluster.events()
            if e.get("reason") == "FailedScheduling"
            and (e.get("regarding") or {}).get("name") == "too-big"
        ]

    events = await wait_for(failed_scheduling, timeout=30, what="a FailedScheduling event")
    event = events[0]
    note = str(event.get("note") or "")
    assert event.get("type") == "Warning"
    assert (event.get("regarding") or {}).get("kind") == "Pod"
    m = re.search(r"0/(\d+) nodes are available", note)
    assert m, note
    total = int(m.group(1))
    assert total >= 2 if not cluster.emulated else total == 2, note
    assert re.search(r"\b2 Insufficient cpu\b", note), note

    # The condition is a separate write from the event: wait for it as well.
    cond = await wait_for(
        lambda: condition(cluster.pod("too-big") or {}, "PodScheduled"),
        timeout=30,
        what="the PodScheduled condition of too-big",
    )
    assert cond["status"] == "False" and cond["reason"] == "Unschedulable", cond
    assert "0/2 nodes are available" in str(cond.get("message")) or not cluster.emulated, cond
    assert not node_of(cluster.pod("too-big") or {})
