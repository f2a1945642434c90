"""Pods are bound; the scheduler serves probes and metrics; SIGTERM ends it cleanly."""

from __future__ import annotations

import pytest
from harness import Cluster, NodeSpec, hold_for, node_of, rebinds_in_log, wait_for

pytestmark = pytest.mark.anyio


async def test_pods_are_bound_and_run(cluster: Cluster, start_scheduler) -> None:
    nodes = await cluster.create_nodes(3, NodeSpec(cpu="2"))
    sluice = await start_scheduler()
    names = [f"p{i}" for i in range(6)]
    await cluster.create_pods(names, cpu="1")
    await cluster.create_pod("not-ours", cpu="100m", scheduler_name="e2e-nobody")

    bound = await wait_for(
        lambda: cluster.all_bound(names) and cluster.bound(names),
        timeout=30,
        what="6 pods bound",
        detail=cluster.describe_pods,
    )
    # 6 pods of 1 cpu on 3 nodes of 2 cpu: each node holds exactly 2.
    assert sorted(bound.values()) == sorted(nodes * 2)
    await wait_for(lambda: cluster.all_running(names), timeout=30, what="pods Running")
    for name in names:
        pod = cluster.pod(name)
        assert pod is not None
        scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
        assert scheduled and scheduled[0]["status"] == "True"

    # A pod of another scheduler is left alone.
    await hold_for(
        lambda: (p := cluster.pod("not-ours")) is not None and not node_of(p),
        seconds=1.0,
        what="the other scheduler's pod staying unbound",
    )
    assert await sluice.http_get("/healthz") == (200, "ok")
    scheduled = await sluice.metric("scheduler_schedule_attempts_total", {"result": "scheduled"})
    assert scheduled is not None and scheduled >= len(names)
    assert cluster.recorder.violations == []


async def test_sigterm_ends_cleanly_and_releases_the_lease(
    cluster: Cluster, start_scheduler
) -> None:
    await cluster.create_nodes(1)
    sluice = await start_scheduler(leader_elect=True)
    lease_name = f"sluice-{cluster.run_id}"
    lease = await wait_for(
        lambda: _held(cluster, lease_name), timeout=20, what="the Lease to be held"
    )
    holder = lease["spec"]["holderIdentity"]
    await wait_for(lambda: sluice.identity() == holder, timeout=10, what="'became leader' logged")
    await cluster.create_pod("p0")
    await wait_for(lambda: cluster.all_bound(["p0"]), timeout=20, what="p0 bound")

    assert await sluice.terminate() == 0
    released = await cluster.get_lease(lease_name)
    assert released is not None
    assert not released["spec"].get("holderIdentity"), released["spec"]
    assert any(r.get("event") == "lease released" for r in sluice.log_records())


async def _held(cluster: Cluster, name: str) -> dict | None:
    lease = await cluster.get_lease(name)
    if lease and (lease.get("spec") or {}).get("holderIdentity"):
        return lease
    return None


async def test_sigterm_mid_burst_then_a_successor_finishes(
    cluster: Cluster, start_scheduler
) -> None:
    """SIGTERM while hundreds of binds are queued: the process ends with 0 and releases
    the Lease; a new replica binds the rest, and no pod is bound twice."""
    await cluster.create_nodes(10, NodeSpec(cpu="8"))
    first = await start_scheduler(leader_elect=True)
    names = [f"p{i:03d}" for i in range(300)]
    await cluster.create_pods(names, cpu="100m")
    await wait_for(lambda: len(cluster.bound(names)) >= 50, timeout=60, what="50 pods bound")
    assert len(cluster.bound(names)) < len(names)  # stopped mid-burst
    assert await first.terminate() == 0
    lease = await cluster.get_lease(f"sluice-{cluster.run_id}")
    assert lease is not None and not lease["spec"].get("holderIdentity"), lease
    second = await start_scheduler(leader_elect=True)
    await wait_for(
        lambda: cluster.all_bound(names),
        timeout=60,
        what="all 300 pods bound by the successor",
        detail=lambda: f"{len(cluster.bound(names))} bound\n{second.tail()}",
    )
    assert rebinds_in_log(second) == []
    assert cluster.recorder.violations == []
