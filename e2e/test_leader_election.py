"""Two replicas with leader election: one leads; kill -9 the leader while pods keep
arriving; the other takes over within 20 s and no pod is bound twice."""

from __future__ import annotations

import time

import anyio
import pytest
from harness import Cluster, NodeSpec, SchedulerProcess, core_path, rebinds_in_log, wait_for

pytestmark = pytest.mark.anyio

TAKEOVER_LIMIT = 20.0
"""What the issue asks for, and what the timings give: the follower sees the last renewal
up to one jittered retry (4.4 s) after it happened and tries again exactly when the lease
it saw expires, 15 s after that: at most 19.4 s after the last renewal, so after a kill."""


async def test_leader_killed_the_other_takes_over(cluster: Cluster, start_scheduler) -> None:
    await cluster.create_nodes(3, NodeSpec(cpu="8"))
    lease_name = f"sluice-{cluster.run_id}"
    replicas = [await start_scheduler(leader_elect=True) for _ in range(2)]

    async def holder() -> str | None:
        lease = await cluster.get_lease(lease_name)
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or None

    first = await wait_for(holder, timeout=30, what="a leader")
    # The holder logs "became leader" just after writing the Lease: wait for the line.
    leader: SchedulerProcess = await wait_for(
        lambda: next((p for p in replicas if p.identity() == first), None),
        timeout=10,
        what=f"the replica {first} to log that it leads",
    )
    follower = next(p for p in replicas if p is not leader)
    assert follower.identity() is None, follower.tail()  # one leader at a time
    assert leader.identity() == first
    lease = await cluster.get_lease(lease_name)
    assert lease is not None
    transitions = int(lease["spec"].get("leaseTransitions") or 0)
    assert not await follower.metric("scheduler_schedule_attempts_total")  # only the leader

    names: list[str] = []
    stop_feeding = anyio.Event()

    async def feed() -> None:
        for i in range(10_000):
            if stop_feeding.is_set():
                return
            name = f"p{i:03d}"
            await cluster.create_pod(name, cpu="100m")
            names.append(name)
            await anyio.sleep(0.25)

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        await wait_for(
            lambda: len(cluster.bound(names)) >= 5, timeout=30, what="the leader binding pods"
        )
        await leader.kill()
        killed_at = time.monotonic()
        new = await wait_for(
            lambda: _other_holder(cluster, lease_name, first),
            timeout=TAKEOVER_LIMIT + 10,
            what="another replica holding the Lease",
            interval=0.2,
        )
        took = time.monotonic() - killed_at
        await anyio.sleep(2.0)  # pods keep arriving under the new leader
        stop_feeding.set()

    assert took <= TAKEOVER_LIMIT, f"takeover took {took:.1f} s"
    print(f"takeover {took:.1f} s after kill -9")
    await wait_for(
        lambda: follower.identity() == new, timeout=10, what="the follower to log that it leads"
    )
    lease = await cluster.get_lease(lease_name)
    assert lease is not None
    assert int(lease["spec"].get("leaseTransitions") or 0) == transitions + 1, lease["spec"]

    await wait_for(
        lambda: cluster.all_bound(names),
        timeout=30,
        what=f"all {len(names)} pods bound",
        detail=lambda: cluster.describe_pods(n for n in names if n not in cluster.bound(names)),
    )
    assert len(names) >= 20  # some arrived before, during and after the takeover
    assert cluster.recorder.violations == []
    assert rebinds_in_log(follower) == []
    assert rebinds_in_log(leader) == []
    assert follower.returncode is None  # still running, still leading
    assert await follower.terminate() == 0


async def _other_holder(cluster: Cluster, lease_name: str, old: str) -> str | None:
    lease = await cluster.get_lease(lease_name)
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    return holder if holder and holder != old else None


async def test_leadership_lost_ends_the_process_with_1(cluster: Cluster, start_scheduler) -> None:
    """Another holder writes the Lease (as a replica that judged it expired would): the
    leader sees it at its next renewal, stops scheduling and exits with 1."""
    await cluster.create_nodes(1)
    sluice = await start_scheduler(leader_elect=True)
    lease_name = f"sluice-{cluster.run_id}"
    await wait_for(lambda: _other_holder(cluster, lease_name, ""), timeout=30, what="a leader")
    lease = await cluster.get_lease(lease_name)
    assert lease is not None
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    stolen = {
        **lease,
        "spec": {
            **lease["spec"],
            "holderIdentity": "e2e-intruder",
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": int(lease["spec"].get("leaseTransitions") or 0) + 1,
        },
    }
    await cluster.api.request(
        "PUT",
        core_path("leases", cluster.lease_namespace, lease_name, group="coordination.k8s.io/v1"),
        body=stolen,
    )
    await wait_for(
        lambda: sluice.returncode is not None,
        timeout=20,
        what="the deposed leader to exit",
        detail=sluice.tail,
    )
    assert sluice.returncode == 1, sluice.tail()
    assert any(r.get("event") == "leadership lost" for r in sluice.log_records()), sluice.tail()
    # It did not release (or rewrite) a Lease that is no longer its own.
    lease = await cluster.get_lease(lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"] == "e2e-intruder"


async def test_a_follower_ends_at_once_on_sigterm(cluster: Cluster, start_scheduler) -> None:
    """SIGTERM to the replica that waits for the Lease ends it with 0 within a few
    seconds (a pod's grace period is 30 s); it does not wait to lead first, and the
    leader goes on leading. (A follower once kept waiting, and was killed when the
    leader was stopped after it.)"""
    await cluster.create_nodes(1)
    lease_name = f"sluice-{cluster.run_id}"
    replicas = [await start_scheduler(leader_elect=True) for _ in range(2)]
    first = await wait_for(
        lambda: _other_holder(cluster, lease_name, ""), timeout=30, what="a leader"
    )
    leader = await wait_for(
        lambda: next((p for p in replicas if p.identity() == first), None),
        timeout=10,
        what=f"the replica {first} to log that it leads",
    )
    follower = next(p for p in replicas if p is not leader)
    started = time.monotonic()
    assert await follower.terminate(timeout=10) == 0, follower.tail()
    assert time.monotonic() - started < 5, follower.tail()
    assert leader.returncode is None, leader.tail()
    lease = await cluster.get_lease(lease_name)
    assert lease is not None and lease["spec"]["holderIdentity"] == first
