"""Two shards by node pool on one API server (issue 25 point 3): each binds its pool's
gangs and preemptors on its pool's nodes only; a pod of a pool no shard serves says so;
shard a's leader is killed with SIGKILL while shard b keeps binding, and a's standby
takes over; at no watch event is a pod on a node of another pool."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import SCHEDULER_NAME
from harness import Cluster, NodeSpec, condition, node_of, wait_for

pytestmark = pytest.mark.anyio

POOL_LABEL = "scheduling.sluice.dev/node-pool"


def shard_config(tmp_path: Path, pools: dict[str, str]) -> Path:
    """A configuration listing the shards (name -> pool), as one ConfigMap would."""
    path = tmp_path / "shards.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "scheduling.sluice.dev/v1alpha1",
                "kind": "SchedulerConfiguration",
                "schedulerName": SCHEDULER_NAME,
                "shards": [{"name": n, "nodePool": p} for n, p in pools.items()],
            }
        )
    )
    return path


class PoolWatch:
    """On every pod watch event: a pod with a node is on a node of its own pool."""

    def __init__(self, cluster: Cluster, node_pools: dict[str, str]) -> None:
        self.node_pools = node_pools
        self.crossings: list[str] = []
        self.events = 0
        cluster.informer.listeners.append(self.observe)

    def observe(self, kind: str, pod: dict[str, Any]) -> None:
        self.events += 1
        node = node_of(pod)
        if not node or kind == "DELETED":
            return
        want = ((pod.get("metadata") or {}).get("labels") or {}).get(POOL_LABEL)
        if self.node_pools.get(node) != want:
            name = pod["metadata"]["name"]
            self.crossings.append(f"{name} of pool {want} on {node} ({self.node_pools.get(node)})")


async def create_pod_group(cluster: Cluster, name: str, pool: str, min_member: int) -> None:
    """A PodGroup of the run, labelled for ``pool`` from the start."""
    body = {
        "apiVersion": "scheduling.sluice.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": cluster.namespace, "labels": {POOL_LABEL: pool}},
        "spec": {"minMember": min_member},
    }
    path = f"/apis/scheduling.sluice.dev/v1alpha1/namespaces/{cluster.namespace}/podgroups"
    await cluster.api.request("POST", path, body=body)


async def test_two_shards_two_pools(cluster: Cluster, start_scheduler: Any, tmp_path: Path) -> None:
    pools = {"a": f"a-{cluster.run_id}", "b": f"b-{cluster.run_id}"}
    config = shard_config(tmp_path, pools)
    node_pools: dict[str, str] = {}
    for shard, pool in pools.items():
        for i in range(2):
            name = await cluster.create_node(
                f"{shard}{i}", NodeSpec(cpu="4"), labels={POOL_LABEL: pool}
            )
            node_pools[name] = pool
    watch = PoolWatch(cluster, node_pools)
    low = await cluster.create_priority_class("low", 100)
    high = await cluster.create_priority_class("high", 10_000)

    def of(shard: str) -> dict[str, str]:
        return {POOL_LABEL: pools[shard]}

    def lease(shard: str) -> str:
        return f"sluice-{cluster.run_id}-{shard}"

    def shard_args(shard: str) -> list[str]:
        return ["--config", str(config), "--shard", shard]

    replicas_a = [
        await start_scheduler(leader_elect=True, lease_name=lease("a"), extra_args=shard_args("a"))
        for _ in range(2)
    ]
    await start_scheduler(leader_elect=True, lease_name=lease("b"), extra_args=shard_args("b"))

    async def holder(shard: str) -> str | None:
        found = await cluster.get_lease(lease(shard))
        return ((found or {}).get("spec") or {}).get("holderIdentity") or None

    first_a = await wait_for(lambda: holder("a"), timeout=30, what="a leader of shard a")
    await wait_for(lambda: holder("b"), timeout=30, what="a leader of shard b")
    leader_a = await wait_for(
        lambda: next((p for p in replicas_a if p.identity() == first_a), None),
        timeout=10,
        what="shard a's leader to log that it leads",
    )
    standby_a = next(p for p in replicas_a if p is not leader_a)

    # In each pool (two nodes of 4 CPU): a gang of 3 (1 CPU each, high priority),
    # low-priority pods filling the rest, then a preemptor that must evict one of those;
    # and a pod of a pool no shard serves.
    for shard, pool in pools.items():
        await create_pod_group(cluster, f"gang-{shard}", pool, 3)
        for i in range(3):
            await cluster.create_pod(
                f"gang-{shard}-{i}", cpu="1", group=f"gang-{shard}", priority=high, labels=of(shard)
            )
        for i in range(5):
            await cluster.create_pod(f"low-{shard}-{i}", cpu="1", priority=low, labels=of(shard))
    await cluster.create_pod("stray", cpu="100m", labels={POOL_LABEL: f"z-{cluster.run_id}"})
    everyone = [f"gang-{s}-{i}" for s in pools for i in range(3)]
    everyone += [f"low-{s}-{i}" for s in pools for i in range(5)]
    await wait_for(
        lambda: cluster.all_running(everyone),
        timeout=60,
        what="both pools' gangs and fillers running",
        detail=cluster.describe_pods,
    )
    for shard in pools:
        await cluster.create_pod(f"high-{shard}", cpu="1", priority=high, labels=of(shard))
    await wait_for(
        lambda: cluster.all_bound([f"high-{s}" for s in pools]),
        timeout=60,
        what="each pool's preemptor bound",
        detail=cluster.describe_pods,
    )
    for shard in pools:
        preemptor = cluster.recorder.history(f"high-{shard}")
        assert preemptor is not None and preemptor.nominated, preemptor
        gone = [
            h
            for h in (cluster.recorder.history(f"low-{shard}-{i}") for i in range(5))
            if h is not None and h.deleted
        ]
        assert len(gone) == 1, cluster.describe_pods()  # one victim, of its own pool
    stray = await wait_for(
        lambda: condition(cluster.pod("stray") or {}, "PodScheduled"),
        timeout=30,
        what="the stray pod's reason",
    )
    assert "no shard of this scheduler serves" in stray.get("message", ""), stray

    # Room for the late pods: a third node in each pool (the pools are full).
    for shard, pool in pools.items():
        name = await cluster.create_node(f"{shard}2", NodeSpec(cpu="4"), labels={POOL_LABEL: pool})
        node_pools[name] = pool

    # Shard a's leader dies; shard b keeps binding while a's standby waits for the lease.
    names: dict[str, list[str]] = {"a": [], "b": []}
    await leader_a.kill()
    killed = time.monotonic()
    b_bound_before_takeover = 0
    taken: float | None = None
    for i in range(40):
        for shard in pools:
            name = f"late-{shard}-{i}"
            await cluster.create_pod(name, cpu="10m", labels=of(shard))
            names[shard].append(name)
        if taken is None:
            now_holder = await holder("a")
            if now_holder and now_holder != first_a:
                taken = time.monotonic() - killed
                b_bound_before_takeover = len(cluster.bound(names["b"]))
        await anyio.sleep(0.5)
    assert taken is not None, "shard a's standby never took over"
    assert b_bound_before_takeover >= 5, "shard b stopped binding while shard a failed over"
    await wait_for(
        lambda: cluster.all_bound(names["a"] + names["b"]),
        timeout=60,
        what="every late pod bound",
        detail=cluster.describe_pods,
    )
    assert standby_a.identity() is not None
    print(
        f"shard a taken over {taken:.1f} s after the kill; shard b bound "
        f"{b_bound_before_takeover} pods meanwhile; {watch.events} watch events checked"
    )
    assert watch.crossings == []
    assert cluster.recorder.violations == []
