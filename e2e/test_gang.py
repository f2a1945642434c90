"""A gang is bound in full or not at all."""

from __future__ import annotations

import pytest
from harness import Cluster, NodeSpec, condition, hold_for, wait_for

pytestmark = pytest.mark.anyio


async def test_gang_waits_for_room_for_all_members(cluster: Cluster, start_scheduler) -> None:
    # Room for 2 pods of 1 cpu; the gang needs 3.
    await cluster.create_nodes(2, NodeSpec(cpu="1"))
    await start_scheduler()
    await cluster.create_pod_group("gang", min_member=3)
    members = [f"gang-{i}" for i in range(3)]
    await cluster.create_pods(members, cpu="1", group="gang")

    async def unschedulable() -> bool:
        pg = await cluster.get_pod_group("gang")
        conds = {c.get("type"): c for c in ((pg or {}).get("status") or {}).get("conditions") or ()}
        return conds.get("Unschedulable", {}).get("status") == "True"

    # The scheduler has considered the gang (and said why it waits) ...
    await wait_for(unschedulable, timeout=30, what="PodGroup gang Unschedulable")
    # ... and none of its members is bound, over several cycles.
    await hold_for(
        lambda: not cluster.bound(members), seconds=3.0, what="no member of the gang bound"
    )
    for m in members:
        pod = cluster.pod(m)
        assert pod is not None
        scheduled = condition(pod, "PodScheduled")
        assert scheduled and scheduled["status"] == "False", cluster.describe_pods(members)

    await cluster.create_node("n2", NodeSpec(cpu="1"))
    bound = await wait_for(
        lambda: cluster.all_bound(members) and cluster.bound(members),
        timeout=30,
        what="the whole gang bound once a third node exists",
        detail=lambda: cluster.describe_pods(members),
    )
    assert len(set(bound.values())) == 3  # one member per node: 1 cpu each
    assert cluster.recorder.violations == []
