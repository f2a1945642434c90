"""Events as users expect them: a ``Scheduled`` event for every bound pod, and a
``FailedScheduling`` event for each unschedulable pod, repeated (as a series) after its
backoff; nothing dropped."""

from __future__ import annotations

from collections import Counter

import pytest
from harness import Cluster, NodeSpec, uid_of, wait_for

pytestmark = pytest.mark.anyio

BOUND = 300
STUCK = 20


async def test_scheduled_for_every_bound_pod_failed_scheduling_for_every_stuck_one(
    cluster: Cluster, start_scheduler
) -> None:
    await cluster.create_nodes(3, NodeSpec(cpu="4", pods=200))
    sluice = await start_scheduler(extra_args=["--kube-api-qps", "500", "--kube-api-burst", "500"])
    bound = [f"p{i:03d}" for i in range(BOUND)]
    stuck = [f"big{i:02d}" for i in range(STUCK)]
    await cluster.create_pods(bound, cpu="10m", memory="16Mi")
    await cluster.create_pods(stuck, cpu="5")  # no node has 5 cpu
    await wait_for(lambda: cluster.all_bound(bound), timeout=60, what="300 pods bound")

    # From the API server, not the harness's watch, which may not show the last pods yet.
    uids = {str(p["metadata"]["name"]): uid_of(p) for p in await cluster.list_pods()}
    assert all(uids.get(n) for n in bound + stuck), "a pod created has no uid"

    async def by_reason(reason: str) -> dict[str, dict]:
        return {
            str((e.get("regarding") or {}).get("uid")): e
            for e in await cluster.events()
            if e.get("reason") == reason
        }

    async def all_scheduled() -> bool:
        return {uids[n] for n in bound} <= (await by_reason("Scheduled")).keys()

    async def missing() -> str:
        have = await by_reason("Scheduled")
        return f"{sum(1 for n in bound if uids[n] not in have)} of {BOUND} without one"

    await wait_for(
        all_scheduled, timeout=60, what="a Scheduled event per bound pod", detail=missing
    )
    scheduled = await by_reason("Scheduled")
    for name in bound:
        event = scheduled[uids[name]]
        assert event["type"] == "Normal" and event["reportingController"] == "sluice"
        assert event["note"].startswith(f"Successfully assigned {cluster.namespace}/{name} to ")

    async def all_failed() -> bool:
        return {uids[n] for n in stuck} <= (await by_reason("FailedScheduling")).keys()

    async def failed_detail() -> str:
        have = await by_reason("FailedScheduling")
        lacking = [n for n in stuck if uids[n] not in have]
        conditions = {
            n: ((cluster.pod(n) or {}).get("status") or {}).get("conditions") for n in lacking[:3]
        }
        events = await cluster.events()
        by_name = [
            (e.get("reason"), (e.get("regarding") or {}).get("uid"), uids[n])
            for e in events
            for n in lacking
            if (e.get("regarding") or {}).get("name") == n
        ]
        _, metrics = await sluice.http_get("/metrics")
        counters = [
            line
            for line in metrics.splitlines()
            if line.startswith(("scheduler_events", "scheduler_pending", "scheduler_api"))
        ]
        return (
            f"{len(lacking)} of {STUCK} without one: {lacking[:5]}; conditions: {conditions}\n"
            + f"{len(events)} events; of those pods: {by_name}\n"
            + "\n".join(counters)
        )

    await wait_for(
        all_failed, timeout=60, what="a FailedScheduling event per stuck pod", detail=failed_detail
    )

    async def repeated() -> bool:
        events = await by_reason("FailedScheduling")
        counts = [int((events[uids[n]].get("series") or {}).get("count") or 1) for n in stuck]
        return min(counts) >= 2

    # Backoff 1 s, then 2 s: every stuck pod's event is repeated within seconds, and the
    # first repeat of a series is written at once.
    await wait_for(repeated, timeout=30, what="every FailedScheduling repeated as a series")
    failed = await by_reason("FailedScheduling")
    for name in stuck:
        event = failed[uids[name]]
        assert event["type"] == "Warning"
        assert "nodes are available" in event["note"] and "Insufficient cpu" in event["note"]
    dropped = await sluice.metric("scheduler_events_dropped_total")
    assert not dropped, dropped
    assert cluster.recorder.violations == []


PROXIED = 120


@pytest.mark.faults(rate=0.15, lost_rate=0.05, kinds=("create", "bind", "patch"), seed=26)
async def test_no_event_lost_under_the_fault_proxy(cluster: Cluster, start_scheduler) -> None:
    """Behind the fault proxy, 15 % of creates (events among them), binds and patches
    refused and 5 % of their replies lost: every bound pod still gets its ``Scheduled``
    event, once, and none is counted dropped (docs/operating/events-and-conditions.md:
    'none now')."""
    await cluster.create_nodes(2, NodeSpec(cpu="4", pods=200))
    sluice = await start_scheduler(extra_args=["--kube-api-qps", "500", "--kube-api-burst", "500"])
    names = [f"f{i:03d}" for i in range(PROXIED)]
    await cluster.create_pods(names, cpu="10m", memory="16Mi")
    await wait_for(lambda: cluster.all_bound(names), timeout=90, what="the pods bound")
    uids = {str(p["metadata"]["name"]): uid_of(p) for p in await cluster.list_pods()}

    async def scheduled() -> list[dict]:
        return [e for e in await cluster.events() if e.get("reason") == "Scheduled"]

    async def all_scheduled() -> bool:
        have = {str((e.get("regarding") or {}).get("uid")) for e in await scheduled()}
        return {uids[n] for n in names} <= have

    async def missing() -> str:
        have = {str((e.get("regarding") or {}).get("uid")) for e in await scheduled()}
        lacking = [n for n in names if uids[n] not in have]
        return f"{len(lacking)} of {PROXIED} without one: {lacking[:5]}; faults {cluster.faults}"

    await wait_for(all_scheduled, timeout=90, what="a Scheduled event per pod", detail=missing)
    per_pod = Counter(str((e.get("regarding") or {}).get("uid")) for e in await scheduled())
    assert max(per_pod.values()) == 1, per_pod.most_common(3)  # a lost reply: not twice
    assert cluster.faults is not None and cluster.faults.failed.get("create", 0) > 0
    dropped = await sluice.metric("scheduler_events_dropped_total")
    assert not dropped, dropped
